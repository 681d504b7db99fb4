"""`sheetq.enqueue(conn, …)` inside the application's transaction and the SQL function
`sheetq_enqueue` (docs/design.md §15): the task exists if and only if the caller commits,
workers wake at the commit, and the keys and hashes are those of `sheetq enqueue` (§4)."""

from __future__ import annotations

import json
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest

import sheetq
from sheetq.accept import prepare
from sheetq.config import load_settings
from tests.conftest import PgBook, run_cli, write_config

pytestmark = pytest.mark.postgres

STARTS_HANDLER = """
import os, time
def run(task):
    with open(os.environ["STARTS"], "a") as f:
        f.write(f"{task.task_id} {time.time()}\\n")
    return "ok"
"""


def _count(url: str, table: str) -> int:
    with psycopg.connect(url) as conn:
        row = conn.execute(f"SELECT count(*) FROM {table}").fetchone()
    assert row is not None
    return int(row[0])


def test_rollback_leaves_nothing_commit_leaves_the_task(pg_url: str) -> None:
    """Rolled back: no task, no key, no log row. Committed: the task, pending, as the CLI
    would have written it; a later `sheetq enqueue` of the same payload is its duplicate."""
    with psycopg.connect(pg_url) as conn:
        done = sheetq.enqueue(conn, "lead", {"lead_id": "L-1", "name": "Олена"})
        assert done.outcome == "enqueued" and done.idempotency_key == "lead:lead_id=L-1"
        conn.rollback()
    for table in ("sheetq_tasks", "sheetq_keys", "sheetq_log"):
        assert _count(pg_url, table) == 0, table

    with psycopg.connect(pg_url) as conn:
        done = sheetq.enqueue(conn, "lead", {"name": "Олена", "lead_id": "L-1"})
    row = PgBook(pg_url).row_of(done.task_id)
    assert row["status"] == "pending" and row["payload_json"] == '{"lead_id":"L-1","name":"Олена"}'
    again = run_cli(["enqueue", "lead", '{"lead_id": "L-1", "name": "Олена"}', "--json"])
    assert again.code == 0, again.stderr
    assert again.json()["outcome"] == "duplicate" and again.json()["task_id"] == done.task_id


def test_duplicate_returns_the_task_conflict_raises_and_the_transaction_goes_on(
    pg_url: str,
) -> None:
    """A duplicate returns the existing task; a conflict raises KeyConflict naming it, and the
    caller's transaction stays usable (the write was in a savepoint): its commit keeps the
    caller's own rows and the conflict's log row."""
    first = run_cli(["enqueue", "order", '{"order_id": "A-1", "total": 10}', "--json"])
    assert first.code == 0, first.stderr
    task_id = first.json()["task_id"]
    with psycopg.connect(pg_url) as conn:
        conn.execute("CREATE TABLE app_orders (id text)")
        dup = sheetq.enqueue(conn, "order", {"total": 10, "order_id": "A-1"})
        assert (dup.outcome, dup.task_id, dup.duplicate) == ("duplicate", task_id, True)
        with pytest.raises(sheetq.KeyConflict) as caught:
            sheetq.enqueue(conn, "order", {"order_id": "A-1", "total": 11})
        assert caught.value.task_id == task_id and caught.value.key == "order:order_id=A-1"
        assert isinstance(caught.value, sheetq.SheetqError) and caught.value.exit_code == 3
        conn.execute("INSERT INTO app_orders VALUES ('A-1')")
    assert _count(pg_url, "sheetq_tasks") == 1 and _count(pg_url, "app_orders") == 1
    events = [r["event"] for r in PgBook(pg_url).log(task_id)]
    assert events == ["enqueued", "duplicate", "conflict"]


def _race(pg_url: str, end: str) -> None:
    key = f"race-{end}"
    seen: dict[str, Any] = {}

    def second() -> None:
        with psycopg.connect(pg_url) as conn:
            seen["result"] = sheetq.enqueue(conn, "job", {"n": 1}, key=key)
            seen["at"] = time.monotonic()

    with psycopg.connect(pg_url) as first:
        mine = sheetq.enqueue(first, "job", {"n": 1}, key=key)
        thread = threading.Thread(target=second)
        thread.start()
        time.sleep(0.3)
        assert "result" not in seen  # waiting on the first transaction's key
        ended = time.monotonic()
        getattr(first, end)()
    thread.join(10)
    assert seen["at"] >= ended
    if end == "commit":
        assert seen["result"].outcome == "duplicate"
        assert seen["result"].task_id == mine.task_id
    else:
        assert seen["result"].outcome == "enqueued"


