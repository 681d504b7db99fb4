"""SIGKILL sweep: `sheetq process` killed at exact points of a batch (docs/design.md §5 "A kill
loses no finished work").

Handlers block until the test opens their gate file, and the test blocks the store's writes
(an SQLite write lock on the local backend, an emulator hook on Google), so each kill lands
at a known point, not at a guessed moment. After the kill, the next run on the same host
applies the host journal; every task's status, attempts, handler run count and log are
checked.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import (
    Book,
    LocalBook,
    handler_script,
    make_google,
    run_cli,
    write_config,
)
from tests.integration.test_process import assert_log_matches_queue

pytestmark = pytest.mark.slow

GATED = """
import os, pathlib, sys, time
sys.stdin.read()
tid = os.environ["SHEETQ_TASK_ID"]
gates = pathlib.Path(os.environ["GATES"])
with (gates / "calls.txt").open("a") as f:
    f.write(tid + "\\n")
while not (gates / "open").exists() and not (gates / ("go-" + tid)).exists():
    time.sleep(0.01)
print("ok-" + tid)
"""
PACER = """
import os, pathlib, sys
sys.stdin.read()
with (pathlib.Path(os.environ["GATES"]) / "pacer.txt").open("a") as f:
    f.write(os.environ["SHEETQ_TASK_ID"] + "\\n")
print("paced")
"""
WAIT = 30.0  # seconds before a wait for the subprocess gives up


def _iso(when: datetime) -> str:
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class Batch:
    """Ten tasks (5 `risky`: on_unknown fail; 5 `safe`: idempotent) and a killable run."""

    book: Book
    gates: Path
    locks: Path
    types: dict[str, str] = field(default_factory=dict)  # task_id → type
    pacers: list[str] = field(default_factory=list)
    proc: subprocess.Popen[bytes] | None = None

    def calls(self, name: str = "calls.txt") -> list[str]:
        path = self.gates / name
        return path.read_text().split() if path.exists() else []

    def journal(self) -> Any:
        from sheetq.sheet.journal import Journal, JournalState

        found = list(self.locks.glob("*.journal"))
        return Journal(found[0]).load() if found else JournalState()

    def ended(self) -> int:
        state = self.journal()
        return sum(e.ended is not None for tasks in state.runs.values() for e in tasks.values())

    def wait(self, ok: Callable[[], bool], what: str) -> None:
        deadline = time.monotonic() + WAIT
        while not ok():
            assert self.proc is not None and self.proc.poll() is None, f"run ended before {what}"
            assert time.monotonic() < deadline, f"timed out waiting for {what}"
            time.sleep(0.01)

    def start(self, *args: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "sheetq", "process", "--batch-size", "20", "-q", *args],
            env={**os.environ},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            start_new_session=True,  # its own process group, killed as a whole
        )

    def release(self, count: int) -> list[str]:
        """Let the first ``count`` handlers finish, in the order they start."""
        for index in range(count):
            self.wait(lambda i=index: len(self.calls()) > i, f"handler {index + 1} to start")
            (self.gates / f"go-{self.calls()[index]}").touch()
        return self.calls()[:count]

    def kill(self) -> None:
        assert self.proc is not None
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.communicate(timeout=10)
        assert self.proc.returncode == -signal.SIGKILL
        (self.gates / "open").touch()  # later runs' handlers do not wait


def _setup(book: Book, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pacers: int = 0) -> Batch:
    gates = tmp_path / "gates"
    gates.mkdir()
    monkeypatch.setenv("GATES", str(gates))
    gated = handler_script(tmp_path, "gated", GATED)
    pacer = handler_script(tmp_path, "pacer", PACER)
    write_config(
        f"[types.risky]\ncommand = {gated}\ntimeout = '60s'\n"
        f"[types.safe]\ncommand = {gated}\nidempotent = true\ntimeout = '60s'\n"
        f"[types.pacer]\ncommand = {pacer}\ntimeout = '60s'\nrate_limit = '1/min'\n"
    )
    batch = Batch(book, gates, tmp_path / "locks")
    real = datetime.now(UTC)
    # created in the past, pacers first: the batch order is pacers, then the ten
    monkeypatch.setenv("SHEETQ_NOW", _iso(real - timedelta(minutes=10)))
    for n in range(pacers):
        batch.pacers.append(
            run_cli(["enqueue", "pacer", f'{{"p":{n}}}', "--json"]).json()["task_id"]
        )
    monkeypatch.setenv("SHEETQ_NOW", _iso(real - timedelta(minutes=5)))
    for n in range(10):
        kind = ("risky", "safe")[n % 2]
        task = run_cli(["enqueue", kind, json.dumps({"n": n}), "--json"]).json()["task_id"]
        batch.types[task] = kind
    monkeypatch.delenv("SHEETQ_NOW")  # the killed run and the next use the real clock
    return batch


def _rerun_and_check(
    batch: Batch, *, finished: list[str], running: str | None, journal: dict[str, int]
) -> None:
    """The next run on this host; then every task's state, attempts, run count and log."""
    calls_before = Counter(batch.calls())
    doc = run_cli(["process", "--batch-size", "20", "--json"]).json()
    assert doc["journal"] == {**journal, "left": 0}, doc
    runs = Counter(batch.calls())
    for task, kind in batch.types.items():
        row = batch.book.row_of(task)
        if task in finished:  # finished before the kill: written from the journal, not rerun
            assert (row["status"], row["retry_count"], row["result"]) == ("done", "0", f"ok-{task}")
            assert runs[task] == 1, task
            assert "recovered" not in [e["event"] for e in batch.book.log(task)]
        elif task == running:  # the only outcome really unknown: per on_unknown, one attempt
            expect = "failed" if kind == "risky" else "retry"
            assert (row["status"], row["error_class"], row["retry_count"]) == (
                expect,
                "unknown",
                "1",
            ), row
            assert runs[task] == 1
            assert [e["event"] for e in batch.book.log(task)][-1] == "recovered"
        else:  # never started: given back without an attempt, then run once
            assert calls_before[task] == 0, task
            assert (row["status"], row["retry_count"], row["result"]) == ("done", "0", f"ok-{task}")
            assert runs[task] == 1, task
            events = [e["event"] for e in batch.book.log(task)]
            assert "recovered" not in events
            if journal["returned"]:
                assert "requeued" in events
        assert row["lease_owner"] == "" and row["lease_until"] == ""
    assert sum(runs.values()) == 10
    assert batch.journal().size == 0, "the journal is emptied once applied"
    assert_log_matches_queue(batch.book)


