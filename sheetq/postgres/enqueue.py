"""Enqueue on PostgreSQL (docs/design.md §4, §11 "Keys"): look up only the batch's keys, decide
with the shared ``sheetq.accept.decide_keys``, and insert in the same transaction
(``queries/enqueue.sql``).

The whole batch, however large (``--jsonl`` of 100,000 lines), is one transaction under the
queue's enqueue lock (an advisory lock held to the commit), so two racing enqueues of one
key never both insert; the ``sheetq_keys`` primary key backs this up whatever else writes.
New tasks and log rows go in by ``COPY`` (100,000 rows in about a second), typed: nothing
is turned into cell text and back. Times are the server's (docs/design.md §11 "Time is the
database's"), unless ``SHEETQ_NOW`` pretends.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import nullcontext
from datetime import datetime
from typing import Any

import psycopg
from psycopg.pq import TransactionStatus
from psycopg.rows import tuple_row

from sheetq.accept import Decided, Enqueued, KnownKey, NewTask, decide_keys
from sheetq.config import Settings
from sheetq.errors import SchemaError, SheetqError, StoreError, StoreUnavailable
from sheetq.model import MAX_ERROR_CHARS, Status, new_run_id, new_task_id
from sheetq.postgres.connection import NO_SCHEMA
from sheetq.postgres.manage import stamp
from sheetq.postgres.queries import QUERIES
from sheetq.postgres.session import Session, pretend
from sheetq.redact import printable, shorten


def known_keys(
    conn: psycopg.Connection[Any], queue: str, keys: Sequence[str]
) -> dict[str, KnownKey]:
    """Key → the task holding it among ``keys`` only: live tasks first, then archived, the
    earliest ``created_at`` (then ``task_id``) of each, as ``sheetq.accept.index_keys``
    decides on a sheet. Two indexed lookups, whatever the size of the queue."""
    known: dict[str, KnownKey] = {}
    if not keys:
        return known
    for record in conn.execute(QUERIES["known_keys"], {"queue": queue, "keys": list(keys)}):
        key = str(record["idempotency_key"])
        if key not in known:
            status = str(record["status"])
            known[key] = KnownKey(
                str(record["task_id"]),
                str(record["payload_hash"]),
                Status.parse(status) or status,
                bool(record["archived"]),
            )
    return known


def enqueue(
    session: Session,
    settings: Settings,
    tasks: Sequence[NewTask],
    *,
    now: datetime,
    run_id: str | None = None,
) -> list[Enqueued]:
    """Add the new tasks and log duplicates/conflicts in one transaction (docs/design.md §4):
    the queue's lock, the batch's keys, ``decide_keys``, the inserts. Raises
    ``SchemaError`` (exit 2) on a database ``sheetq init`` has not prepared,
    ``StoreUnavailable`` (exit 1) when the server cannot be reached or the lock not had
    within the session's time limit, ``StoreError`` when a key was taken meanwhile."""
    run = run_id or new_run_id("enqueue")
    queue = session.queue
    with session.transaction() as conn:
        conn.execute(QUERIES["enqueue_lock"], {"queue": queue})
        moment = stamp(conn, now)
        decided = decide_keys(tasks, known_keys(conn, queue, sorted({t.key for t in tasks})))
        fresh = [d for d in decided if d.found is None]
        if fresh:
            _insert_tasks(conn, queue, settings, fresh, moment)
        _insert_log(conn, queue, decided, moment, run)
    return [d.enqueued() for d in decided]


def _insert_tasks(
    conn: psycopg.Connection[Any],
    queue: str,
    settings: Settings,
    fresh: Sequence[Decided],
    moment: datetime,
) -> None:
    owners: dict[str, str] = {}
    blocks: dict[str, bool] = {}
    with conn.cursor() as cur, cur.copy(QUERIES["insert_tasks"]) as copy:
        for one in fresh:
            task = one.task
            if task.type not in owners:
                config = settings.type_config(task.type)
                owners[task.type] = config.owner
                blocks[task.type] = config.group_blocks_on_failure
            copy.write_row(
                (queue, one.task_id, moment, task.type, task.canonical, str(Status.PENDING), 0,
                 task.not_before, task.key, moment, task.payload_hash, owners[task.type],
                 task.priority, task.group, blocks[task.type] and bool(task.group),
                 bool(task.group))
            )  # fmt: skip
    clash = conn.execute(
        QUERIES["claim_keys"],
        {
            "queue": queue,
            "keys": [d.task.key for d in fresh],
            "tasks": [d.task_id for d in fresh],
            "hashes": [d.task.payload_hash for d in fresh],
        },
    ).fetchone()
    if clash:
        raise StoreError(
            f"idempotency key {clash['k']!r} is held by another task (an enqueue raced "
            "this one); nothing was written, run the command again"
        )


