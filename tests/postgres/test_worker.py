"""`sheetq worker` (docs/design.md §11): concurrency, LISTEN/NOTIFY wake-up, graceful SIGTERM,
and a kill -9 that leaves only started tasks outcome-unknown."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from tests.conftest import PgBook, run_cli, write_config

pytestmark = pytest.mark.postgres

# A python handler that notes when each task started (epoch seconds), then does its work.
HANDLER = """
import os, time
def run(task):
    with open(os.environ["STARTS"], "a") as f:
        f.write(f"{task.task_id} {time.time()}\\n")
    while os.environ.get("BLOCK") and os.path.exists(os.environ["BLOCK"]):
        time.sleep(0.05)
    time.sleep(float(task.payload.get("sleep", 0)))
    return "ok"
"""


@pytest.fixture
def starts(handler_module: Callable[[str, str], Path]) -> Path:
    """The file the handler appends "task_id start_time" to; handlers in `wh.py`."""
    return handler_module("wh", HANDLER)


@pytest.fixture
def spawn(
    sheetq_proc: Callable[..., subprocess.Popen[str]],
) -> Callable[..., subprocess.Popen[str]]:
    """Start `sheetq -v worker ARGS` (stderr piped: `_ready` reads it)."""
    return lambda *args: sheetq_proc("-v", "worker", *args)


def _ready(proc: subprocess.Popen[str]) -> None:
    """Wait for the worker's "up to N handler(s)" line (it logs with -v)."""
    assert proc.stderr is not None
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        if "handler(s) on queue" in line:
            return
        assert line or proc.poll() is None, "worker exited before it was ready"
    raise AssertionError("worker not ready")


def _wait_for(check: Callable[[], bool], seconds: float = 20) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(0.02)


def _started(starts: Path) -> dict[str, float]:
    if not starts.exists():
        return {}
    out: dict[str, float] = {}
    for line in starts.read_text().splitlines():
        task, at = line.split()
        out[task] = float(at)
    return out


def _enqueue_many(n: int, payload: dict[str, object], task_type: str = "job") -> list[str]:
    lines = "\n".join(json.dumps({**payload, "n": i}) for i in range(n))
    r = run_cli(["enqueue", task_type, "--jsonl", "-", "--json"], input=lines)
    assert r.code == 0, r.stderr
    return [x["task_id"] for x in r.json()["results"]]


def test_worker_needs_postgres(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """On a spreadsheet backend `sheetq worker` exits 2 and points at cron + process."""
    monkeypatch.setenv("SHEETQ_SPREADSHEET", f"local:{tmp_path / 'book.db'}")
    r = run_cli(["worker"])
    assert r.code == 2
    assert "SHEETQ_DATABASE_URL" in r.stderr and "sheetq process" in r.stderr


@pytest.mark.slow
def test_concurrency_runs_handlers_in_parallel(
    pg_url: str, starts: Path, spawn: Callable[..., subprocess.Popen[str]]
) -> None:
    """--concurrency 4 runs 40 tasks of 0.2 s in well under 40 × 0.2 s, each once."""
    write_config('[types.job]\npython = "wh:run"\n')
    ids = _enqueue_many(40, {"sleep": 0.2})
    began = time.monotonic()
    proc = spawn("--concurrency", "4")
    book = PgBook(pg_url)
    _wait_for(lambda: {r["status"] for r in book.records()} == {"done"})
    elapsed = time.monotonic() - began
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=20)
    assert proc.returncode == 0, err
    assert elapsed < 5.0, elapsed  # 8 s one at a time; 2 s + start-up with 4 at once
    assert sorted(_started(starts)) == sorted(ids)
    assert "40 done" in out
    assert "claimed" in err  # -v logs the claims


@pytest.mark.slow
def test_enqueued_task_starts_within_a_second(
    pg_url: str, starts: Path, spawn: Callable[..., subprocess.Popen[str]]
) -> None:
    """An idle worker (polling only every 30 s) is woken by NOTIFY: a task starts within 1 s."""
    write_config('[types.job]\npython = "wh:run"\n')
    proc = spawn("--poll", "30s")
    _ready(proc)
    time.sleep(0.3)  # the worker is idle in its wait
    delays = []
    for i in range(3):
        sent = time.time()
        (task,) = _enqueue_many(1, {"i": i})
        _wait_for(lambda task=task: task in _started(starts), seconds=5)  # type: ignore[misc]
        delays.append(_started(starts)[task] - sent)
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=20)
    assert proc.returncode == 0
    assert max(delays) < 1.0, delays


@pytest.mark.slow
def test_sigterm_finishes_running_and_releases_unstarted(
    pg_url: str, tmp_path: Path, starts: Path, spawn: Callable[..., subprocess.Popen[str]]
) -> None:
    """SIGTERM: the running handler finishes and settles, exit 0; tasks waiting for their
    connector's next token (rate limit) were never claimed: no lease, no attempt, no log row
    but their enqueue (docs/design.md §13)."""
    write_config('[types.job]\npython = "wh:run"\nrate_limit = "1/min"\n')
    ids = _enqueue_many(3, {"sleep": 0.5})
    proc = spawn("--concurrency", "3")
    _wait_for(lambda: len(_started(starts)) == 1)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=20)
    assert proc.returncode == 0, err
    book = PgBook(pg_url)
    (first,) = _started(starts)
    assert book.row_of(first)["status"] == "done"
    for task in (t for t in ids if t != first):
        row = book.row_of(task)
        assert (row["status"], row["retry_count"], row["lease_owner"]) == ("pending", "0", "")
        assert [e["event"] for e in book.log(task)] == ["enqueued"]
    assert "released" not in out and "SIGTERM" in out


