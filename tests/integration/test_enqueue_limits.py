"""Enqueue at its limits (DESIGN.md §4): encoded derived keys, racing same-key enqueues on the
local backend, `--jsonl` split under Google's 10 MB request cap, SHEETQ_ENQUEUE_TIMEOUT."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import Book, LocalBook, make_google, run_cli, run_proc, write_config


def test_values_with_separators_are_two_tasks(book: Book) -> None:
    """{"a":"x:b=y","b":"z"} and {"a":"x","b":"y:b=z"} with key_fields a, b: two keys, both
    enqueued (exit 0), no conflict."""
    write_config('[types.pair]\nkey_fields = ["a", "b"]\n')
    first: dict[str, Any] = {"a": "x:b=y", "b": "z"}
    second: dict[str, Any] = {"a": "x", "b": "y:b=z"}
    one = run_cli(["enqueue", "pair", json.dumps(first), "--json"])
    two = run_cli(["enqueue", "pair", json.dumps(second), "--json"])
    assert (one.code, two.code) == (0, 0), one.stderr + two.stderr
    assert one.json()["outcome"] == two.json()["outcome"] == "enqueued"
    assert one.json()["idempotency_key"] == "pair:a=x%3Ab%3Dy:b=z"
    assert two.json()["idempotency_key"] == "pair:a=x:b=y%3Ab%3Dz"
    assert len(book.records()) == 2
    again = run_cli(["enqueue", "pair", json.dumps(second), "--json"])
    assert again.code == 0 and again.json()["outcome"] == "duplicate"


# --- racing enqueues on the local backend --------------------------------------------------


# Each racer imports sheetq, then waits for the start signal, so all 20 read the keys at
# once (started one by one, the interpreters' start-up would space them out).
_RACER = """
import pathlib, sys, time
from sheetq.cli import app
go = pathlib.Path(sys.argv[1])
while not go.exists():
    time.sleep(0.005)
sys.exit(app.main(sys.argv[2:]))
"""


@pytest.mark.slow
def test_twenty_racing_same_key_enqueues_give_one_task(tmp_path: Path) -> None:
    """20 processes enqueue order_id CONF with different payloads at once on one local file:
    exactly one exits 0 (enqueued), 19 exit 3 (conflict), and Queue holds one row."""
    book = LocalBook(tmp_path / "race.db")
    env = {**os.environ, "SHEETQ_SPREADSHEET": book.spreadsheet}
    assert run_proc(["init"], env=env).code == 0
    go = tmp_path / "go"
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _RACER, str(go), "enqueue", "w", json.dumps(payload)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for payload in ({"order_id": "CONF", "v": n} for n in range(20))
    ]
    time.sleep(1.0)  # let the interpreters load sheetq; then release them together
    go.touch()
    outcomes = [(p.wait(timeout=120), *p.communicate()) for p in procs]
    codes = sorted(code for code, _, _ in outcomes)
    assert codes == [0] + [3] * 19, [(c, o, e) for c, o, e in outcomes]
    rows = book.records()
    assert len(rows) == 1 and rows[0]["idempotency_key"] == "w:order_id=CONF"
    events = sorted(r["event"] for r in book.log())
    assert events == ["conflict"] * 19 + ["enqueued"]


# --- --jsonl under Google's request cap -------------------------------------------------------

CAP = 10_485_760  # bytes; Google refuses a larger request body


def _big_lines(count: int = 300, chars: int = 40_000) -> str:
    """``count`` JSON lines of about ``chars`` characters each (300 × 40,000 ≈ 12 MB)."""
    return "\n".join(
        json.dumps({"n": n, "text": f"{n:05d}" + "ab" * (chars // 2)}) for n in range(count)
    )


def _writes(emulator: Any) -> list[Any]:
    return [q for q in emulator.requests if q.op == "spreadsheets.batchUpdate" and q.status == 200]


@pytest.mark.google
@pytest.mark.slow
def test_twelve_megabyte_jsonl_is_split_under_the_request_cap(
    sheets_emulator: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """300 lines of ~40,000 characters (~12 MB) enqueue in several atomic writes, each body
    under 10,485,760 bytes: exit 0, all 300 rows and 300 log rows, one --json document."""
    book = make_google(sheets_emulator, monkeypatch)
    assert run_cli(["init"]).code == 0
    text = _big_lines()
    assert len(text.encode()) > 12_000_000
    sheets_emulator.reset_counts()
    r = run_cli(["enqueue", "big", "--jsonl", "--json"], input=text)
    assert r.code == 0, r.stderr
    doc = r.json()
    assert (doc["enqueued"], doc["duplicate"], doc["conflict"]) == (300, 0, 0)
    assert [x["line"] for x in doc["results"]] == list(range(1, 301))
    writes = _writes(sheets_emulator)
    sizes = [len(json.dumps(q.body)) for q in writes]
    assert len(writes) == 2 and max(sizes) < CAP, sizes
    assert sheets_emulator.count() == 1 + 1 + len(writes)  # open, keys, writes
    rows = book.records()
    assert sorted(json.loads(row["payload_json"])["n"] for row in rows) == list(range(300))
    assert len(book.log()) == 300
    print(f"12 MB --jsonl: {sheets_emulator.count()} requests, write bodies {sizes} bytes")


@pytest.mark.google
@pytest.mark.slow
def test_failed_second_write_leaves_whole_lines_and_a_rerun_completes(
    sheets_emulator: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Google refusing the second write: exit 1, the first write's lines are enqueued (each
    with its log row), the rest are not; the same command again enqueues the rest and reports
    the first lines as duplicates."""
    book = make_google(sheets_emulator, monkeypatch)
    assert run_cli(["init"]).code == 0
    text = _big_lines()
    seen: list[int] = []

    def refuse_the_second(emu: Any) -> None:
        seen.append(1)
        if len(seen) == 2:
            emu.fail_next(400, op="spreadsheets.batchUpdate", message="Internal error.")

    sheets_emulator.before_next(refuse_the_second, op="spreadsheets.batchUpdate", times=2)
    r = run_cli(["enqueue", "big", "--jsonl", "--json"], input=text)
    assert r.code == 1 and r.stdout == ""
    assert len([line for line in r.stderr.splitlines() if line]) == 1, r.stderr
    first = sorted(json.loads(row["payload_json"])["n"] for row in book.records())
    assert 0 < len(first) < 300 and first == list(range(len(first)))
    assert sorted(e["task_id"] for e in book.log()) == sorted(
        row["task_id"] for row in book.records()
    )
    again = run_cli(["enqueue", "big", "--jsonl", "--json"], input=text)
    assert again.code == 0, again.stderr
    doc = again.json()
    assert (doc["duplicate"], doc["enqueued"]) == (len(first), 300 - len(first))
    assert [x["outcome"] for x in doc["results"][: len(first)]] == ["duplicate"] * len(first)
    rows = book.records()
    assert sorted(json.loads(row["payload_json"])["n"] for row in rows) == list(range(300))
    assert len({row["idempotency_key"] for row in rows}) == 300
