"""The promise under stress, with real subprocesses: SIGKILL mid-batch, two runs at once."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from tests.conftest import Book, handler_script, run_cli, run_proc, write_config

NOW = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
RECORD_THEN = """
import json, os, sys, time, pathlib
json.load(sys.stdin)
with pathlib.Path(os.environ["CALLS"]).open("a") as f:
    f.write(os.environ["SHEETQ_TASK_ID"] + "\\n")
time.sleep(float(os.environ.get("SLEEP", "0")))
"""


def _iso(when: datetime) -> str:
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


def _calls(path: Path) -> Counter[str]:
    if not path.exists():
        return Counter()
    return Counter(line for line in path.read_text().splitlines() if line)


def test_sigkill_mid_batch_loses_nothing(
    book: Book, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run killed with SIGKILL mid-batch, seen from another host (no journal there): after the
    lease expires every row is recovered per on_unknown (retry, fail, reconcile)."""
    calls = tmp_path / "calls.txt"
    monkeypatch.setenv("CALLS", str(calls))
    cmd = handler_script(tmp_path, "h", RECORD_THEN)
    found = handler_script(tmp_path, "found", "import sys\nsys.stdin.read()\nprint('CRM-77')\n")
    write_config(
        f"[types.safe]\ncommand = {cmd}\nidempotent = true\ntimeout = '60s'\n"
        f"[types.risky]\ncommand = {cmd}\ntimeout = '60s'\n"
        f"[types.order]\ncommand = {cmd}\ntimeout = '60s'\non_unknown = 'reconcile'\n"
        f"reconcile = {{ command = {found} }}\n"
    )
    monkeypatch.setenv("SHEETQ_NOW", _iso(NOW))
    ids = [
        run_cli(["enqueue", t, json.dumps({"n": i}), "--json"]).json()["task_id"]
        for i, t in enumerate(["safe", "risky", "order", "safe"])
    ]
    env = {**os.environ, "SLEEP": "30"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "sheetq", "process", "--batch-size", "10"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + 20
    while not calls.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert calls.exists(), "the handler never started"
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=10)
    statuses = {r["task_id"]: r["status"] for r in book.records()}
    assert set(statuses.values()) == {"processing"}
    assert list((tmp_path / "locks").glob("*.journal")), "the killed run kept no host journal"

    # Another host cannot read this host's journal (see test_hard_kill.py for this host).
    monkeypatch.setenv("SHEETQ_LOCK_DIR", str(tmp_path / "other-host-locks"))
    # The lease is still live: a new run leaves the rows alone.
    doc = run_cli(["process", "--json"]).json()
    assert doc["recovered"] == 0 and doc["claimed"] == 0
    lease_until = datetime.fromisoformat(book.row_of(ids[0])["lease_until"])
    assert lease_until == NOW + timedelta(seconds=600 + 4 * 60)

    monkeypatch.setenv("SHEETQ_NOW", _iso(lease_until + timedelta(seconds=1)))
    monkeypatch.setenv("SLEEP", "0")
    doc = run_cli(["process", "--batch-size", "10", "--json"]).json()
    assert doc["recovered"] == 4, doc
    rows = {i: book.row_of(i) for i in ids}
    assert (rows[ids[0]]["status"], rows[ids[0]]["error_class"]) == ("retry", "unknown")
    assert (rows[ids[1]]["status"], rows[ids[1]]["error_class"]) == ("failed", "unknown")
    assert (rows[ids[2]]["status"], rows[ids[2]]["result"]) == ("done", "CRM-77")
    assert rows[ids[0]]["retry_count"] == "1" and rows[ids[1]]["retry_count"] == "1"
    assert all(r["status"] != "processing" for r in book.records())
    assert all(r["lease_owner"] == "" for r in book.records())
    for task in ids:
        assert "recovered" in [e["event"] for e in book.log(task)]
    from tests.integration.test_process import assert_log_matches_queue

    assert_log_matches_queue(book)