@pytest.mark.slow
def test_kill9_leaves_only_started_tasks_unknown(
    pg_url: str,
    tmp_path: Path,
    starts: Path,
    spawn: Callable[..., subprocess.Popen[str]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """kill -9 of a worker: after the lease, only the tasks whose handler started are
    recovered as lost outcomes; the others run as first attempts."""
    block = tmp_path / "block"
    block.touch()
    monkeypatch.setenv("BLOCK", str(block))
    write_config('[types.job]\npython = "wh:run"\n')
    ids = _enqueue_many(5, {})
    proc = spawn("--concurrency", "2")
    _wait_for(lambda: len(_started(starts)) == 2)
    proc.kill()
    proc.communicate(timeout=20)
    block.unlink()
    running = set(_started(starts))
    book = PgBook(pg_url)
    assert {t for t in ids if book.row_of(t)["status"] == "processing"} == running
    later = datetime.now(UTC) + timedelta(hours=1)  # every lease has run out by then
    monkeypatch.setenv("SHEETQ_NOW", later.strftime("%Y-%m-%dT%H:%M:%SZ"))
    doc = run_cli(["process", "--until-empty", "--json"]).json()
    assert (doc["recovered"], doc["done"]) == (2, 3)
    for task in ids:
        row = book.row_of(task)
        if task in running:  # not idempotent: a lost outcome goes to a person
            assert (row["status"], row["error_class"], row["retry_count"]) == (
                "failed",
                "unknown",
                "1",
            )
        else:
            assert (row["status"], row["retry_count"]) == ("done", "0")


@pytest.mark.slow
def test_survives_its_connections_being_terminated(
    pg_url: str,
    tmp_path: Path,
    starts: Path,
    spawn: Callable[..., subprocess.Popen[str]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """pg_terminate_backend of every worker connection while a handler runs: the worker
    logs it, reconnects, settles the running task's outcome and runs tasks enqueued after."""
    import psycopg

    block = tmp_path / "block"
    block.touch()
    monkeypatch.setenv("BLOCK", str(block))
    write_config('[types.job]\npython = "wh:run"\n')
    (first,) = _enqueue_many(1, {})
    proc = spawn("--concurrency", "2")
    _wait_for(lambda: first in _started(starts))
    with psycopg.connect(pg_url, autocommit=True) as conn:
        killed = conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE application_name = 'sheetq' AND pid <> pg_backend_pid()"
        ).fetchall()
    assert len(killed) >= 2  # the worker's own connection and its LISTEN connection
    block.unlink()  # the running handler returns while the connection is gone
    (second,) = _enqueue_many(1, {"i": 2})
    book = PgBook(pg_url)
    _wait_for(lambda: {book.row_of(t)["status"] for t in (first, second)} == {"done"})
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=20)
    assert proc.returncode == 0, err
    assert err.count("lost the PostgreSQL connection") == 1, err
    assert "reconnected to PostgreSQL" in err
    assert "2 done" in out
    assert [e["event"] for e in book.log(first)][-1] == "done"


# A python handler that notes the thread it runs on; a "stuck" task blocks until released.
STUCK = """
import os, threading, time
def run(task):
    with open(os.environ["STARTS"], "a") as f:
        f.write(f"{task.task_id} {threading.current_thread().name}\\n")
    if task.payload.get("stuck"):
        while os.path.exists(os.environ["BLOCK"]):
            time.sleep(0.02)
        with open(os.environ["STARTS"], "a") as f:
            f.write(f"{task.task_id} returned-late\\n")
        return "late result"
    return "ok"
"""


@pytest.mark.slow
def test_a_handler_past_its_timeout_frees_its_slot_and_its_late_result_is_ignored(
    pg_url: str,
    tmp_path: Path,
    handler_module: Callable[[str, str], Path],
    sheetq_proc: Callable[..., subprocess.Popen[str]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """--concurrency 1: a Python handler still running at its timeout is the timeout's
    outcome (unknown, then on_unknown: fail) and its slot runs the next tasks at once while
    it is still stuck; when it returns, its result is ignored (one outcome row). Each
    handler runs on the worker's own handler thread: no second thread per call."""
    starts = handler_module("ws", STUCK)
    block = tmp_path / "block"
    block.touch()
    monkeypatch.setenv("BLOCK", str(block))
    write_config('[types.job]\npython = "ws:run"\ntimeout = "1s"\n')
    (stuck,) = _enqueue_many(1, {"stuck": True})
    quick = _enqueue_many(3, {})
    proc = sheetq_proc("-v", "worker", "--concurrency", "1")
    book = PgBook(pg_url)
    try:
        _wait_for(lambda: all(book.row_of(t)["status"] == "done" for t in quick))
        assert block.exists()  # the stuck handler still runs
        row = book.row_of(stuck)
        assert row["status"] == "failed" and row["lease_owner"] == ""
        assert "still running after 1s; abandoned" in book.log(stuck)[-1]["message"]
        block.unlink()  # it returns now, late
        _wait_for(lambda: "returned-late" in starts.read_text())
        (last,) = _enqueue_many(1, {"n": 99})  # the worker runs on
        _wait_for(lambda: book.row_of(last)["status"] == "done")
    finally:
        proc.send_signal(signal.SIGTERM)
        _out, err = proc.communicate(timeout=20)
    assert proc.returncode == 0, err
    row = book.row_of(stuck)
    assert row["status"] == "failed" and "late result" not in str(row.get("result", ""))
    events = [entry["event"] for entry in book.log(stuck)]
    assert events == ["enqueued", events[1], "failed"], events  # one outcome: the timeout's
    threads = dict(
        line.split() for line in starts.read_text().splitlines() if "returned" not in line
    )
    assert all(name.startswith("sheetq-handler-") for name in threads.values()), threads
    assert not any(name.startswith("sheetq-handler-call") for name in threads.values()), threads