def _insert_log(
    conn: psycopg.Connection[Any],
    queue: str,
    decided: Sequence[Decided],
    moment: datetime,
    run_id: str,
) -> None:
    with conn.cursor() as cur, cur.copy(QUERIES["insert_log"]) as copy:
        for one in decided:
            status = one.found.status if one.found is not None else str(Status.PENDING)
            message = shorten(printable(one.message()), MAX_ERROR_CHARS)
            copy.write_row(
                (queue, moment, one.task_id, one.task.type, one.outcome, str(status), 0,
                 message, run_id)
            )  # fmt: skip


def _keyed_params(
    queue: str, task: NewTask, *, owner: str, group_blocks: bool, now: datetime
) -> dict[str, Any]:
    return {
        "priority": task.priority,
        "group": task.group,
        "group_blocks": group_blocks and bool(task.group),
        "queue": queue,
        "type": task.type,
        "payload": task.canonical,
        "hash": task.payload_hash,
        "key": task.key,
        "not_before": task.not_before,
        "owner": owner,
        "task_id": new_task_id(),
        "run_id": new_run_id("enqueue"),
        "at": pretend(now),
    }


def _refused(exc: psycopg.Error) -> SheetqError:
    """What the caller is told when the server refused the write."""
    if isinstance(exc, psycopg.errors.UndefinedFunction):
        return SchemaError(
            "the PostgreSQL database has no sheetq_enqueue_keyed function (an older sheetq "
            "schema, or none): run `sheetq init`"
        )
    if isinstance(exc, psycopg.errors.UndefinedTable):
        return SchemaError(NO_SCHEMA)
    if isinstance(exc, psycopg.OperationalError):
        return StoreUnavailable(
            f"PostgreSQL: the connection failed during the enqueue: {printable(str(exc)).strip()}"
        )
    return StoreError(f"PostgreSQL refused the enqueue: {printable(str(exc)).strip()}")


def _outcome(row: Any, task: NewTask) -> Enqueued:
    assert row is not None
    outcome, task_id, status = (str(v) for v in row)
    return Enqueued(outcome, task_id, task.key, status)


def enqueue_in(
    conn: psycopg.Connection[Any],
    queue: str,
    task: NewTask,
    *,
    owner: str,
    group_blocks: bool = False,
    now: datetime,
) -> Enqueued:
    """One task written inside the caller's open transaction on ``conn`` (docs/design.md §15):
    it exists if and only if the caller commits, and the insert's ``NOTIFY`` wakes workers at
    that commit. A savepoint holds the write when a transaction is open, so a database error
    leaves the caller's transaction usable; on an autocommit connection outside a
    transaction the write is its own transaction, committed at once. The key is claimed in
    ``sheetq_keys``: another transaction enqueueing the same key waits for this one to end.
    Returns the outcome (``conflict`` too: its log row is written, the caller decides what
    to raise). Raises ``SchemaError`` (exit 2) on a database ``sheetq init`` has not
    prepared, ``StoreUnavailable`` when the connection fails, ``StoreError`` for what the
    server refuses."""
    params = _keyed_params(queue, task, owner=owner, group_blocks=group_blocks, now=now)
    # psycopg's transaction() is a savepoint inside an open transaction, but BEGIN … COMMIT
    # when none is open: on a non-autocommit connection that has run nothing yet, the
    # statement itself opens the caller's transaction, as any of the caller's would.
    opens = not conn.autocommit and conn.info.transaction_status == TransactionStatus.IDLE
    try:
        with (
            nullcontext() if opens else conn.transaction(),
            conn.cursor(row_factory=tuple_row) as cur,
        ):
            row = cur.execute(QUERIES["enqueue_keyed"], params).fetchone()
    except psycopg.Error as exc:
        raise _refused(exc) from None
    return _outcome(row, task)


async def enqueue_in_async(
    conn: psycopg.AsyncConnection[Any],
    queue: str,
    task: NewTask,
    *,
    owner: str,
    group_blocks: bool = False,
    now: datetime,
) -> Enqueued:
    """``enqueue_in`` on an ``AsyncConnection``: the same statement, savepoint and errors."""
    params = _keyed_params(queue, task, owner=owner, group_blocks=group_blocks, now=now)
    opens = not conn.autocommit and conn.info.transaction_status == TransactionStatus.IDLE
    try:
        async with (
            nullcontext() if opens else conn.transaction(),
            conn.cursor(row_factory=tuple_row) as cur,
        ):
            await cur.execute(QUERIES["enqueue_keyed"], params)
            row = await cur.fetchone()
    except psycopg.Error as exc:
        raise _refused(exc) from None
    return _outcome(row, task)
