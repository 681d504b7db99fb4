"""Enqueue on PostgreSQL (docs/design.md §4, §11 "Keys"): look up only the batch's keys, plan with
the shared ``plan_enqueue``, and insert in the same transaction.

The whole batch, however large (``--jsonl`` of 100,000 lines), is one transaction under the
queue's advisory lock (``PgStore.lock_queue``), so two racing enqueues of one key never
both insert; the ``sheetq_keys`` primary key backs this up whatever else writes. No write is
split under Google's request cap: that cap is the sheet's, not the database's.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

import psycopg

from sheetq.config import Settings
from sheetq.enqueue import Enqueued, KnownKey, NewTask
from sheetq.model import Status, new_run_id
from sheetq.postgres import schema
from sheetq.postgres.store import PgStore
from sheetq.sheet.enqueue import plan_enqueue

_LOOKUP = """
SELECT idempotency_key, task_id, payload_hash, status, archived FROM (
    SELECT idempotency_key, task_id, payload_hash, status, false AS archived,
           created_at, 0 AS place
    FROM sheetq_tasks WHERE queue = %(queue)s AND idempotency_key = ANY(%(keys)s)
    UNION ALL
    SELECT idempotency_key, task_id, payload_hash, status, true AS archived,
           created_at, 1 AS place
    FROM sheetq_archive WHERE queue = %(queue)s AND idempotency_key = ANY(%(keys)s)
) AS holders
ORDER BY place, created_at, task_id
"""


def known_keys(
    conn: psycopg.Connection[Any], queue: str, keys: Sequence[str]
) -> dict[str, KnownKey]:
    """Key → the task holding it among ``keys`` only: live tasks first, then archived, the
    earliest ``created_at`` (then ``task_id``) of each, as ``sheetq.enqueue.index_keys``
    decides on a sheet. Two indexed lookups, whatever the size of the queue."""
    known: dict[str, KnownKey] = {}
    if not keys:
        return known
    for record in conn.execute(_LOOKUP, {"queue": queue, "keys": list(keys)}):
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
    store: PgStore,
    settings: Settings,
    tasks: Sequence[NewTask],
    *,
    now: datetime,
    run_id: str | None = None,
) -> list[Enqueued]:
    """Add the new tasks and log duplicates/conflicts in one transaction (docs/design.md §4):
    schema check, the queue's lock, the batch's keys, ``plan_enqueue``, the inserts.
    Raises ``SchemaError`` (exit 2) on a database ``sheetq init`` has not prepared,
    ``StoreUnavailable`` (exit 1) when the server cannot be reached."""
    run = run_id or new_run_id("enqueue")
    with store.transaction() as conn:
        schema.check(conn)
        store.lock_queue(conn)
        known = known_keys(conn, store.queue, sorted({t.key for t in tasks}))
        results, writes = plan_enqueue(tasks, known, settings=settings, now=now, run_id=run)
        for changes in writes:
            store.apply_in(conn, changes)
    return results