def test_a_second_transaction_with_the_key_waits_for_the_first(pg_url: str) -> None:
    """Two open transactions enqueue one key: the second waits for the first; after its
    commit the second gets a duplicate; after a rollback it enqueues. Never two tasks."""
    for end in ("commit", "rollback"):
        _race(pg_url, end)
    assert _count(pg_url, "sheetq_tasks") == 2


@pytest.mark.slow
def test_commit_wakes_a_worker_within_a_second_and_not_before(
    pg_url: str,
    handler_module: Callable[[str, str], Path],
    sheetq_proc: Callable[..., subprocess.Popen[str]],
) -> None:
    """A worker polling only every 30 s: nothing runs while the transaction is open; the
    task starts within a second of the commit (the NOTIFY is delivered at the commit)."""
    starts = handler_module("wh", STARTS_HANDLER)
    write_config('[types.job]\npython = "wh:run"\n')
    proc = sheetq_proc("-v", "worker", "--poll", "30s")
    assert proc.stderr is not None
    deadline = time.monotonic() + 15
    while "handler(s) on queue" not in proc.stderr.readline():
        assert time.monotonic() < deadline and proc.poll() is None
    with psycopg.connect(pg_url) as conn:
        done = sheetq.enqueue(conn, "job", {"n": 1})
        time.sleep(1.2)
        assert not starts.exists()  # not before the commit
        conn.commit()
        committed = time.time()
    deadline = time.monotonic() + 5
    while not starts.exists() or not starts.read_text().strip():
        assert time.monotonic() < deadline, "the worker did not start the task"
        time.sleep(0.02)
    task, at = starts.read_text().split()
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=20)
    assert task == done.task_id
    assert float(at) - committed < 1.0


def test_without_conn_and_delay_on_postgres(pg_url: str) -> None:
    """Without conn the configured queue is opened and the task committed; `delay` sets the
    not-before time; a priority that is no integer and a naive `at` are refused."""
    done = sheetq.enqueue("job", {"n": 1}, delay=timedelta(minutes=10))
    row = PgBook(pg_url).row_of(done.task_id)
    assert row["status"] == "pending" and row["next_retry_at"]
    with pytest.raises(sheetq.InputError, match="enqueue: priority"):
        sheetq.enqueue("job", {"n": 2}, priority="high")  # type: ignore[arg-type]
    with psycopg.connect(pg_url) as conn, pytest.raises(sheetq.InputError, match="naive"):
        sheetq.enqueue(conn, "job", {"n": 3}, at=datetime(2030, 1, 1))
    assert _count(pg_url, "sheetq_tasks") == 1


# --- the SQL function -------------------------------------------------------------------------

PAYLOADS: list[dict[str, Any]] = [
    {"lead_id": "L-1", "name": "Олена", "phone": "+380501234567"},
    {"b": 1, "a": [1, 2.5, 0.0, 1e-07, 12.5, 123456789.125, 0.0001, 1.5e-300], "c": None},
    {"e\u0301": "cafe\u0301", "nested": {"z": True, "y": False, "x": {}}},
    {"order_id": 1001, "total": 12.5, "quote": 'he said "hi"\n\t\\', "ctl": "\u0001\u001f"},
    {"emoji": "😀", "tab\tkey": "x", "big": 12345678901234567890, "neg": -1.5e-10},
    {"event_id": "x:b=y%", "deep": {"a": {"b": {"c": [[], [{}]]}}}},
    {"lead_id": "", "order_id": None, "event_id": "  E-7  "},
    {"lead_id": True, "order_id": 3.0},
    {"lead_id": {"x": 1}},
    {"lead_id": "x" * 300},
    {},
]


def test_sql_function_builds_the_same_canonical_text_hash_and_key(pg_url: str) -> None:
    """sheetq_enqueue computes what Python computes (docs/design.md §4): the canonical text,
    the payload hash and the key, for keys from key_fields, the built-in fields and the
    hash; so a task enqueued in SQL is a duplicate of the same one from the CLI."""
    settings = load_settings(require_spreadsheet=False)
    with psycopg.connect(pg_url, autocommit=True) as conn:
        for payload in PAYLOADS:
            text = json.dumps(payload, ensure_ascii=False)
            (task,) = prepare("t", [(None, json.loads(text))], settings)
            row = conn.execute(
                "SELECT sheetq_canonical(%s::jsonb), sheetq_derive_key('t', %s::jsonb, NULL, "
                "NULL, %s)",
                (text, text, task.payload_hash),
            ).fetchone()
            assert row == (task.canonical, task.key), payload
        nested = {"deal": {"id": "D:1"}, "n": 2}
        (task,) = prepare(
            "t", [(None, nested)], settings.__class__(spreadsheet="", types={}), key=None
        )
        row = conn.execute(
            "SELECT sheetq_derive_key('t', %s::jsonb, NULL, ARRAY['deal.id', 'n'], '')",
            (json.dumps(nested),),
        ).fetchone()
        assert row == ("t:deal.id=D%3A1:n=2",)


