"""The worker's turn on PostgreSQL in two statements (docs/design.md §11 "Claims", "Settle per
task"): the busy path of ``sheetq worker`` and ``sheetq process``.

A turn is one transaction of four round trips, however many tasks it carries:

1. ``BEGIN``;
2. one statement that settles the finished outcomes, each fenced by its lease (the row is
   still ``processing`` under this run's ``lease_owner``), and locks the rows to claim
   (``FOR UPDATE SKIP LOCKED``: leases that ran out, then the oldest due tasks), each with
   the task that holds its idempotency key in ``sheetq_keys``;
3. after ``sheetq.sheet.plan.plan_batch`` has planned the locked rows in Python (the shared
   policy), one statement that writes the plan's row updates and every log row of the turn
   (the settled outcomes' and the claims', in order);
4. ``COMMIT``.

Rows travel as one JSON document per statement (``jsonb_each`` / ``jsonb_array_elements``
on the server): one parameter, dumped by the C JSON encoder, and one statement text per
purpose, so the server plans each once (``plan_cache_mode = force_generic_plan`` on the
hot connection; ``hot_session``).

Anything outside the common shape (an outcome of several row updates, a plan with moves or
deletes) takes the general path, ``sheetq.postgres.queue.settle_and_claim``, with the same
result. A late outcome (the lease ran out and another run recovered the task) is refused
and logged exactly as there (``sheetq.postgres.queue.finish_settle``).
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

import psycopg

from sheetq.config import Settings
from sheetq.model import LOG_COLUMNS, QUEUE_COLUMNS
from sheetq.postgres import queue as pgq
from sheetq.postgres.codec import INT_COLUMNS, TIME_COLUMNS, to_db
from sheetq.sheet.plan import BatchPlan
from sheetq.sheet.store import ChangeSet, UpdateRow

if TYPE_CHECKING:
    from sheetq.postgres.store import PgStore

# Session settings of the hot connection. Generic plans: the statements below are planned
# once per connection instead of once per turn (their parameters are JSON documents and
# small limits, so a custom plan gains nothing). Sorts and bitmap scans off: with generic
# plans the planner otherwise reads the claim's "oldest due" through a bitmap scan and a
# sort of every waiting row, instead of walking the partial index in order.
HOT_SESSION = (
    "SET plan_cache_mode = force_generic_plan",
    "SET enable_sort = off",
    "SET enable_bitmapscan = off",
)

_CAST = {
    c: "timestamptz" if c in TIME_COLUMNS else "integer" if c in INT_COLUMNS else ""
    for c in QUEUE_COLUMNS
}


def _set_clause() -> str:
    """``col = CASE WHEN v.j ? 'col' THEN (v.j->>'col')::type ELSE t.col END`` for every
    column a plan may change (not the row's identity)."""
    sets = []
    for column in QUEUE_COLUMNS:
        if column in ("task_id", "created_at", "type", "payload_json", "payload_hash"):
            continue
        value = f"(v.j->>'{column}')" + (f"::{_CAST[column]}" if _CAST[column] else "")
        sets.append(f'"{column}" = CASE WHEN v.j ? \'{column}\' THEN {value} ELSE t."{column}" END')
    return ", ".join(sets)


_SETS = _set_clause()
_IDENTITY = frozenset(QUEUE_COLUMNS) - {
    c for c in QUEUE_COLUMNS if f'"{c}" = CASE' in _SETS
}  # columns a hot write never changes (the general path writes them)

# 2. settle (fenced) and lock the rows to claim, in one statement. Rows of a data-modifying
# CTE are skipped by a FOR UPDATE of the same statement (PostgreSQL's "self-modified"), so a
# row settled here is never also claimed here.
_SETTLE_AND_LOCK = (
    "WITH v AS (SELECT x.key AS k, x.value AS j FROM jsonb_each(%(settle)s::jsonb) AS x),"
    f" s AS (UPDATE sheetq_tasks AS t SET {_SETS} FROM v"
    " WHERE t.queue = %(queue)s AND t.task_id = ANY(%(settled)s::text[]) AND t.task_id = v.k"
    " AND t.status = 'processing'"
    " AND t.lease_owner = %(run)s RETURNING t.task_id),"
    " expired AS (SELECT * FROM sheetq_tasks WHERE queue = %(queue)s"
    " AND status = 'processing' AND (lease_until IS NULL OR lease_until <= %(now)s){types}"
    " ORDER BY lease_until NULLS FIRST, created_at, task_id LIMIT %(recover)s"
    " FOR UPDATE SKIP LOCKED),"
    " due AS (SELECT * FROM sheetq_tasks WHERE queue = %(queue)s"
    " AND status IN ('pending', 'retry') AND (next_retry_at IS NULL OR next_retry_at <= %(now)s)"
    " AND type = ANY(%(runnable)s) ORDER BY created_at, task_id LIMIT %(limit)s"
    " FOR UPDATE SKIP LOCKED),"
    " found AS (SELECT * FROM expired UNION ALL SELECT * FROM due)"
    " SELECT f.*, (SELECT k.task_id FROM sheetq_keys AS k WHERE k.queue = f.queue"
    " AND k.idempotency_key = f.idempotency_key) AS _key_holder, st.ids AS _settled"
    " FROM (SELECT array_agg(task_id) AS ids FROM s) AS st LEFT JOIN found AS f ON true"
)
_SETTLE_AND_LOCK_SQL = {
    typed: _SETTLE_AND_LOCK.format(types=" AND type = ANY(%(types)s)" if typed else "")
    for typed in (False, True)
}

# 3. the plan's row updates and the turn's log rows (in order: ids follow the array).
_LOG_VALUES = ", ".join(
    f"(r->>{i})"
    + ("::timestamptz" if c in TIME_COLUMNS else "::integer" if c in INT_COLUMNS else "")
    for i, c in enumerate(LOG_COLUMNS)
)
_WRITE = (
    "WITH v AS (SELECT x.key AS k, x.value AS j FROM jsonb_each(%(updates)s::jsonb) AS x),"
    f" u AS (UPDATE sheetq_tasks AS t SET {_SETS} FROM v"
    " WHERE t.queue = %(queue)s AND t.task_id = ANY(%(ids)s::text[]) AND t.task_id = v.k"
    " RETURNING 1),"
    f" l AS (INSERT INTO sheetq_log (queue, {', '.join(LOG_COLUMNS)})"
    f" SELECT %(queue)s, {_LOG_VALUES}"
    " FROM jsonb_array_elements(%(log)s::jsonb) WITH ORDINALITY AS a(r, n) ORDER BY n"
    " RETURNING 1)"
    " SELECT (SELECT count(*) FROM u) AS updated, (SELECT count(*) FROM l) AS logged"
)


def hot_session(conn: psycopg.Connection[Any]) -> None:
    """Apply ``HOT_SESSION`` to the connection that runs turns (session-wide)."""
    for statement in HOT_SESSION:
        conn.execute(statement)
    conn.commit()


def turn(
    store: PgStore,
    outcomes: Sequence[tuple[ChangeSet, bool]],
    *,
    run_id: str,
    now: datetime,
    batch_size: int,
    types: Sequence[str],
    open_circuits: Iterable[str],
    settings: Settings,
    rng: random.Random,
) -> tuple[list[bool], BatchPlan | None]:
    """One transaction: settle ``outcomes`` (``(changes, refuse)``, each fenced by its
    lease, with its log rows) and claim up to ``batch_size`` tasks (none when 0). Returns
    per outcome whether it is written, and the claim's plan (``None`` when nothing was
    claimed for). Same contract as ``sheetq.postgres.queue.settle_and_claim``, which it
    falls back to for outcomes outside the common shape. Raises ``StoreError`` /
    ``StoreUnavailable`` (nothing written)."""
    if not all(_simple(changes, settings) for changes, _ in outcomes):
        return pgq.settle_and_claim(
            store,
            outcomes,
            run_id=run_id,
            now=now,
            batch_size=batch_size,
            types=types,
            open_circuits=open_circuits,
            settings=settings,
            rng=rng,
        )
    settle = {str(changes.updates[0].key): _cells(changes.updates[0]) for changes, _ in outcomes}
    params = {
        "settle": json.dumps(settle, default=_json_time),
        "settled": list(settle),
        "queue": store.queue,
        "run": run_id,
        "now": now,
        "types": list(types),
        "recover": pgq.RECOVER_LIMIT,
        "runnable": pgq.runnable_types(settings, types, open_circuits),
        "limit": max(0, batch_size),
    }
    with store.transaction() as conn:
        records = conn.execute(_SETTLE_AND_LOCK_SQL[bool(types)], params).fetchall()
        settled = set(records[0]["_settled"] or ()) if records else set()
        missing = set(settle) - settled
        later = ChangeSet()
        landed = pgq.finish_settle(store, conn, outcomes, missing, run_id, later)
        plan = None
        if batch_size > 0:
            found = [r for r in records if r["task_id"] is not None]
            holders = {
                str(r["idempotency_key"]): str(r["_key_holder"])
                for r in found
                if r["_key_holder"] is not None
            }
            plan = pgq.plan_rows(
                found,
                run_id=run_id,
                now=now,
                batch_size=batch_size,
                types=types,
                open_circuits=open_circuits,
                settings=settings,
                rng=rng,
                key_holders=holders,
            )
            if plan.has_work:
                later.updates.extend(plan.changes.updates)
                later.appends.extend(plan.changes.appends)
                later.deletes.extend(plan.changes.deletes)
                later.moves.extend(plan.changes.moves)
        if later:
            if _simple(later, settings, single=False):
                _write(store, conn, later)
            else:
                pgq.write_in(store, conn, later)
    return landed, plan


def _simple(changes: ChangeSet, settings: Settings, *, single: bool = True) -> bool:
    """Whether ``changes`` is of the shape the two statements carry: Queue row updates by
    ``task_id`` of changeable columns (one, for an outcome), QueueLog rows, nothing else."""
    return (
        changes.lease is None
        and not changes.deletes
        and not changes.moves
        and (len(changes.updates) == 1 if single else True)
        and all(
            u.worksheet == settings.queue_sheet and u.key and _IDENTITY.isdisjoint(u.values)
            for u in changes.updates
        )
        and all(a.worksheet == settings.log_sheet for a in changes.appends)
    )


def _cells(update: UpdateRow) -> dict[str, Any]:
    return {c: to_db(c, v) for c, v in update.values.items() if c in _CAST}


def _json_time(value: object) -> str:
    if isinstance(value, datetime):
        return value.isoformat()
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


def _write(store: PgStore, conn: psycopg.Connection[Any], changes: ChangeSet) -> None:
    """Step 3: the updates (by ``task_id``; rows this transaction locked) and the log rows,
    one statement."""
    updates: dict[str, dict[str, Any]] = {}
    for update in changes.updates:
        updates.setdefault(str(update.key), {}).update(_cells(update))
    log = [_log_cells(a.values) for a in changes.appends]
    conn.execute(
        _WRITE,
        {
            "updates": json.dumps(updates, default=_json_time),
            "ids": list(updates),
            "log": json.dumps(log, default=_json_time),
            "queue": store.queue,
        },
    ).fetchall()


def _log_cells(values: Mapping[str, Any]) -> list[Any]:
    row = []
    for column in LOG_COLUMNS:
        value = values.get(column)
        if value is None and column == "ts":
            from sheetq.errors import StoreError

            raise StoreError("sheetq_log: a new row without ts")
        row.append(to_db(column, value if value is not None else ""))
    return row
