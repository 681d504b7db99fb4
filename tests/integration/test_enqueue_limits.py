"""Enqueue at its limits (docs/design.md §4): encoded derived keys, racing same-key enqueues on the
local backend, `--jsonl` split under Google's 10 MB request cap, SHEETQ_ENQUEUE_TIMEOUT."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import (
    Book,
    GoogleBook,
    LocalBook,
    make_google,
    run_cli,
    run_proc,
    write_config,
)


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
    assert sheets_emulator.count() == 1 + len(writes)  # open with the keys, then the writes
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


# --- SHEETQ_ENQUEUE_TIMEOUT -------------------------------------------------------------------


@pytest.fixture
def gbook(sheets_emulator: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[GoogleBook]:
    """An initialised spreadsheet in the emulator; real retry waits (not stamina's testing
    mode), so the time limit is what ends them."""
    import stamina

    book = make_google(sheets_emulator, monkeypatch)
    assert run_cli(["init"]).code == 0
    stamina.set_testing(False)
    sheets_emulator.reset_counts()
    yield book
    sheets_emulator.clear_faults()


def _one_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line]
    assert len(lines) == 1, stderr
    return lines[0]


@pytest.mark.google
@pytest.mark.slow
def test_enqueue_gives_up_on_repeated_503_within_the_time_limit(
    gbook: GoogleBook, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Google answering 503 to every write: with SHEETQ_ENQUEUE_TIMEOUT=2s enqueue exits 1
    within a few seconds, one line naming the limit, and no task row exists."""
    monkeypatch.setenv("SHEETQ_ENQUEUE_TIMEOUT", "2s")
    gbook.emulator.fail_next(503, times=1000, op="spreadsheets.batchUpdate")
    started = time.monotonic()
    r = run_cli(["enqueue", "job", '{"n": 1}'])
    elapsed = time.monotonic() - started
    assert r.code == 1 and r.stdout == ""
    line = _one_line(r.stderr)
    assert "SHEETQ_ENQUEUE_TIMEOUT (2s)" in line and "503" in line, line
    assert elapsed < 3.0, elapsed
    assert gbook.records() == [] and gbook.log() == []


@pytest.mark.google
@pytest.mark.slow
def test_enqueue_gives_up_on_a_hanging_google(monkeypatch: pytest.MonkeyPatch) -> None:
    """A Google that holds every write 30 s: enqueue with a 2 s limit ends by then (exit 1,
    one line naming the limit), and no task row exists. (Its own emulator: the held request
    must not outlive the test.)"""
    import stamina

    from tests.fakes.sheets_emulator import SheetsEmulator

    with SheetsEmulator() as emulator:
        book = make_google(emulator, monkeypatch)
        assert run_cli(["init"]).code == 0
        stamina.set_testing(False)
        monkeypatch.setenv("SHEETQ_ENQUEUE_TIMEOUT", "2s")
        emulator.delay_next(30, times=1000, op="spreadsheets.batchUpdate")
        emulator.fail_next(503, times=1000, op="spreadsheets.batchUpdate")
        started = time.monotonic()
        r = run_cli(["enqueue", "job", '{"n": 1}'])
        elapsed = time.monotonic() - started
        assert r.code == 1
        assert "SHEETQ_ENQUEUE_TIMEOUT (2s)" in _one_line(r.stderr)
        assert elapsed < 3.0, elapsed
        assert book.records() == [] and book.log() == []


@pytest.mark.google
def test_enqueue_within_the_limit_is_unaffected(
    gbook: GoogleBook, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two 503s then success, well within the limit: the task is enqueued once (exit 0)."""
    import stamina

    stamina.set_testing(True, attempts=8)
    monkeypatch.setenv("SHEETQ_ENQUEUE_TIMEOUT", "20s")
    gbook.emulator.fail_next(503, times=2, op="spreadsheets.batchUpdate")
    r = run_cli(["enqueue", "job", '{"n": 1}'])
    assert r.code == 0, r.stderr
    assert len(gbook.records()) == 1 and len(gbook.log()) == 1


@pytest.mark.parametrize("value", ["20", "soon", "0s", "-5s"])
def test_bad_enqueue_timeout_is_exit_2(
    book: Book, monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    """A SHEETQ_ENQUEUE_TIMEOUT without a unit, not a duration, or not above 0: exit 2, one
    line naming the variable, nothing enqueued."""
    monkeypatch.setenv("SHEETQ_ENQUEUE_TIMEOUT", value)
    r = run_cli(["enqueue", "job", '{"n": 1}'])
    assert r.code == 2
    assert "SHEETQ_ENQUEUE_TIMEOUT" in _one_line(r.stderr)
    assert book.records() == []