@pytest.fixture
def local_book(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> LocalBook:
    """An initialised local workbook."""
    book = LocalBook(tmp_path / "book.db")
    monkeypatch.setenv("SHEETQ_SPREADSHEET", book.spreadsheet)
    assert run_cli(["init"]).code == 0
    return book


@pytest.mark.parametrize("k", [0, 2, 5, 9])
def test_kill_while_a_handler_runs_local(
    local_book: LocalBook, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, k: int
) -> None:
    """SIGKILL after k handlers finished and the next one started: the k outcomes are applied,
    only the running task is outcome-unknown, the rest go back without an attempt."""
    batch = _setup(local_book, tmp_path, monkeypatch)
    batch.start()
    finished = batch.release(k)
    batch.wait(lambda: len(batch.calls()) > k, f"handler {k + 1} to start")
    batch.wait(lambda: batch.ended() == k, f"{k} outcomes in the journal")
    running = batch.calls()[k]
    assert run_cli(["status", "--json"]).json()["held_by_gone_runs"] == []  # still running
    batch.kill()
    assert {r["status"] for r in local_book.records()} == {"processing"}
    # status tells a person what will happen: the run was killed here, its journal applies
    (dead,) = batch.journal().runs
    (group,) = run_cli(["status", "--json"]).json()["held_by_gone_runs"]
    assert (group["run_id"], group["count"], group["host_journal"]) == (dead, 10, True)
    assert group["on_unknown"] == {"risky": "fail", "safe": "retry"}
    assert f"10 processing under run {dead}, killed on this host" in run_cli(["status"]).stdout
    _rerun_and_check(
        batch,
        finished=finished,
        running=running,
        journal={"applied": k, "returned": 9 - k, "unknown": 1},
    )


@pytest.mark.parametrize("k", [0, 3])
def test_kill_in_the_second_pipelined_batch_local(
    local_book: LocalBook, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, k: int
) -> None:
    """`--until-empty` in batches of 5: batch 1's results rode in batch 2's claim write; a
    SIGKILL after k handlers of batch 2 finished: batch 1 stays done (run once), batch 2's
    k outcomes come from the journal, only its running task is outcome-unknown."""
    batch = _setup(local_book, tmp_path, monkeypatch)
    batch.start("--batch-size", "5", "--until-empty")
    first = batch.release(5)
    finished = batch.release(5 + k)[5:]
    batch.wait(lambda: len(batch.calls()) > 5 + k, f"handler {6 + k} to start")
    batch.wait(lambda: batch.ended() == k, f"{k} outcomes of batch 2 in the journal")
    running = batch.calls()[5 + k]
    batch.kill()
    assert {local_book.row_of(t)["status"] for t in first} == {"done"}
    _rerun_and_check(
        batch,
        finished=[*first, *finished],
        running=running,
        journal={"applied": k, "returned": 4 - k, "unknown": 1},
    )


def _write_lock(book: LocalBook) -> sqlite3.Connection:
    """Hold the local workbook's write lock (as a slow concurrent writer would)."""
    db = sqlite3.connect(book.path, isolation_level=None, timeout=10)
    db.execute("BEGIN IMMEDIATE")
    return db


def test_kill_before_the_results_write_local(
    local_book: LocalBook, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SIGKILL after the last handler, before the results write: all ten outcomes are applied
    from the journal, nothing runs twice; replaying the same journal again changes nothing."""
    batch = _setup(local_book, tmp_path, monkeypatch)
    batch.start()
    finished = batch.release(9)
    batch.wait(lambda: len(batch.calls()) == 10, "the last handler to start")
    lock = _write_lock(local_book)
    try:
        (batch.gates / f"go-{batch.calls()[9]}").touch()
        batch.wait(lambda: batch.ended() == 10, "ten outcomes in the journal")
        time.sleep(0.2)  # the run is now waiting on the write lock for its results write
        (journal,) = batch.locks.glob("*.journal")
        saved = tmp_path / "saved.journal"
        shutil.copy(journal, saved)
        batch.kill()
    finally:
        lock.rollback()
        lock.close()
    assert {r["status"] for r in local_book.records()} == {"processing"}
    _rerun_and_check(
        batch,
        finished=[*finished, batch.calls()[9]],
        running=None,
        journal={"applied": 10, "returned": 0, "unknown": 0},
    )
    # killed after its writes but before emptying the journal: a replay is a no-op
    before = (local_book.records(), local_book.log())
    shutil.copy(saved, journal)
    doc = run_cli(["process", "--json"]).json()
    assert doc["journal"] == {"applied": 0, "returned": 0, "unknown": 0, "left": 0}
    assert (local_book.records(), local_book.log()) == before


def test_kill_during_the_claim_write_local(
    local_book: LocalBook, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SIGKILL while the claim request waits: the journal names the tasks, but the claim never
    landed, so nothing is touched and all ten run once, no attempt used."""
    batch = _setup(local_book, tmp_path, monkeypatch)
    lock = _write_lock(local_book)
    try:
        batch.start()
        batch.wait(lambda: bool(batch.journal()), "the claim record")
        batch.kill()
    finally:
        lock.rollback()
        lock.close()
    assert {r["status"] for r in local_book.records()} == {"pending"}
    _rerun_and_check(
        batch, finished=[], running=None, journal={"applied": 0, "returned": 0, "unknown": 0}
    )


def test_kill_before_any_handler_started_local(
    local_book: LocalBook, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SIGKILL after the claim, while the run waits on a rate limit before its next start: no
    task of the ten started, all go back to pending with no attempt, then run once."""
    batch = _setup(local_book, tmp_path, monkeypatch, pacers=2)
    batch.start()
    batch.wait(lambda: batch.ended() == 1, "the first pacer's outcome in the journal")
    time.sleep(0.2)  # the second pacer waits 60 s for the rate limit, not started
    batch.kill()
    assert batch.calls() == [] and len(batch.calls("pacer.txt")) == 1
    assert {r["status"] for r in local_book.records()} == {"processing"}
    _rerun_and_check(
        batch, finished=[], running=None, journal={"applied": 1, "returned": 11, "unknown": 0}
    )
    first, second = batch.pacers
    assert local_book.row_of(first)["status"] == local_book.row_of(second)["status"] == "done"
    assert Counter(batch.calls("pacer.txt")) == {first: 1, second: 1}


# --- the Google backend, through the emulator ------------------------------------------


class Hold:
    """An emulator hook that holds the n-th request of an op until released."""

    def __init__(self, emulator: Any, op: str, nth: int) -> None:
        self.emulator, self.op, self.nth = emulator, op, nth
        self.reached, self.go = threading.Event(), threading.Event()
        self.seen = 0
        emulator.before_next(self._hook, op=op, times=nth)

    def _hook(self, _emulator: Any) -> None:
        self.seen += 1
        if self.seen == self.nth:
            self.reached.set()
            self.go.wait(WAIT)

    def drop(self) -> None:
        """Answer the held request with 503, unapplied (its client is dead), and let go."""
        self.emulator.fail_next(503, op=self.op)
        self.go.set()


def _google(sheets_emulator: Any, monkeypatch: pytest.MonkeyPatch) -> Book:
    book = make_google(sheets_emulator, monkeypatch)
    assert run_cli(["init"]).code == 0
    return book


@pytest.mark.google
def test_kill_while_a_handler_runs_google(
    sheets_emulator: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On Google: SIGKILL after 3 handlers finished and the 4th started; same guarantees."""
    book = _google(sheets_emulator, monkeypatch)
    batch = _setup(book, tmp_path, monkeypatch)
    batch.start()
    finished = batch.release(3)
    batch.wait(lambda: len(batch.calls()) > 3, "handler 4 to start")
    running = batch.calls()[3]
    batch.kill()
    _rerun_and_check(
        batch,
        finished=finished,
        running=running,
        journal={"applied": 3, "returned": 6, "unknown": 1},
    )


@pytest.mark.google
def test_kill_before_the_results_write_google(
    sheets_emulator: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On Google: SIGKILL while the results batchUpdate is in flight (never applied): all ten
    outcomes come from the journal."""
    book = _google(sheets_emulator, monkeypatch)
    batch = _setup(book, tmp_path, monkeypatch)
    hold = Hold(sheets_emulator, "spreadsheets.batchUpdate", 2)  # 1: claim, 2: results
    try:
        batch.start()
        finished = batch.release(10)
        assert hold.reached.wait(WAIT), "the results write never came"
        batch.kill()
    finally:
        hold.drop()
    assert {r["status"] for r in book.records()} == {"processing"}
    _rerun_and_check(
        batch, finished=finished, running=None, journal={"applied": 10, "returned": 0, "unknown": 0}
    )


@pytest.mark.google
def test_kill_before_any_handler_started_google(
    sheets_emulator: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On Google: SIGKILL while the reply to the claim write is on its way (the claim is in
    the sheet, the run has not seen it): the ten are claimed, none started; all go back
    without an attempt and run once."""
    book = _google(sheets_emulator, monkeypatch)
    batch = _setup(book, tmp_path, monkeypatch)
    reached, go = threading.Event(), threading.Event()

    def hold(_emulator: Any) -> None:
        reached.set()
        go.wait(WAIT)

    sheets_emulator.reset_counts()
    # 1 open, 2 scan, 3 the claimed rows read whole, 4 the claim write
    sheets_emulator.after(4, hold)
    try:
        batch.start()
        assert reached.wait(WAIT), "the claim write never came"
        batch.kill()
    finally:
        go.set()
    assert {r["status"] for r in book.records()} == {"processing"}
    _rerun_and_check(
        batch, finished=[], running=None, journal={"applied": 0, "returned": 10, "unknown": 0}
    )
