"""The hot path on PostgreSQL (DESIGN.md §11 "Claims", "Settle per task"): claims with
``FOR UPDATE SKIP LOCKED``, outcomes fenced by the lease, and the one-at-a-time alert digest.

The SQL only chooses and locks rows; what happens to them is the shared pure policy of
``sheetq.queue``: ``claim`` turns the locked rows into ``QueueRow``s and runs
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
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import psycopg

from sheetq.config import Settings
from sheetq.model import QUEUE_COLUMNS, Event
from sheetq.postgres.codec import values_from_record
from sheetq.queue import BatchPlan, log_row, parse_rows, plan_batch
from sheetq.store.base import AppendRow, ChangeSet, Row, WorkbookInfo

if TYPE_CHECKING:
    from sheetq.alerts.owed import AlertItem, AlertReport
    from sheetq.postgres.store import PgStore

RECOVER_LIMIT = 100  # expired leases recovered per claim transaction (the rest: next claim)
OWED_LIMIT = 10_000  # failed rows one alert digest covers at most (the rest: next digest)

# The rows a claim looks at, locked in one statement: leases that ran out (recovery), and
# the oldest due waiting tasks of runnable types.
_CLAIM_SQL = (
    "WITH expired AS (SELECT * FROM sheetq_tasks WHERE queue = %(queue)s"
    " AND status = 'processing' AND (lease_until IS NULL OR lease_until <= %(now)s){types}"
    " ORDER BY lease_until NULLS FIRST, created_at, task_id LIMIT %(recover)s{lock}),"
    " due AS (SELECT * FROM sheetq_tasks WHERE queue = %(queue)s"
    " AND status IN ('pending', 'retry') AND (next_retry_at IS NULL OR next_retry_at <= %(now)s)"
    " AND type = ANY(%(runnable)s) ORDER BY created_at, task_id LIMIT %(limit)s{lock})"
    " SELECT * FROM expired UNION ALL SELECT * FROM due"
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


def _rows(records: Iterable[dict[str, Any]]) -> list[Row]:
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
    """Claim up to ``batch_size`` due tasks for ``run_id``, in one transaction.

    Locks (``FOR UPDATE SKIP LOCKED``) the ``processing`` rows whose lease ran out (up to
    ``RECOVER_LIMIT``) and the oldest due ``pending``/``retry`` rows of runnable types (up
    to ``batch_size``), plans them with ``sheetq.queue.plan_batch`` and applies the plan:
    recoveries, expiries, requeues and the claims with their log rows commit together.
    Returns the plan; its claims carry whole rows (``payload_json`` included). With
    ``dry_run`` nothing is locked or written. ``types``: only these (``--type``)."""
    queue = store.queue
    runnable = runnable_types(settings, types, open_circuits)
    lock = "" if dry_run else _LOCK
    query = _CLAIM_SQL.format(types=" AND type = ANY(%(types)s)" if types else "", lock=lock)
    params = {
        "queue": queue,
        "now": now,
        "types": list(types),
        "recover": RECOVER_LIMIT,
        "runnable": runnable,
        "limit": max(0, batch_size),
    }
    with store.transaction() as conn:
        records = conn.execute(query, params).fetchall()
        rows = parse_rows(_rows(records), UTC, "en_US")
        plan = plan_batch(
            rows,
            settings=settings,
            now=now,
            run_id=run_id,
            batch_size=batch_size,
            rng=rng,
            types=types,
            open_circuits=open_circuits,
        )
        if not dry_run and plan.has_work:
            store.apply_in(conn, plan.changes)
    return plan


def without_handler(store: PgStore, settings: Settings, types: Sequence[str]) -> Counter[str]:
    """Waiting tasks whose type has no handler, by type (``(empty)`` for a blank type);
    only ``types`` when given (DESIGN.md §3: a typo in a type is visible)."""
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
    """The fenced update found no row under this run's lease: roll the outcome back."""

    def __init__(self, missing: list[str]) -> None:
        super().__init__(", ".join(missing))
        self.missing = set(missing)


def settle(store: PgStore, changes: ChangeSet, run_id: str) -> bool:
    """Commit one task's outcome (``sheetq.queue.complete``'s change set) if the row still
    carries ``run_id``'s lease. Returns ``False`` when it did not (the lease ran out and
    another run recovered the task): the outcome is rolled back and one QueueLog row says the
    late outcome was refused, with the row's current status and attempts, so the log keeps
    agreeing with the queue; newer state is never written over."""
    return _fenced(store, changes, run_id, refuse=True)


