"""`sheetq stats` through the CLI: counts equal the log, exact percentiles on a frozen clock,
filters, an empty log, bad input, and the Google request budget (docs/design.md §8)."""

from __future__ import annotations

import json
import math
import re
import sys
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from sheetq.times import format_ts
from tests.conftest import SHARED, Book, run_cli, write_config

ON_POSTGRES = True  # the behavioural suite: also runs on PostgreSQL (docs/design.md §10)

LEADS = SHARED / "data" / "leads.jsonl"
T0 = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
# Fails permanently (65) for a tenth of the leads and transiently (75) on the first attempt
# for a fifth, chosen by a hash of name and phone: the same leads on every run.
LEAD_HANDLER = """
import hashlib
from sheetq import FailTask, RetryTask

def push(task):
    lead = task.payload
    digest = hashlib.sha256(f"{lead.get('name')}|{lead.get('phone')}".encode()).hexdigest()
    bucket = int(digest[:8], 16) % 10
    if bucket == 0:
        raise FailTask("CRM refused the lead")
    if bucket in (1, 2) and task.attempt == 1:
        raise RetryTask("CRM busy")
    return "crm-" + str(lead.get("lead_id"))
"""
OK = "import sys\nsys.stdin.read()\nprint('ok')\n"


def _at(monkeypatch: pytest.MonkeyPatch, when: datetime) -> None:
    monkeypatch.setenv("SHEETQ_NOW", when.strftime("%Y-%m-%dT%H:%M:%SZ"))


def _command(tmp_path: Path, name: str, body: str) -> str:
    """A fast Python command handler (-S -E: stdlib only, no site start-up)."""
    script = tmp_path / f"{name}.py"
    script.write_text(body, encoding="utf-8")
    return json.dumps([sys.executable, "-S", "-E", str(script)])


def _enqueue(payload: dict[str, Any], task_type: str = "job") -> str:
    r = run_cli(["enqueue", task_type, json.dumps(payload), "--json"])
    assert r.code == 0, r.stderr
    return str(r.json()["task_id"])


def _nearest_rank(values: list[int], p: float) -> int | None:
    ordered = sorted(values)
    return ordered[max(1, math.ceil(p / 100 * len(ordered))) - 1] if ordered else None


def _expected_from_log(book: Book) -> dict[str, Any]:
    """What `stats` must say, counted straight from the QueueLog rows."""
    log = book.log()
    events = Counter(e["event"] for e in log)
    done = events["done"] + sum(
        1 for e in log if e["event"] == "recovered" and e["status"] == "done"
    )
    failed = events["failed"] + events["expired"]
    failed += sum(1 for e in log if e["event"] == "recovered" and e["status"] == "failed")
    retry = events["retry"]
    retry += sum(1 for e in log if e["event"] == "recovered" and e["status"] == "retry")
    finished = done + failed + events["skipped"]
    enqueued_at = {e["task_id"]: e["ts"] for e in log if e["event"] == "enqueued"}
    done_at: dict[str, str] = {}
    for e in log:
        if e["event"] == "done":
            done_at.setdefault(e["task_id"], e["ts"])
    waits = [
        int((datetime.fromisoformat(ts) - datetime.fromisoformat(enqueued_at[t])).total_seconds())
        for t, ts in done_at.items()
        if t in enqueued_at
    ]
    return {
        "enqueued": events["enqueued"],
        "duplicate": events["duplicate"],
        "conflict": events["conflict"],
        "done": done,
        "retry": retry,
        "failed": failed,
        "success_rate": done / finished if finished else None,
        "dead_letter_rate": failed / finished if finished else None,
        "p50_seconds": _nearest_rank(waits, 50),
        "p95_seconds": _nearest_rank(waits, 95),
    }


def _printed(stdout: str, label: str) -> str:
    match = re.search(rf"^{re.escape(label)}\s+(\S+)", stdout, re.MULTILINE)
    assert match, stdout
    return match.group(1)


