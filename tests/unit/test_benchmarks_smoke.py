"""The benchmarks still run: their data, their measuring helpers and run.py, on tiny sizes."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ROOT


def test_table_is_one_aligned_block() -> None:
    """The text table has a title, a header, a rule and one line per measure, values aligned."""
    from benchmarks._report import Measure, render_markdown, render_text

    rows = [Measure("1 requests", "a", 5.0, "req/task"), Measure("2 cpu", "bb", 12.25, "CPU s")]
    lines = render_text(rows, "title").splitlines()
    assert lines[0] == "title" and lines[1].startswith("section") and set(lines[2]) <= {"-", " "}
    assert lines[3].index("5.000") + len("5.000") == lines[4].index("12.2") + len("12.2")
    assert render_markdown(rows, "t").count("\n| ") == 3


def test_workbook_rows_are_realistic_and_nothing_is_due() -> None:
    """Generated rows: unique keys, mostly done, nothing due or expired at NOW but the extras."""
    from benchmarks._workbook import NOW, log_records, queue_records

    rows = queue_records(400, due=3)
    assert len({r["idempotency_key"] for r in rows}) == 403
    statuses = [r["status"] for r in rows[:400]]
    assert statuses.count("done") > 300
    for row in rows[:400]:
        if row["status"] in ("pending", "retry"):
            assert datetime.fromisoformat(str(row["next_retry_at"])) > NOW
            assert (NOW - datetime.fromisoformat(str(row["created_at"]))).days < 3
    assert [r["status"] for r in rows[400:]] == ["pending"] * 3
    assert len(log_records(rows[:10])) == 40


def test_request_counts_against_the_emulator() -> None:
    """Tiny runs: batches beat batches of one, baseline ≈ 6 req/task, enqueue 2 requests
    (1 read + 1 write, one by one too)."""
    from benchmarks._google import CountingEmulator, request_costs

    emu = CountingEmulator().start()
    try:
        rows = {m.measure: m for m in request_costs(emu, 12, (1, 10), hooks=3)}
    finally:
        emu.stop()
    assert rows["process --batch-size 10"].value < rows["process --batch-size 1"].value <= 7
    assert 6 <= float(rows["row-by-row baseline (Apps Script style)"].value) < 7
    assert rows["enqueue, 1 task"].value == 2
    hooks = rows["enqueue one by one (webhooks)"]
    assert hooks.value == 2 and "3 reads + 3 writes; 60 tasks/min" in hooks.note, hooks
    assert rows["enqueue --jsonl, 1,000 lines"].value == 0.002


def test_child_measures_one_command(tmp_path: Path) -> None:
    """A child process runs a command on a built workbook and reports CPU, memory and JSON."""
    from benchmarks._google import bench_config
    from benchmarks._local import child
    from benchmarks._workbook import build_local, with_due

    (tmp_path / "sheetq.toml").write_text(bench_config())
    db = with_due(build_local(tmp_path / "q.db", 300), tmp_path / "d.db")
    doc: dict[str, Any] = child(["status", "--json"], db, tmp_path)
    assert doc["code"] == 0, doc
    assert doc["cpu_s"] > 0 and doc["peak_rss_mb"] >= doc["rss_after_imports_mb"] > 0
    assert doc["result"]["total"] == 310
    done = child(["process", "--json"], db, tmp_path)
    assert done["result"]["done"] == 10, done


@pytest.mark.slow
def test_run_py_prints_one_json_table(monkeypatch: pytest.MonkeyPatch) -> None:
    """benchmarks/run.py end to end on a tiny local workbook, as JSON: every section present."""
    import io

    from benchmarks import run

    out = io.StringIO()
    monkeypatch.setattr("sys.stdout", out)
    args = ["--skip-google", "--sizes", "200", "--repeat", "1", "--startup-runs", "1", "-q"]
    assert run.main([*args, "--json"]) == 0
    doc = json.loads(out.getvalue())
    sections = {row["section"] for row in doc["rows"]}
    assert sections == {"2 cpu (local)", "3 startup", "4 memory"}
    assert all(row["value"] != "n/a" for row in doc["rows"]), doc["rows"]
    assert (ROOT / "benchmarks" / "README.md").exists()


@pytest.mark.slow
@pytest.mark.google
def test_ingress_benchmark_runs(capsys: pytest.CaptureFixture[str]) -> None:
    """benchmarks/ingress.py on tiny sizes: serve needs fewer requests per webhook than one
    `sheetq enqueue` per webhook (60 a minute), and prints its local rate and latency."""
    from benchmarks.ingress import main

    assert main(["--requests", "20", "--burst", "20", "--one-by-one", "2", "--skip-postgres",
                 "--json"]) == 0  # fmt: skip
    rows = {r["measure"]: r for r in json.loads(capsys.readouterr().out)["rows"]}
    serve = rows["webhooks/min within quota: serve (batch_window 1s)"]["value"]
    assert rows["webhooks/min within quota: one enqueue per webhook"]["value"] == 60
    assert serve > 60
    assert rows["serve: requests/s"]["value"] > 0 and rows["serve: p99 latency"]["value"] > 0
