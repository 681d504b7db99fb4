"""A recovered task never races its first attempt (docs/design.md §5): a shell-script handler
whose child charges a customer after a delay; `sheetq process` killed with SIGKILL while the
handler runs. The handler dies with sheetq, its child does not: the next run on this host
must end that child's process group before the task runs again, so `CHARGED attempt 1`
never lands, let alone after `start attempt 2`, and no orphan is left in the process table.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import LocalBook, make_google, run_cli, write_config

pytestmark = pytest.mark.slow

DELAY = 2  # seconds the child waits before it charges
CHARGE = f"""#!/bin/sh
cat >/dev/null
echo "start attempt $SHEETQ_ATTEMPT" >> "$TRACE"
( sleep {DELAY}; echo "CHARGED attempt $SHEETQ_ATTEMPT" >> "$TRACE" ) &
echo "child $! attempt $SHEETQ_ATTEMPT" >> "$TRACE"
wait
echo charged
"""


def setup_charge(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The `charge` type (idempotent: a lost outcome is retried) and its trace file."""
    script = tmp_path / "charge.sh"
    script.write_text(CHARGE, encoding="utf-8")
    trace = tmp_path / "trace.txt"
    monkeypatch.setenv("TRACE", str(trace))
    write_config(
        f'[types.charge]\ncommand = ["sh", "{script}"]\nidempotent = true\ntimeout = "30s"\n'
    )
    return trace


def lines(trace: Path) -> list[str]:
    return trace.read_text().splitlines() if trace.exists() else []


def child_of(trace: Path, attempt: int) -> int:
    """The pid of the child the handler's attempt started."""
    for line in lines(trace):
        if line.startswith("child ") and line.endswith(f" attempt {attempt}"):
            return int(line.split()[1])
    raise AssertionError(f"no child of attempt {attempt} in {lines(trace)}")


def alive(pid: int) -> bool:
    """Whether ``pid`` is a running (not zombie) process, as `ps` would list it."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def wait_for(check: Callable[[], bool], what: str, proc: subprocess.Popen[Any]) -> None:
    deadline = time.monotonic() + 30
    while not check():
        assert proc.poll() is None, f"sheetq exited before {what}: {proc.communicate()}"
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


def start_and_kill(args: list[str], trace: Path) -> int:
    """Start `sheetq ARGS`, SIGKILL it (only it) once attempt 1's child runs; that child's
    pid, still alive (the handler itself died with sheetq)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "sheetq", *args],
        env=dict(os.environ),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for(lambda: any(x.startswith("child ") for x in lines(trace)), "attempt 1", proc)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    child = child_of(trace, 1)
    assert alive(child), "the orphan should outlive the killed run"
    return child


def at(hours: float) -> str:
    return (datetime.now(UTC) + timedelta(hours=hours)).strftime("%Y-%m-%dT%H:%M:%SZ")


def check_second_attempt(trace: Path, orphan: int, began: float) -> None:
    """Attempt 2 ran; attempt 1's charge never landed, before or after it; no orphan."""
    time.sleep(max(0.0, began + DELAY + 0.5 - time.monotonic()))  # attempt 1's charge time
    seen = lines(trace)
    assert "start attempt 2" in seen and "CHARGED attempt 2" in seen, seen
    assert "CHARGED attempt 1" not in seen, seen
    assert not alive(orphan)


def _local(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    book = LocalBook(tmp_path / "book.db")
    monkeypatch.setenv("SHEETQ_SPREADSHEET", book.spreadsheet)
    assert run_cli(["init"]).code == 0


@pytest.mark.parametrize("backend", ["local", pytest.param("google", marks=pytest.mark.google)])
def test_the_next_run_ends_what_a_killed_run_left_running(
    backend: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> None:
    """kill -9 of `sheetq process` mid-handler; the next run on this host ends the orphaned
    child (and says so) before it applies the journal; attempt 2 then runs alone."""
    if backend == "local":
        _local(tmp_path, monkeypatch)
    else:
        make_google(request.getfixturevalue("sheets_emulator"), monkeypatch)
        assert run_cli(["init"]).code == 0
    trace = setup_charge(tmp_path, monkeypatch)
    task = run_cli(["enqueue", "charge", '{"amount": 5}', "--json"]).json()["task_id"]
    began = time.monotonic()
    orphan = start_and_kill(["process"], trace)
    recovery = run_cli(["process", "--json"])
    assert recovery.code == 0, recovery.stderr
    assert not alive(orphan), "the run recovered the task with attempt 1's child still working"
    ended = [n for n in recovery.json()["notes"] if n.startswith("ended process group")]
    assert len(ended) == 1 and task in ended[0] and "(attempt 1)" in ended[0], ended
    assert recovery.json()["journal"]["unknown"] == 1
    monkeypatch.setenv("SHEETQ_NOW", at(1))  # past the retry's backoff
    assert run_cli(["process"]).code == 0
    check_second_attempt(trace, orphan, began)
    assert not list((tmp_path / "locks" / "groups").glob("*.json")), "records are cleaned up"


def _record(groups: Path, pid: int, **change: Any) -> Path:
    """A group record as a killed run would have left it, for process ``pid``."""
    import json
    import socket

    from sheetq.handlers.groups import _boot_id, _start_time

    record = {
        "host": socket.gethostname(),
        "pgid": pid,
        "boot": _boot_id(),
        "since": _start_time(pid),
        "owner": 999_999_999,  # no such process: the run is dead
        "owner_since": 1,
        "task_id": "t_01JDF3K4Z8Q9W2E5R7T1Y3U6I0",
        "attempt": 1,
        "run_id": "run_dead",
        **change,
    }
    groups.mkdir(parents=True, exist_ok=True)
    path = groups / f"{record['host']}-{pid}.json"
    path.write_text(json.dumps(record), encoding="utf-8")
    return path


def test_only_a_dead_runs_own_group_is_ended(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A record is acted on only when it still names that handler's group: a process id
    now used by another program (other start time), a record of another host or boot, and
    the caller's own group are never signalled; a record of a live run is kept."""
    _local(tmp_path, monkeypatch)
    groups = tmp_path / "locks" / "groups"
    reused = subprocess.Popen(["sleep", "30"], start_new_session=True)
    other_host = subprocess.Popen(["sleep", "30"], start_new_session=True)
    other_boot = subprocess.Popen(["sleep", "30"], start_new_session=True)
    live_run = subprocess.Popen(["sleep", "30"], start_new_session=True)
    orphan = subprocess.Popen(["sleep", "30"], start_new_session=True)
    try:
        _record(groups, reused.pid, since=1)  # the recorded leader started at another time
        _record(groups, other_host.pid, host="elsewhere")
        _record(groups, other_boot.pid, boot="another-boot")
        kept = _record(groups, live_run.pid, owner=os.getpid(), owner_since=0)
        _record(groups, os.getpgrp())  # this test's own group
        _record(groups, orphan.pid)
        r = run_cli(["process", "--json"])
        assert r.code == 0, r.stderr
        (note,) = [n for n in r.json()["notes"] if n.startswith("ended process group")]
        assert f"process group {orphan.pid} " in note and "run_dead" in note, note
        assert orphan.wait(5) == -signal.SIGTERM
        for proc in (reused, other_host, other_boot, live_run):
            assert proc.poll() is None, proc.args
        assert sorted(groups.glob("*.json")) == sorted(
            [kept, groups / f"elsewhere-{other_host.pid}.json"]
        )
    finally:
        for proc in (reused, other_host, other_boot, live_run, orphan):
            proc.kill()
            proc.wait()
