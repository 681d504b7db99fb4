"""`sheetq.enqueue(type, payload)` without a connection, on every backend (docs/design.md §15):
the configured queue is opened and the task committed, with the rules of `sheetq enqueue`."""

from __future__ import annotations

import asyncio
import subprocess
import sys

import pytest

import sheetq
from tests.conftest import Book, run_cli

ON_POSTGRES = True


def test_enqueue_duplicate_and_conflict(book: Book) -> None:
    """A new task, then the same payload (a duplicate: the same task, nothing added), then
    the same key with another payload (KeyConflict naming the task, nothing added); the CLI
    sees the task as its own."""
    done = sheetq.enqueue("lead", {"lead_id": "L-1", "phone": "+380501234567"})
    assert isinstance(done, sheetq.EnqueueResult)
    assert (done.outcome, done.idempotency_key, done.status) == (
        "enqueued",
        "lead:lead_id=L-1",
        "pending",
    )
    again = sheetq.enqueue("lead", {"phone": "+380501234567", "lead_id": "L-1"})
    assert again.duplicate and again.task_id == done.task_id
    with pytest.raises(sheetq.KeyConflict) as caught:
        sheetq.enqueue("lead", {"lead_id": "L-1", "phone": "+380000000000"})
    assert caught.value.task_id == done.task_id and caught.value.exit_code == 3
    rows = book.records()
    assert [r["task_id"] for r in rows] == [done.task_id]
    assert rows[0]["payload_json"] == '{"lead_id":"L-1","phone":"+380501234567"}'
    cli = run_cli(["enqueue", "lead", '{"lead_id": "L-1", "phone": "+380501234567"}', "--json"])
    assert cli.json()["outcome"] == "duplicate"


def test_enqueue_async_without_a_connection_uses_the_configured_backend(book: Book) -> None:
    """``await sheetq.enqueue_async(None, …)`` from an event loop: the configured backend, the
    same outcomes (enqueued, duplicate, KeyConflict) as ``sheetq.enqueue``."""

    async def main() -> tuple[sheetq.EnqueueResult, sheetq.EnqueueResult]:
        done = await sheetq.enqueue_async(None, "lead", {"lead_id": "L-7", "n": 1})
        again = await sheetq.enqueue_async(None, "lead", {"lead_id": "L-7", "n": 1})
        with pytest.raises(sheetq.KeyConflict):
            await sheetq.enqueue_async(None, "lead", {"lead_id": "L-7", "n": 2})
        return done, again

    done, again = asyncio.run(main())
    assert done.outcome == "enqueued" and again.duplicate and again.task_id == done.task_id
    assert [r["task_id"] for r in book.records()] == [done.task_id]


def test_bad_input_writes_nothing(book: Book) -> None:
    """A bad type, a payload that is not JSON, a naive `at`: InputError, nothing written."""
    from datetime import datetime

    for call in (
        lambda: sheetq.enqueue("bad:type", {"a": 1}),
        lambda: sheetq.enqueue("job", {"when": datetime(2026, 1, 1)}),
        lambda: sheetq.enqueue("job", {"x": float("nan")}),
        lambda: sheetq.enqueue("job", {"a": 1}, at=datetime(2026, 1, 1)),
        lambda: sheetq.enqueue("job", {"a": 1}, key=" "),
    ):
        with pytest.raises(sheetq.InputError):
            call()
    assert book.records() == []


def test_a_type_without_a_handler_warns_and_a_wrong_connection_is_named(book: Book) -> None:
    """A type the configuration has no handler for (a typo, most often) warns as `sheetq
    enqueue` does; a connection that is not psycopg's is refused before anything is written;
    a duplicate's status is the same plain text as a new task's."""
    import sqlite3

    from tests.conftest import write_config

    write_config('[types.lead]\ncommand = "true"\nkey_fields = ["lead_id"]\n')
    with pytest.warns(UserWarning, match="no handler is configured for type 'laed'") as seen:
        sheetq.enqueue("laed", {"lead_id": "L-1"})
    assert seen[0].filename == __file__  # the caller's line, where the typo is
    first = sheetq.enqueue("lead", {"lead_id": "L-2"})
    again = sheetq.enqueue("lead", {"lead_id": "L-2"})
    assert again.duplicate and type(again.status) is str and again.status == first.status
    with pytest.raises(TypeError, match=r"not sqlite3\.Connection"):
        sheetq.enqueue(sqlite3.connect(":memory:"), "lead", {"lead_id": "L-3"})
    assert len(book.records()) == 2


def test_import_sheetq_stays_light() -> None:
    """`import sheetq` loads neither the enqueue machinery nor any driver or web stack."""
    code = (
        "import sys, sheetq; heavy = [m for m in ('sheetq.api', 'sheetq.config', 'psycopg',"
        " 'gspread', 'starlette', 'uvicorn', 'telegram') if m in sys.modules]; print(heavy)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_priority_and_group(book: Book) -> None:
    """priority= and group= reach the task on every backend, as `enqueue --priority/--group`;
    a priority that is no integer is refused before anything is written."""
    done = sheetq.enqueue("deal", {"deal_id": 42}, priority=7, group="deal-42")
    row = book.row_of(done.task_id)
    assert (row["priority"], row["group"]) == ("7", "deal-42")
    with pytest.raises(sheetq.InputError, match="enqueue: priority"):
        sheetq.enqueue("deal", {"deal_id": 43}, priority=10**12)
    assert len(book.records()) == 1
