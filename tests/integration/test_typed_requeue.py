"""A manager requeues in the sheet with a time: `RETRY` typed into `status` and "tomorrow at 9"
into `next_retry_at`. A valid typed time is honoured (the task waits for it); one that is no
time makes the task due now with a warning naming it (docs/design.md §2), never silently."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from tests.conftest import Book, handler_script, run_cli, write_config
from tests.integration.test_process import assert_log_matches_queue

NOW = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
FAIL = "import sys\nsys.stdin.read()\nsys.stderr.write('no such product')\nsys.exit(65)\n"
OK = "import sys\nsys.stdin.read()\nprint('ok')\n"


def _at(monkeypatch: pytest.MonkeyPatch, when: datetime) -> None:
    monkeypatch.setenv("SHEETQ_NOW", when.strftime("%Y-%m-%dT%H:%M:%SZ"))


def _handler(tmp_path: Path, body: str) -> None:
    write_config(f"[types.job]\ncommand = {handler_script(tmp_path, 'h', body)}\n")


def _failed(book: Book, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[str, int]:
    """A task that failed (and was alerted as owed) at NOW; its row number."""
    _at(monkeypatch, NOW)
    _handler(tmp_path, FAIL)
    task = str(run_cli(["enqueue", "job", '{"n": 1}', "--json"]).json()["task_id"])
    assert run_cli(["process"]).code == 0
    assert book.row_of(task)["status"] == "failed"
    _handler(tmp_path, OK)
    return task, int(book.row_of(task)["_row"])


@pytest.mark.parametrize("typed", ["2026-01-06 09:00", "2026-01-06T09:00:00Z"])
def test_typed_retry_with_a_time_waits_for_it(
    book: Book, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, typed: str
) -> None:
    task, row = _failed(book, tmp_path, monkeypatch)
    book.set_cell("Queue", row, "status", "RETRY")
    book.set_cell("Queue", row, "next_retry_at", typed)  # "retry tomorrow at 9"
    _at(monkeypatch, NOW + timedelta(minutes=5))
    doc = run_cli(["process", "--json"]).json()
    assert (doc["requeued"], doc["claimed"], doc["done"]) == (1, 0, 0), doc
    assert book.row_of(task)["status"] == "retry"
    requeued = [e for e in book.log(task) if e["event"] == "requeued"]
    assert len(requeued) == 1 and "due 2026-01-06T09:00:00Z" in requeued[0]["message"]
    _at(monkeypatch, datetime(2026, 1, 6, 8, 59, tzinfo=UTC))
    doc = run_cli(["process", "--json"]).json()
    assert (doc["requeued"], doc["claimed"]) == (0, 0), doc  # not due yet, not requeued twice
    _at(monkeypatch, datetime(2026, 1, 6, 9, 0, 30, tzinfo=UTC))
    doc = run_cli(["process", "--json"]).json()
    assert doc["done"] == 1 and book.row_of(task)["status"] == "done"
    assert_log_matches_queue(book)


def test_typed_retry_with_a_time_that_is_none_runs_now_and_warns(
    book: Book, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    task, row = _failed(book, tmp_path, monkeypatch)
    book.set_cell("Queue", row, "status", "RETRY")
    book.set_cell("Queue", row, "next_retry_at", "tomorrow at 9")
    _at(monkeypatch, NOW + timedelta(minutes=5))
    r = run_cli(["process", "--json"])
    assert r.code == 0, r.stderr
    assert (r.json()["requeued"], r.json()["done"]) == (1, 1)
    warning = [line for line in r.stderr.splitlines() if "tomorrow at 9" in line]
    assert len(warning) == 1, r.stderr
    assert task in warning[0] and "next_retry_at" in warning[0] and "due" in warning[0]
    assert book.row_of(task)["status"] == "done"