def test_poison_task_ends_failed(
    book: Book, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A task that kills its runner every time ends failed after max_attempts, not redelivered
    for ever."""
    write_config(
        "[types.poison]\ncommand = ['true']\nidempotent = true\nmax_attempts = 2\n"
        "lease = '1m'\ntimeout = '1s'\nbackoff = ['1s']\n"
    )
    monkeypatch.setenv("SHEETQ_NOW", _iso(NOW))
    task = run_cli(["enqueue", "poison", "{}", "--json"]).json()["task_id"]
    row_number = int(book.row_of(task)["_row"])
    now = NOW
    for _ in range(2):
        # what a killed run leaves behind: processing under an expired lease
        book.set_cell("Queue", row_number, "status", "processing")
        book.set_cell("Queue", row_number, "lease_owner", "run_dead")
        book.set_cell("Queue", row_number, "lease_until", _iso(now))
        now += timedelta(minutes=5)
        monkeypatch.setenv("SHEETQ_NOW", _iso(now))
        assert run_cli(["process", "--dry-run"]).code == 0
        doc = run_cli(["process", "--json"]).json()
        assert doc["recovered"] == 1
    row = book.row_of(task)
    assert (row["status"], row["retry_count"], row["error_class"]) == ("failed", "2", "unknown")


@pytest.mark.slow
@pytest.mark.parametrize("separate_hosts", [False, True])
def test_two_runs_at_once_never_run_a_task_twice(
    book: Book, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, separate_hosts: bool
) -> None:
    """Two process runs started together (same host, or two hosts with separate lock files):
    each task runs exactly once; a loser exits 0 with one line."""
    calls = tmp_path / "calls.txt"
    monkeypatch.setenv("CALLS", str(calls))
    write_config(f"[types.job]\ncommand = {handler_script(tmp_path, 'h', RECORD_THEN)}\n")
    text = "\n".join(json.dumps({"n": i}) for i in range(12))
    assert run_cli(["enqueue", "job", "--jsonl"], input=text).code == 0
    procs = []
    for index in range(2):
        env = {**os.environ, "SLEEP": "0.05"}
        if separate_hosts:
            env["SHEETQ_LOCK_DIR"] = str(tmp_path / f"host{index}")
        procs.append(
            subprocess.Popen(
                [sys.executable, "-m", "sheetq", "process", "--until-empty", "--batch-size", "3"],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    outputs = [p.communicate(timeout=60) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outputs
    counts = _calls(calls)
    assert len(counts) == 12 and set(counts.values()) == {1}, counts
    assert all(r["status"] == "done" for r in book.records())
    for out, _err in outputs:
        lines = [line for line in out.splitlines() if line]
        assert len(lines) == 1


def test_installed_entry_point_and_locked_line(book: Book, tmp_path: Path) -> None:
    """`python -m sheetq` works; with the host lock held, process prints one line and exits 0."""
    from filelock import FileLock

    from sheetq.config import load_settings
    from sheetq.sheet.runner import lock_path

    settings = load_settings()
    path = lock_path(settings)
    path.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(path)):
        r = run_proc(["process"])
    assert r.code == 0
    assert r.stdout.count("\n") == 1 and "another sheetq process" in r.stdout


PID_THEN_SLEEP = """
import json, os, sys, time, pathlib
json.load(sys.stdin)
pathlib.Path(os.environ["PIDS"]).open("a").write(str(os.getpid()) + "\\n")
time.sleep(30)
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie waiting for its parent is dead for our purpose
    status = Path(f"/proc/{pid}/status")
    return not (status.exists() and "State:\tZ" in status.read_text())


def _wait_for(path: Path, seconds: float = 20) -> list[int]:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if path.exists() and path.read_text().strip():
            return [int(x) for x in path.read_text().split()]
        time.sleep(0.05)
    raise AssertionError("the handler never started")


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_interrupted_run_kills_handler_and_gives_back_the_rest(
    book: Book, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sig: int, code: int
) -> None:
    """SIGTERM/SIGINT mid-batch: the running handler is killed with sheetq, unstarted tasks are
    released unharmed, the interrupted one is recovered by the very next run, one line, 128+sig."""
    pids = tmp_path / "pids.txt"
    monkeypatch.setenv("PIDS", str(pids))
    write_config(
        f"[types.job]\ncommand = {handler_script(tmp_path, 'h', PID_THEN_SLEEP)}\n"
        "idempotent = true\n"
    )
    monkeypatch.setenv("SHEETQ_NOW", _iso(NOW))
    ids = [
        run_cli(["enqueue", "job", json.dumps({"n": i}), "--json"]).json()["task_id"]
        for i in range(3)
    ]
    proc = subprocess.Popen(
        [sys.executable, "-m", "sheetq", "process", "--batch-size", "3"],
        env=dict(os.environ),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    (pid,) = _wait_for(pids)
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=20)
    assert proc.returncode == code, (out, err)
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and "interrupted" in lines[0], err
    time.sleep(0.2)
    assert not _alive(pid), "the handler outlived sheetq"
    rows = {i: book.row_of(i) for i in ids}
    assert rows[ids[0]]["status"] == "processing"
    for task in ids[1:]:
        assert (rows[task]["status"], rows[task]["retry_count"]) == ("pending", "0")
    journals = list((tmp_path / "locks").glob("*.journal"))
    assert journals and all(j.stat().st_size == 0 for j in journals), "all written: no replay"
    monkeypatch.setenv("PIDS", str(tmp_path / "later.txt"))
    doc = run_cli(["process", "--dry-run", "--json"]).json()
    assert doc["recovered"] == 1  # no need to wait for the lease: it ended at the interrupt
    from tests.integration.test_process import assert_log_matches_queue

    assert_log_matches_queue(book)


def test_sigkill_takes_the_handler_down_too(
    book: Book, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A SIGKILLed run leaves no handler running (Linux parent-death signal), so recovery never
    races a still-running first attempt."""
    if not sys.platform.startswith("linux"):
        pytest.skip("PR_SET_PDEATHSIG is Linux-only")
    pids = tmp_path / "pids.txt"
    monkeypatch.setenv("PIDS", str(pids))
    write_config(f"[types.job]\ncommand = {handler_script(tmp_path, 'h', PID_THEN_SLEEP)}\n")
    run_cli(["enqueue", "job", "{}"])
    proc = subprocess.Popen(
        [sys.executable, "-m", "sheetq", "process"],
        env=dict(os.environ),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    (pid,) = _wait_for(pids)
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=10)
    deadline = time.monotonic() + 5
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(pid)


@pytest.mark.slow
def test_background_child_does_not_hold_the_outcome(book: Book, tmp_path: Path) -> None:
    """A handler that starts a background child (which keeps stdout open) and exits 0 is done,
    judged by its own exit code, not timed out."""
    script = (
        "import subprocess, sys\nsys.stdin.read()\n"
        "subprocess.Popen(['sleep', '20'])\nprint('CRM-1', flush=True)\n"
    )
    write_config(
        f"[types.job]\ncommand = {handler_script(tmp_path, 'bg', script)}\ntimeout = '10s'\n"
    )
    task = run_cli(["enqueue", "job", "{}", "--json"]).json()["task_id"]
    started = time.monotonic()
    assert run_cli(["process", "--json"]).json()["done"] == 1
    assert time.monotonic() - started < 8
    assert book.row_of(task)["result"] == "CRM-1"