@pytest.mark.skipif(not LEADS.exists(), reason=f"{LEADS} is not here")
def test_counts_equal_the_log_after_processing_real_leads(
    book: Book, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Real leads through a handler that fails some and retries others: every number `stats`
    prints (JSON and text) equals what the QueueLog rows themselves say."""
    lines = [line for line in LEADS.read_text(encoding="utf-8").splitlines() if line.strip()]
    if hasattr(book, "emulator"):
        lines = lines[:100]  # the emulator is slower; the first 100 leads suffice
    source = tmp_path / "leads.jsonl"
    source.write_text("\n".join(lines) + "\n", encoding="utf-8")
    (Path.cwd() / "stats_leads.py").write_text(LEAD_HANDLER, encoding="utf-8")
    write_config("[types.lead]\npython = 'stats_leads:push'\n")  # in-process: fast
    _at(monkeypatch, T0)
    r = run_cli(["enqueue", "lead", "--jsonl", "--file", str(source), "--json"])
    assert r.code in (0, 3), r.stderr
    # Runs every 20 minutes until nothing waits (the breaker stops a run after 5 transient
    # failures in a row, so some first attempts happen in a later run).
    when = T0
    for _ in range(10):
        when += timedelta(minutes=20)
        _at(monkeypatch, when)
        assert run_cli(["process", "--until-empty", "--batch-size", "100"]).code == 0
        if not any(row["status"] in ("pending", "retry") for row in book.records()):
            break
    _at(monkeypatch, when + timedelta(minutes=5))
    r = run_cli(["stats", "--since", "24h", "--json"])
    assert r.code == 0, r.stderr
    doc = r.json()
    expected = _expected_from_log(book)
    assert {k: doc[k] for k in expected} == expected
    assert expected["failed"] > 0 and expected["retry"] > 0 and expected["duplicate"] > 0
    assert expected["conflict"] > 0 and doc["finished"] == expected["done"] + expected["failed"]
    assert doc["failed_by_error_class"] == {"permanent": expected["failed"]}
    assert doc["oldest_waiting_seconds"] is None
    assert doc["since"] == format_ts(when + timedelta(minutes=5) - timedelta(hours=24))
    assert expected["p95_seconds"] > expected["p50_seconds"] >= 1200
    text = run_cli(["stats", "--since", "24h"])
    assert text.code == 0
    for label, key in [
        ("enqueued", "enqueued"),
        ("duplicates suppressed", "duplicate"),
        ("conflicts", "conflict"),
        ("done", "done"),
        ("retries", "retry"),
        ("failed", "failed"),
    ]:
        assert _printed(text.stdout, label) == str(expected[key]), label
    assert re.search(rf"^permanent\s+{expected['failed']}$", text.stdout, re.MULTILINE)


def test_percentiles_are_exact_on_a_frozen_clock(
    book: Book, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Tasks done 300 s, 200 s and 600 s after their enqueue: p50 300, p95 600 (nearest
    rank); a task waiting since 900 s ago is the oldest waiting; a sparkline on a terminal."""
    write_config(f"[types.job]\ncommand = {_command(tmp_path, 'ok', OK)}\n")
    _at(monkeypatch, T0)
    _enqueue({"n": 1})
    _at(monkeypatch, T0 + timedelta(seconds=100))
    _enqueue({"n": 2})
    _at(monkeypatch, T0 + timedelta(seconds=300))
    assert run_cli(["process", "--batch-size", "10"]).code == 0
    _at(monkeypatch, T0 + timedelta(seconds=400))
    _enqueue({"n": 3})
    _at(monkeypatch, T0 + timedelta(seconds=1000))
    assert run_cli(["process", "--batch-size", "10"]).code == 0
    _at(monkeypatch, T0 + timedelta(seconds=1100))
    _enqueue({"n": 4}, "nohandler")
    _at(monkeypatch, T0 + timedelta(seconds=2000))
    doc = run_cli(["stats", "--json"]).json()
    assert (doc["p50_seconds"], doc["p95_seconds"]) == (300, 600)
    assert doc["oldest_waiting_seconds"] == 900
    assert (doc["enqueued"], doc["done"], doc["success_rate"], doc["dead_letter_rate"]) == (
        4,
        3,
        1.0,
        0.0,
    )
    text = run_cli(["stats"]).stdout
    assert re.search(r"^enqueue to done p50\s+5m00s\s+300 s$", text, re.MULTILINE), text
    assert re.search(r"^oldest waiting\s+15m00s\s+900 s$", text, re.MULTILINE), text
    assert "peak" not in text  # piped: no sparkline
    monkeypatch.setenv("FORCE_COLOR", "1")  # rich treats stdout as a terminal
    text = run_cli(["stats"]).stdout
    assert "done   │" in text and "│ peak 3" in text, text


def test_type_filter(book: Book, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """--type counts only the named types (repeatable); the others are left out."""
    ok = _command(tmp_path, "ok", OK)
    write_config(f"[types.lead]\ncommand = {ok}\n[types.order]\ncommand = {ok}\n")
    _at(monkeypatch, T0)
    for n in range(3):
        _enqueue({"n": n}, "lead")
    _enqueue({"n": 9}, "order")
    _enqueue({"n": 9}, "order")  # a duplicate
    _enqueue({"n": 9}, "report")
    assert run_cli(["process", "--batch-size", "10", "--type", "lead"]).code == 0
    lead = run_cli(["stats", "--type", "lead", "--json"]).json()
    assert (lead["enqueued"], lead["duplicate"], lead["done"]) == (3, 0, 3)
    assert lead["oldest_waiting_seconds"] is None
    order = run_cli(["stats", "-t", "order", "-t", "report", "--json"]).json()
    assert (order["enqueued"], order["duplicate"], order["done"]) == (2, 1, 0)
    assert order["oldest_waiting_seconds"] == 0 and order["success_rate"] is None
    assert run_cli(["stats", "--type", "nothing", "--json"]).json()["enqueued"] == 0


def test_empty_log_is_zeros_and_nulls(book: Book) -> None:
    """A fresh workbook: zeros, null rates and percentiles, exit 0, in JSON and as text."""
    r = run_cli(["stats", "--json"])
    assert r.code == 0, r.stderr
    doc = r.json()
    required = [
        "since",
        "enqueued",
        "duplicate",
        "conflict",
        "done",
        "retry",
        "failed",
        "success_rate",
        "dead_letter_rate",
        "p50_seconds",
        "p95_seconds",
        "oldest_waiting_seconds",
        "failed_by_error_class",
    ]
    assert list(doc)[: len(required)] == required
    assert all(doc[k] == 0 for k in required[1:7])
    assert all(doc[k] is None for k in required[7:12]) and doc["failed_by_error_class"] == {}
    text = run_cli(["stats"])
    assert text.code == 0 and _printed(text.stdout, "done") == "0"


def test_since_accepts_durations_and_iso_times_and_refuses_the_rest(
    book: Book, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--since 7d and --since ISO set the window start; anything else is exit 2, one line."""
    write_config(f"[types.job]\ncommand = {_command(tmp_path, 'ok', OK)}\n")
    _at(monkeypatch, T0 - timedelta(days=3))
    _enqueue({"n": 1})
    _at(monkeypatch, T0)
    _enqueue({"n": 2})
    assert run_cli(["stats", "--json"]).json()["enqueued"] == 1
    doc = run_cli(["stats", "--since", "7d", "--json"]).json()
    assert doc["enqueued"] == 2 and doc["since"] == "2025-12-29T09:00:00Z"
    doc = run_cli(["stats", "--since", "2026-01-02T09:00:00", "--json"]).json()
    assert doc["enqueued"] == 2 and doc["since"] == "2026-01-02T09:00:00Z"
    doc = run_cli(["stats", "--since", "2026-01-02T10:00:00+01:00", "--json"]).json()
    assert doc["since"] == "2026-01-02T09:00:00Z"
    for bad in ("yesterday", "-1h", ""):
        r = run_cli(["stats", "--since", bad])
        assert r.code == 2, (bad, r.stdout, r.stderr)
        assert len(r.stderr.strip().splitlines()) == 1 and "--since" in r.stderr


def test_error_class_of_an_archived_failure_is_read_from_the_archive(
    book: Book, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each failure counts under the class its log row starts with, also after its row was
    archived or requeued; a failure whose message does not say (a person edited it) takes
    its row's class while the row is failed (read from QueueArchive once archived), else it
    is unrecorded."""
    fail = "import sys\nsys.stdin.read()\nsys.exit(65)\n"
    write_config(f"[types.job]\ncommand = {_command(tmp_path, 'fail', fail)}\n")
    _at(monkeypatch, T0)
    archived = _enqueue({"n": 1})
    requeued = _enqueue({"n": 2})
    assert run_cli(["process", "--batch-size", "10"]).code == 0
    assert run_cli(["requeue", "--task", requeued]).code == 0
    _at(monkeypatch, T0 + timedelta(days=40))
    doc = run_cli(["archive", "--older-than", "30d", "--include-failed", "--json"]).json()
    assert doc["task_ids"] == [archived]
    doc = run_cli(["stats", "--since", "60d", "--json"]).json()
    assert doc["failed"] == 2 and doc["failed_by_error_class"] == {"permanent": 2}
    assert doc["archived"] == 1 and doc["requeued"] == 1
    # the failure log rows as a person rewrote them: the rows' classes, as far as they tell
    for n, entry in enumerate(book.log()):
        if entry["event"] == "failed":
            book.set_cell("QueueLog", n + 2, "message", "checked by Olena")
    doc = run_cli(["stats", "--since", "60d", "--json"]).json()
    assert doc["failed_by_error_class"] == {"permanent": 1, "unrecorded": 1}


def test_a_lost_outcome_counts_as_unknown_after_its_requeue(
    book: Book, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A task whose run died (its lease ran out while `processing`) is recovered as failed,
    error class unknown; after a person requeues it, stats still counts that failure as
    `unknown`: the recovered log row starts with its class, as a handler's failure does."""
    ok = "import sys\nsys.stdin.read()\n"
    write_config(f"[types.job]\ncommand = {_command(tmp_path, 'ok', ok)}\n")
    _at(monkeypatch, T0)
    task = _enqueue({"n": 1})
    row = int(book.row_of(task)["_row"]) if "_row" in book.row_of(task) else 2
    book.set_cell("Queue", row, "status", "processing")
    book.set_cell("Queue", row, "lease_owner", "run_gone")
    book.set_cell("Queue", row, "lease_until", "2026-01-05T09:00:00Z")
    _at(monkeypatch, T0 + timedelta(minutes=5))
    r = run_cli(["process", "--json"])
    assert r.code == 0 and r.json()["recovered"] == 1, r.stdout + r.stderr
    assert book.row_of(task)["error_class"] == "unknown"
    assert run_cli(["requeue", "--task", task]).code == 0
    doc = run_cli(["stats", "--since", "1d", "--json"]).json()
    assert doc["failed"] == 1 and doc["failed_by_error_class"] == {"unknown": 1}


@pytest.mark.google
def test_google_stats_costs_two_requests(
    sheets_emulator: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """open 1 + one batchGet of the log, queue and archive columns."""
    from tests.conftest import make_google

    make_google(sheets_emulator, monkeypatch)
    assert run_cli(["init"]).code == 0
    _enqueue({"n": 1})
    sheets_emulator.reset_counts()
    assert run_cli(["stats", "--json"]).json()["enqueued"] == 1
    assert sheets_emulator.count() == 2, [q.op for q in sheets_emulator.requests]


def test_oldest_waiting_counts_from_due_in_status_and_from_creation_in_stats(
    book: Book, monkeypatch: pytest.MonkeyPatch
) -> None:
    """docs/commands.md: a task delayed a day and due for a minute has waited 60 s in
    `status` (since it is due) and a day and a minute in `stats` (since its creation);
    before it is due, `status` leaves it out."""
    monkeypatch.setenv("SHEETQ_NOW", format_ts(T0))
    assert run_cli(["enqueue", "job", '{"n": 1}', "--delay", "1d"]).code == 0
    monkeypatch.setenv("SHEETQ_NOW", format_ts(T0 + timedelta(hours=1)))
    assert run_cli(["status", "--json"]).json()["oldest_waiting_seconds"] is None
    monkeypatch.setenv("SHEETQ_NOW", format_ts(T0 + timedelta(days=1, minutes=1)))
    assert run_cli(["status", "--json"]).json()["oldest_waiting_seconds"] == 60
    assert run_cli(["stats", "--json"]).json()["oldest_waiting_seconds"] == 86_460