def release(store: PgStore, changes: ChangeSet, run_id: str) -> bool:
    """Give back claimed tasks that did not start (``sheetq.queue.release``'s change set),
    fenced like ``settle``. ``False``: another run holds them now; nothing is written."""
    return _fenced(store, changes, run_id, refuse=False)


def _fenced(store: PgStore, changes: ChangeSet, run_id: str, *, refuse: bool) -> bool:
    """The fenced Queue updates first; the log rows only once they all landed (one
    transaction; a miss rolls it all back)."""
    fenced = ChangeSet(updates=list(changes.updates))
    rest = ChangeSet(appends=list(changes.appends), deletes=list(changes.deletes))
    try:
        with store.transaction() as conn:
            result = store.apply_in(conn, fenced, fence=run_id)
            if result.missing:
                raise _Missed(result.missing)
            if rest:
                store.apply_in(conn, rest)
    except _Missed as missed:
        if refuse:
            with store.transaction() as conn:
                _log_refusal(store, conn, changes, missed.missing, run_id)
        return False
    return True


def _log_refusal(
    store: PgStore,
    conn: psycopg.Connection[Any],
    changes: ChangeSet,
    missing: set[str],
    run_id: str,
) -> None:
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
    if refusals:
        store.apply_in(conn, ChangeSet(appends=refusals))


def _ts(value: object) -> datetime:
    from sheetq.times import parse_ts

    moment = parse_ts(value if isinstance(value, str) else "")
    return moment if isinstance(moment, datetime) else datetime.now(UTC)


def _int_or_none(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def send_owed_alerts(
    store: PgStore,
    *,
    settings: Settings,
    info: WorkbookInfo,
    notifier: Callable[[list[AlertItem], WorkbookInfo], AlertReport],
    now: Callable[[], datetime],
    run_id: str,
) -> tuple[int, int, list[str]]:
    """Send the owed failure alerts as one digest and mark them, at most one digest at a time
    per queue however many runs and workers share it (DESIGN.md §11 "Alerts", §9).

    One transaction holds the queue's alert lock (``pg_try_advisory_xact_lock``; busy: another
    run is sending, return at once) and the owed rows (``failed``, ``alerted_at`` empty,
    locked like claims) while the notifier sends; the rows it covered get ``alerted_at`` and
    an ``alerted`` log row (``sheetq.alerts.owed.mark_alerted``) in the same transaction.
    Returns (alerts sent, alerts still owed, notes)."""
    from sheetq.alerts.owed import mark_alerted, owed

    with store.transaction() as conn:
        got = conn.execute(
            "SELECT pg_try_advisory_xact_lock(hashtext(%s)) AS got",
            (f"sheetq-alerts:{store.queue}",),
        ).fetchone()
        if not got or not got["got"]:
            return 0, 0, []
        records = conn.execute(
            "SELECT * FROM sheetq_tasks WHERE queue = %s AND status = 'failed'"
            " AND alerted_at IS NULL ORDER BY updated_at, task_id LIMIT %s"
            " FOR UPDATE SKIP LOCKED",
            (store.queue, OWED_LIMIT),
        ).fetchall()
        rows = parse_rows(_rows(records), UTC, "en_US")
        items = owed(
            rows, link=lambda row, task_id: store.link(info, settings.queue_sheet, row, task_id)
        )
        if not items:
            return 0, 0, []
        report = notifier(items, info)
        covered = set(report.covered)
        if covered:
            store.apply_in(
                conn,
                mark_alerted(
                    [i for i in items if i.task_id in covered],
                    settings=settings,
                    now=now(),
                    run_id=run_id,
                ),
            )
        return len(covered), len(items) - len(covered), list(report.notes)


def owed_count(store: PgStore) -> int:
    """Failed tasks whose alert is still owed (``alerted_at`` empty)."""
    with store.transaction() as conn:
        found = conn.execute(
            "SELECT count(*) AS n FROM sheetq_tasks WHERE queue = %s AND status = 'failed'"
            " AND alerted_at IS NULL",
            (store.queue,),
        ).fetchone()
    return int(found["n"]) if found else 0
