"""The hot path on PostgreSQL (docs/design.md §11 "Claims", "Settle per task"): claims with
``FOR UPDATE SKIP LOCKED`` and outcomes fenced by the lease (the alert digest:
``sheetq.postgres.alerts``).

The SQL only chooses and locks rows; what happens to them is the shared pure policy of
``sheetq.sheet.plan``: ``claim`` turns the locked rows into ``QueueRow``s and runs
``plan_batch`` over exactly those (recovery per ``on_unknown``, reconcile claims, max age
expiry, a person's requeues, the claims and their log rows), then applies its change set in
the same transaction. Any number of runs and workers on any number of hosts share a queue:
a row locked by one claim is skipped by the others, so no task is claimed twice. There is
no run lease.

Times compared here are the caller's ``now`` (the injected clock), never the server's.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import psycopg

from sheetq.config import Settings
from sheetq.errors import StoreError
from sheetq.model import LOG_COLUMNS, QUEUE_COLUMNS, Event
from sheetq.postgres.codec import INT_COLUMNS, TIME_COLUMNS, to_db, values_from_record
from sheetq.sheet.plan import BatchPlan, log_row, parse_rows, plan_batch
from sheetq.sheet.store import AppendRow, ChangeSet, Row, UpdateRow

if TYPE_CHECKING:
    from sheetq.postgres.store import PgStore

RECOVER_LIMIT = 100  # expired leases recovered per claim transaction (the rest: next claim)

# The rows a claim looks at, locked in one statement: leases that ran out (recovery), and
# the oldest due waiting tasks of runnable types.
_CLAIM_SQL = (
    "WITH expired AS (SELECT * FROM sheetq_tasks WHERE queue = %(queue)s"
    " AND status = 'processing' AND (lease_until IS NULL OR lease_until <= %(now)s){types}"
    " ORDER BY lease_until NULLS FIRST, created_at, task_id LIMIT %(recover)s{lock}),"
    " due AS (SELECT * FROM sheetq_tasks WHERE queue = %(queue)s"
    " AND status IN ('pending', 'retry') AND (next_retry_at IS NULL OR next_retry_at <= %(now)s)"
    " AND type = ANY(%(runnable)s) ORDER BY created_at, task_id LIMIT %(limit)s{lock})"
    " SELECT f.*, (SELECT k.task_id FROM sheetq_keys AS k WHERE k.queue = f.queue"
    " AND k.idempotency_key = f.idempotency_key) AS _key_holder"
    " FROM (SELECT * FROM expired UNION ALL SELECT * FROM due) AS f"
)
_LOCK = " FOR UPDATE SKIP LOCKED"


def runnable_types(
    settings: Settings, types: Sequence[str], open_circuits: Iterable[str]
) -> list[str]:
    """Types a claim may take: configured with a handler, selected by ``--type`` (if any),
    circuit not open."""
    blocked = set(open_circuits)
    return [
        name
        for name, config in settings.types.items()
        if config.handler is not None and (not types or name in types) and name not in blocked
    ]


def _rows(records: Iterable[Mapping[str, Any]]) -> list[Row]:
    return [
        Row(number, values_from_record(record, QUEUE_COLUMNS))
        for number, record in enumerate(records, start=2)
    ]


def claim(
    store: PgStore,
    *,
    run_id: str,
    now: datetime,
    batch_size: int,
    types: Sequence[str],
    open_circuits: Iterable[str],
    settings: Settings,
    rng: random.Random,
    dry_run: bool = False,
) -> BatchPlan:
    """Claim up to ``batch_size`` due tasks for ``run_id``, in one transaction
    (``claim_in``). With ``dry_run`` nothing is locked or written."""
    with store.transaction() as conn:
        return claim_in(
            store,
            conn,
            run_id=run_id,
            now=now,
            batch_size=batch_size,
            types=types,
            open_circuits=open_circuits,
            settings=settings,
            rng=rng,
            dry_run=dry_run,
        )


def claim_in(
    store: PgStore,
    conn: psycopg.Connection[Any],
    *,
    run_id: str,
    now: datetime,
    batch_size: int,
    types: Sequence[str],
    open_circuits: Iterable[str],
    settings: Settings,
    rng: random.Random,
    dry_run: bool = False,
) -> BatchPlan:
    """Claim up to ``batch_size`` due tasks for ``run_id`` inside the caller's transaction.

    Locks (``FOR UPDATE SKIP LOCKED``) the ``processing`` rows whose lease ran out (up to
    ``RECOVER_LIMIT``) and the oldest due ``pending``/``retry`` rows of runnable types (up
    to ``batch_size``), plans them with ``sheetq.sheet.plan.plan_batch`` and applies the plan:
    recoveries, expiries, requeues and the claims with their log rows commit together.
    Returns the plan; its claims carry whole rows (``payload_json`` included). With
    ``dry_run`` nothing is locked or written. ``types``: only these (``--type``)."""
    found = _claim_send(
        store,
        conn,
        now=now,
        batch_size=batch_size,
        types=types,
        open_circuits=open_circuits,
        settings=settings,
        dry_run=dry_run,
    )
    plan = _claim_plan(
        found,
        run_id=run_id,
        now=now,
        batch_size=batch_size,
        types=types,
        open_circuits=open_circuits,
        settings=settings,
        rng=rng,
    )
    if not dry_run and plan.has_work:
        write_in(store, conn, plan.changes)
    return plan


def _claim_send(
    store: PgStore,
    conn: psycopg.Connection[Any],
    *,
    now: datetime,
    batch_size: int,
    types: Sequence[str],
    open_circuits: Iterable[str],
    settings: Settings,
    dry_run: bool = False,
) -> psycopg.Cursor[Any]:
    """Execute the claim statement; ``_claim_plan`` reads its rows."""
    params = {
        "queue": store.queue,
        "now": now,
        "types": list(types),
        "recover": RECOVER_LIMIT,
        "runnable": runnable_types(settings, types, open_circuits),
        "limit": max(0, batch_size),
    }
    return conn.cursor().execute(_CLAIM_QUERIES[(bool(types), dry_run)], params)


def _claim_plan(
    found: psycopg.Cursor[Any],
    *,
    run_id: str,
    now: datetime,
    batch_size: int,
    types: Sequence[str],
    open_circuits: Iterable[str],
    settings: Settings,
    rng: random.Random,
) -> BatchPlan:
    """Plan the claimed rows (``plan_rows``); nothing written yet."""
    records = found.fetchall()
    found.close()
    return plan_rows(
        records,
        run_id=run_id,
        now=now,
        batch_size=batch_size,
        types=types,
        open_circuits=open_circuits,
        settings=settings,
        rng=rng,
        key_holders={
            str(r["idempotency_key"]): str(r["_key_holder"])
            for r in records
            if r.get("_key_holder") is not None
        },
    )


def plan_rows(
    records: Sequence[Mapping[str, Any]],
    *,
    run_id: str,
    now: datetime,
    batch_size: int,
    types: Sequence[str],
    open_circuits: Iterable[str],
    settings: Settings,
    rng: random.Random,
    key_holders: Mapping[str, str],
) -> BatchPlan:
    """Plan locked task rows (database records) with ``sheetq.sheet.plan.plan_batch``.
    ``key_holders``: key → the task that holds it in ``sheetq_keys``; a row whose key
    another task holds (a loser that ``sheetq migrate`` brought over) is skipped as a
    duplicate, never run."""
    rows = parse_rows(_rows(records), UTC, "en_US")
    return plan_batch(
        rows,
        settings=settings,
        now=now,
        run_id=run_id,
        batch_size=batch_size,
        rng=rng,
        types=types,
        open_circuits=open_circuits,
        key_holders=key_holders,
    )


def settle_and_claim(
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
    """One transaction (five statements and the commit, however many tasks): settle
    ``outcomes`` (``settle_in``: each fenced by its lease, with its log row) and claim up to
    ``batch_size`` tasks (``claim_in``; none when 0); the settled outcomes' and the claims'
    log rows go in one insert. Returns per outcome whether it is written, and the claim's
    plan (``None`` when nothing was claimed for). (psycopg's pipeline mode saved no time
    here and holds the GIL while it waits, which stalls the handler threads.)"""
    with store.transaction() as conn:
        missing = _missing(_send_updates(store, conn, _single(outcomes), fence=run_id))
        later = ChangeSet()
        landed = finish_settle(store, conn, outcomes, missing, run_id, later)
        plan = None
        if batch_size > 0:
            claimed = _claim_send(
                store,
                conn,
                now=now,
                batch_size=batch_size,
                types=types,
                open_circuits=open_circuits,
                settings=settings,
            )
            plan = _claim_plan(
                claimed,
                run_id=run_id,
                now=now,
                batch_size=batch_size,
                types=types,
                open_circuits=open_circuits,
                settings=settings,
                rng=rng,
            )
            if plan.has_work:
                later.updates.extend(plan.changes.updates)
                later.appends.extend(plan.changes.appends)
                later.deletes.extend(plan.changes.deletes)
                later.moves.extend(plan.changes.moves)
        if later:
            write_in(store, conn, later)
    return landed, plan


# the four claim statements, built once (a stable text: psycopg prepares it server-side)
_CLAIM_QUERIES = {
    (typed, dry): _CLAIM_SQL.format(
        types=" AND type = ANY(%(types)s)" if typed else "", lock="" if dry else _LOCK
    )
    for typed in (False, True)
    for dry in (False, True)
}


def without_handler(store: PgStore, settings: Settings, types: Sequence[str]) -> Counter[str]:
    """Waiting tasks whose type has no handler, by type (``(empty)`` for a blank type);
    only ``types`` when given (docs/design.md §3: a typo in a type is visible)."""
    handled = [n for n, c in settings.types.items() if c.handler is not None]
    query = (
        "SELECT type, count(*) AS n FROM sheetq_tasks WHERE queue = %s"
        " AND status IN ('pending', 'retry') AND NOT (type = ANY(%s))"
    )
    params: list[Any] = [store.queue, handled]
    if types:
        query += " AND type = ANY(%s)"
        params.append(list(types))
    with store.transaction() as conn:
        found = conn.execute(query + " GROUP BY type", params).fetchall()
    return Counter({str(r["type"]) or "(empty)": int(r["n"]) for r in found})


class _Missed(Exception):
    """The fenced updates of one outcome did not all land: roll that outcome back."""

    def __init__(self, missing: list[str]) -> None:
        super().__init__(", ".join(missing))
        self.missing = set(missing)


def settle(store: PgStore, changes: ChangeSet, run_id: str) -> bool:
    """Commit one task's outcome (``sheetq.sheet.plan.complete``'s change set) if the row still
    carries ``run_id``'s lease, in one transaction (``settle_in``). Returns ``False`` when
    it did not (the lease ran out and another run recovered the task)."""
    with store.transaction() as conn:
        return settle_in(store, conn, [(changes, True)], run_id)[0]


def release(store: PgStore, changes: ChangeSet, run_id: str) -> bool:
    """Give back claimed tasks that did not start (``sheetq.sheet.plan.release``'s change set),
    fenced like ``settle``. ``False``: another run holds them now; nothing is written."""
    with store.transaction() as conn:
        return settle_in(store, conn, [(changes, False)], run_id)[0]


def settle_in(
    store: PgStore,
    conn: psycopg.Connection[Any],
    outcomes: Sequence[tuple[ChangeSet, bool]],
    run_id: str,
) -> list[bool]:
    """Write several outcomes inside the caller's transaction (group commit), each fenced
    on its own: its Queue updates apply only where the row is still ``processing`` under
    ``run_id``'s lease, and its log rows are written only when all of them landed.

    ``outcomes``: ``(changes, refuse)``; ``refuse`` (a finished attempt, not a release):
    a missed outcome gets one QueueLog row saying the late outcome was refused, with the
    row's current status and attempts, so the log keeps agreeing with the queue; newer
    state is never written over. An outcome found already written by this run (its commit
    was cut off with the connection and is retried) counts as landed and adds nothing.
    All log rows go in one statement. Returns, per outcome, whether it is written."""
    later = ChangeSet()
    missing = _missing(_send_updates(store, conn, _single(outcomes), fence=run_id))
    landed = finish_settle(store, conn, outcomes, missing, run_id, later)
    if later:
        write_in(store, conn, later)
    return landed


def _single(outcomes: Sequence[tuple[ChangeSet, bool]]) -> list[UpdateRow]:
    return [changes.updates[0] for changes, _ in outcomes if len(changes.updates) == 1]


def finish_settle(
    store: PgStore,
    conn: psycopg.Connection[Any],
    outcomes: Sequence[tuple[ChangeSet, bool]],
    missing_single: set[str],
    run_id: str,
    later: ChangeSet,
) -> list[bool]:
    """Given which single-update outcomes missed their row (``missing_single``), apply the
    others (several updates: all or none, in a savepoint) and put what is to be written
    after them (landed outcomes' log rows, refusals) into ``later``."""
    landed: list[bool] = []
    missed: list[tuple[int, ChangeSet, set[str], bool]] = []
    for index, (changes, refuse) in enumerate(outcomes):
        missing: set[str] = set()
        if len(changes.updates) > 1:  # all or none of them: a savepoint
            try:
                with conn.transaction():
                    found = store.apply_in(conn, ChangeSet(updates=changes.updates), fence=run_id)
                    if found.missing:
                        raise _Missed(found.missing)
            except _Missed as exc:
                missing = exc.missing
        elif changes.updates:
            key = changes.updates[0].key or ""
            missing = {key} if key in missing_single or not key else set()
        landed.append(not missing)
        if missing:
            missed.append((index, changes, missing, refuse))
            continue
        later.appends.extend(changes.appends)
        later.deletes.extend(changes.deletes)
    if missed:
        written = _already_written(conn, store, [m[1] for m in missed], run_id)
        for index, changes, missing, refuse in missed:
            if missing <= written:
                landed[index] = True
            elif refuse:
                later.appends.extend(_refusals(store, conn, changes, missing, run_id))
    return landed


def write_in(store: PgStore, conn: psycopg.Connection[Any], changes: ChangeSet) -> None:
    """Apply a hot-path change set (Queue updates by ``task_id``, QueueLog rows) in few round
    trips: the updates as one ``UPDATE … FROM unnest`` per column set, the log rows as one
    ``INSERT … SELECT FROM unnest(…)``; both statements have a stable text, so psycopg
    prepares them. Anything else (deletes, moves, leases, other worksheets) goes through
    ``PgStore.apply_in``."""
    settings = store.settings
    simple = (
        changes.lease is None
        and not changes.deletes
        and not changes.moves
        and all(u.worksheet == settings.queue_sheet and u.key for u in changes.updates)
        and all(a.worksheet == settings.log_sheet for a in changes.appends)
    )
    if not simple:
        store.apply_in(conn, changes)
        return
    if changes.updates:  # rows this transaction locked: no answer to wait for
        _send_updates(store, conn, changes.updates, fence=None)
    if changes.appends:
        _insert_log(store, conn, [a.values for a in changes.appends])


def _send_updates(
    store: PgStore,
    conn: psycopg.Connection[Any],
    updates: Sequence[UpdateRow],
    *,
    fence: str | None,
) -> list[tuple[list[str], psycopg.Cursor[Any]]]:
    """Send Queue updates by ``task_id``, one ``UPDATE … FROM unnest(…)`` statement per
    column set (so the schema's statement trigger runs once per set); ``fence``: only rows
    still ``processing`` under that run's lease. ``_missing`` reads the answers."""
    groups: dict[tuple[str, ...], list[UpdateRow]] = {}
    for update in updates:
        columns = tuple(c for c in update.values if c in _QUEUE_TYPES)
        if columns:
            groups.setdefault(columns, []).append(update)
    sent: list[tuple[list[str], psycopg.Cursor[Any]]] = []
    for columns, group in groups.items():
        keys = [str(u.key or "") for u in group]
        arrays = [[to_db(c, u.values[c]) for u in group] for c in columns]
        params: list[Any] = [keys, *arrays, store.queue, keys]
        if fence is not None:
            params.append(fence)
        cur = conn.cursor().execute(_update_sql(columns, fenced=fence is not None), params)
        sent.append((keys, cur))
    return sent


def _missing(sent: list[tuple[list[str], psycopg.Cursor[Any]]]) -> set[str]:
    missing: set[str] = set()
    for keys, cur in sent:
        found = {str(r["task_id"]) for r in cur.fetchall()}
        cur.close()
        missing.update(k for k in keys if k not in found)
    return missing


# sheetq_tasks column types (schema.py), for the unnest arrays
_QUEUE_TYPES = {
    c: "timestamptz" if c in TIME_COLUMNS else "integer" if c in INT_COLUMNS else "text"
    for c in QUEUE_COLUMNS
}
_UPDATE_SQL: dict[tuple[tuple[str, ...], bool], str] = {}


def _update_sql(columns: tuple[str, ...], *, fenced: bool) -> str:
    """``UPDATE sheetq_tasks … FROM unnest(keys, column arrays…)``, built once per column
    set (the names are ``QUEUE_COLUMNS``, never input): a stable text, so psycopg prepares
    it, and no per-call composition."""
    found = _UPDATE_SQL.get((columns, fenced))
    if found is None:
        assert all(c in _QUEUE_TYPES for c in columns)
        fence = " AND t.status = 'processing' AND t.lease_owner = %s" if fenced else ""
        sets = ", ".join(f'"{c}" = v."{c}"' for c in columns)
        arrays = ", ".join(f"%s::{_QUEUE_TYPES[c]}[]" for c in columns)
        names = ", ".join(f'"{c}"' for c in columns)
        found = (
            f"UPDATE sheetq_tasks AS t SET {sets} FROM unnest(%s::text[], {arrays})"
            f" AS v(k, {names}) WHERE t.queue = %s AND t.task_id = ANY(%s::text[])"
            f" AND t.task_id = v.k{fence} RETURNING t.task_id"
        )
        _UPDATE_SQL[(columns, fenced)] = found
    return found


_INSERT_LOG = (
    "INSERT INTO sheetq_log (queue, ts, task_id, type, event, status, retry_count, message,"
    " run_id, duration_ms) SELECT %s, * FROM unnest(%s::timestamptz[], %s::text[],"
    " %s::text[], %s::text[], %s::text[], %s::integer[], %s::text[], %s::text[],"
    " %s::integer[])"
)


def _insert_log(
    store: PgStore, conn: psycopg.Connection[Any], rows: Sequence[Mapping[str, Any]]
) -> None:
    """QueueLog rows in one statement, in order (ids follow the list)."""
    columns: list[list[Any]] = [[] for _ in LOG_COLUMNS]
    for row in rows:
        for index, column in enumerate(LOG_COLUMNS):
            value = row.get(column)
            if value is None and column == "ts":
                raise StoreError("sheetq_log: a new row without ts")
            columns[index].append(to_db(column, value if value is not None else ""))
    conn.execute(_INSERT_LOG, [store.queue, *columns])


def _already_written(
    conn: psycopg.Connection[Any], store: PgStore, outcomes: Sequence[ChangeSet], run_id: str
) -> set[str]:
    """Task ids whose log row from ``outcomes`` (same task, event, run and time) is in the
    log already: a retried commit that had in fact landed."""
    ids: list[str] = []
    events: list[str] = []
    times: list[datetime] = []
    for changes in outcomes:
        for append in changes.appends:
            if append.worksheet == store.settings.log_sheet:
                ids.append(str(append.values.get("task_id") or ""))
                events.append(str(append.values.get("event") or ""))
                times.append(_ts(append.values.get("ts")))
    if not ids:
        return set()
    found = conn.execute(
        "SELECT DISTINCT l.task_id FROM sheetq_log l"
        " JOIN unnest(%s::text[], %s::text[], %s::timestamptz[]) AS w(t, e, ts)"
        " ON l.task_id = w.t AND l.event = w.e AND l.ts = w.ts"
        " WHERE l.queue = %s AND l.run_id = %s",
        (ids, events, times, store.queue, run_id),
    ).fetchall()
    return {str(r["task_id"]) for r in found}


def _refusals(
    store: PgStore,
    conn: psycopg.Connection[Any],
    changes: ChangeSet,
    missing: set[str],
    run_id: str,
) -> list[AppendRow]:
    """One log row per refused outcome: its event, the row's current status and attempts."""
    current = {
        str(r["task_id"]): r
        for r in conn.execute(
            "SELECT task_id, status, retry_count, lease_owner FROM sheetq_tasks"
            " WHERE queue = %s AND task_id = ANY(%s)",
            (store.queue, list(missing)),
        )
    }
    refusals: list[AppendRow] = []
    for append in changes.appends:
        task_id = str(append.values.get("task_id") or "")
        now_row = current.get(task_id)
        if task_id not in missing or now_row is None:
            continue  # archived meanwhile: the archive holds its story
        holder = str(now_row["lease_owner"] or "")
        by = f"run {holder} holds it now" if holder else "another run recovered it"
        said = str(append.values.get("message") or "")
        refusals.append(
            log_row(
                _ts(append.values.get("ts")),
                task_id,
                str(append.values.get("type") or ""),
                Event(str(append.values.get("event"))),
                str(now_row["status"]),
                int(now_row["retry_count"]),
                f"late outcome refused: this run's lease had expired and {by}; "
                f"the attempt said {append.values.get('status')}: {said}",
                run_id,
                _int_or_none(append.values.get("duration_ms")),
                worksheet=append.worksheet,
            )
        )
    return refusals


def _ts(value: object) -> datetime:
    from sheetq.times import parse_ts

    moment = parse_ts(value if isinstance(value, str) else "")
    return moment if isinstance(moment, datetime) else datetime.now(UTC)


def _int_or_none(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None
