"""On PostgreSQL (docs/design.md §5, §11): what a killed `sheetq process` or `sheetq worker`
left running is ended by the next run on this host before it recovers the task; a second
SIGTERM to a worker ends its running handlers' process groups and says what it left."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.acceptance.test_orphans import (
    alive,
    at,
    check_second_attempt,
    child_of,
    lines,
    setup_charge,
    start_and_kill,
    wait_for,
)
from tests.conftest import PgBook, run_cli

pytestmark = [pytest.mark.postgres, pytest.mark.slow]


@pytest.mark.parametrize("command", [["process"], ["worker"]])
def test_the_next_run_ends_what_a_killed_runner_left_running(
    command: list[str], pg_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """kill -9 mid-handler; the run that recovers the task (its lease over) first ends attempt
    1's orphaned child; attempt 2 then runs alone."""
    trace = setup_charge(tmp_path, monkeypatch)
    task = run_cli(["enqueue", "charge", "{}", "--json"]).json()["task_id"]
    began = time.monotonic()
    orphan = start_and_kill(command, trace)
    assert PgBook(pg_url).row_of(task)["status"] == "processing"
    monkeypatch.setenv("SHEETQ_NOW", at(1))  # the lease has run out
    recovery = run_cli(["process", "--json"])
    assert recovery.code == 0, recovery.stderr
    assert not alive(orphan), "the run recovered the task with attempt 1's child still working"
    doc = recovery.json()
    assert doc["recovered"] == 1, doc
    (ended,) = [n for n in doc["notes"] if n.startswith("ended process group")]
    assert task in ended and "(attempt 1)" in ended, ended
    monkeypatch.setenv("SHEETQ_NOW", at(2))  # past the retry's backoff
    assert run_cli(["process"]).code == 0
    check_second_attempt(trace, orphan, began)


def test_a_second_sigterm_ends_the_handlers_and_says_what_it_left(
    pg_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SIGTERM (the handler keeps running, as it should), then SIGTERM again: exit 143 at once,
    the handler's whole group ended (no charge lands), and one line on stderr naming the task
    left `processing` and when its lease ends."""
    trace = setup_charge(tmp_path, monkeypatch)
    task = run_cli(["enqueue", "charge", "{}", "--json"]).json()["task_id"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "sheetq", "worker"],
        env=dict(os.environ),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    wait_for(lambda: any(x.startswith("child ") for x in lines(trace)), "attempt 1", proc)
    child = child_of(trace, 1)
    proc.send_signal(signal.SIGTERM)
    time.sleep(0.3)
    assert proc.poll() is None and alive(child)  # the first one lets the handler finish
    proc.send_signal(signal.SIGTERM)
    _out, err = proc.communicate(timeout=10)
    assert proc.returncode == 143, err
    (line,) = [x for x in err.splitlines() if x.startswith("sheetq worker:")]
    lease = PgBook(pg_url).row_of(task)["lease_until"]
    assert line.startswith("sheetq worker: stopped at once by a second SIGTERM: 1 task left "), line
    assert task in line and "on_unknown" in line, line
    assert lease[:16].replace(" ", "T") in line, (line, lease)
    gone = time.monotonic() + 1  # SIGKILL sent; the kernel ends the process when scheduled
    while alive(child):
        assert time.monotonic() < gone, "the handler's child outlived the worker"
        time.sleep(0.01)
    time.sleep(2.2)  # when the child would have charged
    assert "CHARGED attempt 1" not in lines(trace)
    assert PgBook(pg_url).row_of(task)["status"] == "processing"