def test_sql_function_enqueues_duplicates_and_raises_the_documented_sqlstate(
    pg_url: str,
) -> None:
    """SELECT sheetq_enqueue(…): enqueued, then duplicate (also for the CLI's enqueue of the
    same payload), then a conflict as SQLSTATE SQ409 naming the task; bad input is 22023."""
    payload = '{"order_id": "A-7", "total": 12.50}'
    with psycopg.connect(pg_url, autocommit=True) as conn:
        first = conn.execute(
            "SELECT * FROM sheetq_enqueue('Queue', 'order', %s::jsonb)", (payload,)
        ).fetchone()
        assert first is not None and first[0] == "enqueued" and first[2] == "order:order_id=A-7"
        again = conn.execute(
            "SELECT * FROM sheetq_enqueue('Queue', 'order', %s::jsonb)", (payload,)
        ).fetchone()
        assert again == ("duplicate", first[1], first[2], "pending")
        with pytest.raises(psycopg.Error) as caught:
            conn.execute(
                "SELECT * FROM sheetq_enqueue('Queue', 'order', '{\"order_id\": \"A-7\"}')"
            )
        assert caught.value.sqlstate == sheetq.SQLSTATE_CONFLICT == "SQ409"
        assert caught.value.diag.message_detail == first[1]
        for bad in ("'[1]'", "'{}', key => ' '"):
            with pytest.raises(psycopg.Error) as caught:
                conn.execute(f"SELECT * FROM sheetq_enqueue('Queue', 'job', {bad})")
            assert caught.value.sqlstate == "22023"
    cli = run_cli(["enqueue", "order", '{"total": 12.5, "order_id": "A-7"}', "--json"])
    assert cli.code == 0, cli.stderr
    assert cli.json()["outcome"] == "duplicate" and cli.json()["task_id"] == first[1]
    row = PgBook(pg_url).row_of(first[1])
    assert row["payload_json"] == '{"order_id":"A-7","total":12.5}'
    assert datetime.fromisoformat(row["created_at"]) <= datetime.now(UTC)


def test_enqueue_async_in_an_asyncio_transaction(pg_url: str) -> None:
    """sheetq.enqueue_async on a psycopg AsyncConnection: a rollback leaves nothing, a
    commit the task; a duplicate returns it, a conflict raises KeyConflict."""
    import asyncio

    async def scenario() -> str:
        async with await psycopg.AsyncConnection.connect(pg_url) as conn:
            await sheetq.enqueue_async(conn, "order", {"order_id": "A-1"})
            await conn.rollback()
            assert _count(pg_url, "sheetq_tasks") == 0
            first = await sheetq.enqueue_async(conn, "order", {"order_id": "A-1"})
            again = await sheetq.enqueue_async(conn, "order", {"order_id": "A-1"})
            assert again.duplicate and again.task_id == first.task_id
            with pytest.raises(sheetq.KeyConflict):
                await sheetq.enqueue_async(conn, "order", {"order_id": "A-1", "total": 2})
        return first.task_id

    task_id = asyncio.run(scenario())
    assert [r["task_id"] for r in PgBook(pg_url).records()] == [task_id]


def test_priority_and_group_in_the_transaction_and_in_sql(pg_url: str) -> None:
    """priority= and group= (docs/design.md §14) are written by sheetq.enqueue(conn, …) and
    by sheetq_enqueue(…, priority, task_group): the type's priority by default, a grouped
    task behind its group's earlier one."""
    write_config('[types.deal]\ncommand = "true"\npriority = 3\ngroup_fields = ["deal_id"]\n')
    with psycopg.connect(pg_url) as conn:
        first = sheetq.enqueue(conn, "deal", {"deal_id": 7, "stage": "new"})
        urgent = sheetq.enqueue(conn, "deal", {"deal_id": 8}, priority=50, group="vip")
        conn.execute(
            "SELECT * FROM sheetq_enqueue('Queue', 'deal', '{\"deal_id\": 7, \"stage\": \"won\"}',"
            " priority => 3, task_group => 'deal_id=7')"
        )
    book = PgBook(pg_url)
    rows = {r["task_id"]: r for r in book.records()}
    assert rows[first.task_id]["priority"] == "3" and rows[first.task_id]["group"] == "deal_id=7"
    assert rows[urgent.task_id]["priority"] == "50" and rows[urgent.task_id]["group"] == "vip"
    with psycopg.connect(pg_url) as conn:
        held = dict(conn.execute("SELECT task_id, held FROM sheetq_tasks").fetchall())
    second = next(t for t in rows if t not in (first.task_id, urgent.task_id))
    assert held == {first.task_id: False, urgent.task_id: False, second: True}
