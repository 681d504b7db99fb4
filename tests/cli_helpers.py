"""Steps the CLI tests of several modules share (process on every backend, and on
PostgreSQL alone): fix the clock, enqueue a task, check the log against the queue."""

from __future__ import annotations

import json
from datetime import datetime

import pytest

from tests.conftest import Book, run_cli


def set_now(monkeypatch: pytest.MonkeyPatch, when: datetime) -> None:
    """Fix sheetq's wall clock (``SHEETQ_NOW``) at ``when`` (a datetime), to the second."""
    monkeypatch.setenv("SHEETQ_NOW", when.strftime("%Y-%m-%dT%H:%M:%SZ"))


def enqueue_task(payload: dict[str, object], task_type: str = "job") -> str:
    """`sheetq enqueue TYPE PAYLOAD --json`, which must succeed; the new task's id."""
    r = run_cli(["enqueue", task_type, json.dumps(payload), "--json"])
    assert r.code == 0, r.stderr
    return str(r.json()["task_id"])


def assert_log_matches_queue(book: Book) -> None:
    """Each task's last state-changing log row carries the task's current status."""
    last: dict[str, str] = {}
    for entry in book.log():
        if entry["event"] not in ("duplicate", "conflict", "alerted"):
            last[entry["task_id"]] = entry["status"]
    for row in book.records():
        assert last.get(row["task_id"]) == row["status"], row["task_id"]
