"""The run path on PostgreSQL (docs/design.md §5, §11): the queue port's claim, settle,
recovery and max-age expiry, each a named statement of ``queries/run.sql``.

* ``claim``: one statement locks the longest-due tasks (``FOR UPDATE SKIP LOCKED``),
  writes their lease and their ``claimed`` log rows;
* ``settle``: one statement writes any number of outcomes, releases and recoveries, each
  only where the row still carries the lease it names, with its log row; outcomes that did
  not land are refused with an ``outcome_refused`` log row (``refuse``), never written over
  newer state;
* ``recover`` / ``expire``: expired leases and tasks past ``max_age`` of the types this
  run is configured for, decided by the shared policy (``sheetq.policy``).

Every time is the server's (``sheetq_now()``, migration 0004): a lease, a due time, a log
``ts``, every "expired yet" comparison. Values cross as datetimes, ints and text; a due
time crosses as seconds from now (``retry_in``), so a host's clock never enters the
database. A test clock (``SHEETQ_NOW``, anything but ``SystemClock``) pins the database's
clock to its time in each transaction (``pin_clock``). ``ServerClock`` gives the run the
database's time for the decisions it makes in Python (the lease a handler must finish
within, a backoff).
"""

from __future__ import annotations

import contextlib
import random
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
from psycopg.rows import dict_row

from sheetq.clock import Clock, SystemClock
from sheetq.config import Settings, TypeConfig
from sheetq.connectors import Breaker, Kind, Limits, State, admits, kind_of, why_waiting
from sheetq.model import MAX_ERROR_CHARS, MAX_RESULT_CHARS, Event, Status
from sheetq.policy import due_since, expiry, outcome_message, recover
from sheetq.postgres import schema
from sheetq.postgres.connection import connect, explain
from sheetq.postgres.queries import QUERIES, positional
from sheetq.redact import printable, shorten
from sheetq.retry import Decision

# Session settings of a connection that claims in a loop. Generic plans: each statement is
# planned once per connection, not once per turn (planning the claim costs more than running
# it). Sorts and bitmap scans off: a generic plan does not know the claim's LIMIT and would
# otherwise read every due row through a bitmap scan and sort them, instead of walking the
# due-work index in order and stopping after LIMIT rows.
HOT_SESSION = (
    "SET plan_cache_mode = force_generic_plan",
    "SET enable_sort = off",
    "SET enable_bitmapscan = off",
)
TURN = positional(QUERIES["settle_and_claim"])  # a worker's turn, for a RawCursor
RECOVER_LIMIT = 100  # expired leases recovered per transaction (the rest: the next one)
EXPIRE_LIMIT = 1000  # tasks past max_age failed per transaction (the rest: the next one)


@dataclass
class PgClaim:
    """A task this run holds (``sheetq.port.Claimed``): what its handler needs, the status
    it goes back to if it never starts (``previous``), and ``reconcile``: a lost outcome to
    check, not a task to run. ``row`` is 0: a database row has no sheet position."""

    task_id: str
    type: str
    retry_count: int
    idempotency_key: str
    owner: str
    created: datetime | None
    payload_json: str
    previous: Status
    reconcile: bool = False
    row: int = 0
    connector: str = ""  # the connector whose token or slot it holds ("": a free one)
    probe: bool = False  # the one task a half-open breaker let through
    failures: int = 0  # its connector's transient-failure streak when it was claimed


@dataclass(frozen=True)
class Effect:
    """One finished or returned task's effect on its connector (``sheetq.connectors.after``;
    applied by ``sheetq_connector_outcome``, migration 0005)."""

    connector: str
    task_id: str
    kind: Kind
    threshold: int
    cooldown: float
    error: str = ""


@dataclass
class Settle:
    """One write of the ``settle`` statement: a finished attempt, a release (``release``:
    the task goes back unstarted) or a recovery. ``fence``: the lease the row must still
    carry; ``retry_in``: seconds from the server's now to ``next_retry_at`` (``None``:
    none); ``result`` ``None`` keeps the row's."""

    task_id: str
    type: str
    fence: str
    status: Status
    retry_count: int
    event: Event
    message: str
    release: bool = False
    retry_in: float | None = None
    error_class: str = ""
    error: str = ""
    result: str | None = None
    owner: str = ""
    duration_ms: int | None = None
    effect: Effect | None = None  # on its connector, applied before the outcome is

    @property
    def refuse(self) -> bool:
        """A finished attempt (not a release, not a recovery): refused and logged when late."""
        return not self.release and self.event is not Event.RECOVERED


@dataclass
class Claimed:
    """What one claim took: the claims (due order), their lease, duplicate losers skipped,
    and the server's time of the claim."""

    claims: list[PgClaim] = field(default_factory=list)
    lease_until: datetime | None = None
    skipped: int = 0
    now: datetime | None = None


@dataclass
class Recovery:
    """What a recovery pass did: tasks recovered (``failed`` of them ended failed), tasks
    failed past ``max_age`` (``expired``), and reconcile checks this run now holds."""

    recovered: int = 0
    failed: int = 0
    expired: int = 0
    reconciles: list[PgClaim] = field(default_factory=list)
    lease_until: datetime | None = None

    @property
    def has_work(self) -> bool:
        return bool(self.recovered or self.expired or self.reconciles)


# --- outcomes, in the shared policy's words ------------------------------------------------


def finished(
    claim: PgClaim,
    decision: Decision,
    *,
    config: TypeConfig,
    now: datetime,
    run_id: str,
    duration_ms: int | None,
    event: Event | None = None,
) -> Settle:
    """A finished attempt's write (``decision`` made at ``now``, the server's time as the
    run sees it): the row's new state and its log row (``sheetq.policy.outcome_message``)."""
    return _decided(
        claim.task_id,
        claim.type,
        claim.owner,
        decision,
        config=config,
        now=now,
        fence=run_id,
        event=event or Event(str(decision.status)),
        message=outcome_message(decision),
        duration_ms=duration_ms,
    )


def effect(settings: Settings, claim: PgClaim, decision: Decision | None) -> Effect | None:
    """What a finished attempt (``decision``) or a return unstarted (``None``) means for the
    claim's connector, or ``None`` when nothing changes there: a free connector's success
    while its streak was 0 costs no write (docs/design.md §13: no limits, no extra cost)."""
    if claim.reconcile:
        return None
    kind = Kind.RELEASE if decision is None else kind_of(decision)
    holds = bool(claim.connector) or claim.probe
    if kind is Kind.RELEASE and not holds:
        return None
    if kind is Kind.OK and not holds and claim.failures == 0:
        return None
    config = settings.connector_of(claim.type)
    error = "" if decision is None or kind is Kind.OK else decision.message
    return Effect(
        config.name,
        claim.task_id,
        kind,
        config.breaker_threshold,
        config.breaker_cooldown,
        shorten(printable(error), 300),
    )


def released(claim: PgClaim, *, run_id: str, reason: str) -> Settle:
    """Give back a claimed task that did not start: previous status, lease cleared, no
    attempt counted; logged ``requeued``."""
    return Settle(
        claim.task_id,
        claim.type,
        run_id,
        claim.previous,
        claim.retry_count,
        Event.REQUEUED,
        _log_text(f"released, not started: {reason}"),
        release=True,
    )


def _decided(
    task_id: str,
    task_type: str,
    owner: str,
    decision: Decision,
    *,
    config: TypeConfig,
    now: datetime,
    fence: str,
    event: Event,
    message: str,
    duration_ms: int | None,
) -> Settle:
    status = decision.status
    result: str | None = None
    if status in (Status.DONE, Status.SKIPPED) or decision.result:
        result = shorten(printable(decision.result), MAX_RESULT_CHARS)
    return Settle(
        task_id,
        task_type,
        fence,
        status,
        decision.retry_count,
        event,
        _log_text(message),
        retry_in=(decision.next_retry_at - now).total_seconds() if decision.next_retry_at else None,
        error_class=str(decision.error_class or ""),
        error=shorten(printable(decision.message), MAX_ERROR_CHARS)
        if status is not Status.DONE
        else "",
        result=result,
        owner="" if owner else config.owner,
        duration_ms=duration_ms,
    )


def _log_text(message: str) -> str:
    return shorten(printable(message), MAX_ERROR_CHARS)


# --- the connection ----------------------------------------------------------------------


class RunDb:
    """One connection of a run (``process``, a worker's main thread) to one queue, and the
    run path's statements on it. Not for concurrent use. ``requests_made`` counts
    transactions. Raises ``StoreUnavailable`` when the connection is lost (``reconnect``
    opens a new one), ``StoreError`` for anything else the server refuses, ``SchemaError``
    (exit 2) on a database ``sheetq init`` has not prepared."""

    def __init__(self, settings: Settings, clock: Clock) -> None:
        self.settings = settings
        self.queue = settings.queue_sheet
        self.url = settings.database_url
        self.clock = clock
        # a test clock's time is the database's in each transaction; the real one is not
        self.pinned = type(clock) is not SystemClock
        self.requests_made = 0
        self.skew = 0.0  # seconds the server's clock is ahead of this host's
        self.conn = self._connect()

    def _connect(self) -> psycopg.Connection[Any]:
        # autocommit: a statement sent alone is its own transaction (``_alone``); every other
        # write is in ``transaction()``, which opens one explicitly
        conn = connect(self.url, autocommit=True)
        conn.row_factory = dict_row
        return conn

    def close(self) -> None:
        self.conn.close()

    def reconnect(self) -> None:
        """Drop the (lost) connection and open a new one; ``StoreUnavailable`` if that fails."""
        with contextlib.suppress(psycopg.Error):  # already broken
            self.conn.close()
        self.conn = self._connect()
        self.measure()

    @contextmanager
    def transaction(self) -> Iterator[psycopg.Connection[Any]]:
        """One transaction; database errors become ``StoreError``/``StoreUnavailable``
        (rolled back, nothing written)."""
        self.requests_made += 1
        try:
            with self.conn.transaction():
                if self.pinned:
                    self.conn.execute(QUERIES["pin_clock"], {"at": self.clock.now()})
                yield self.conn
        except psycopg.Error as exc:
            raise explain(exc, self.url) from None

    def open(self) -> None:
        """Check the schema (``SchemaError``: run ``sheetq init``) and measure the clocks."""
        with self.transaction() as conn:
            schema.check(conn)
        self.measure()

    def measure(self) -> float:
        """The server's clock minus this host's, in seconds (``skew``; 0 with a test clock)."""
        if self.pinned:
            self.skew = 0.0
            return 0.0
        before = datetime.now(UTC)
        with self.transaction() as conn:
            found = conn.execute(QUERIES["server_now"]).fetchone()
        after = datetime.now(UTC)
        assert found is not None
        middle = before + (after - before) / 2
        self.skew = (found["now"] - middle).total_seconds()
        return self.skew

    def hot(self) -> None:
        """Session settings of a connection that claims in a loop (``HOT_SESSION``)."""
        for statement in HOT_SESSION:
            self.conn.execute(statement)
        self.conn.commit()

    # --- claims ----------------------------------------------------------------------

    def claim(
        self,
        run_id: str,
        limit: int,
        types: Sequence[TypeConfig],
        conn: psycopg.Connection[Any] | None = None,
    ) -> Claimed:
        """Claim up to ``limit`` due tasks of ``types`` (runnable: a handler, selected, its
        circuit closed) for ``run_id``, in one statement; in ``conn``'s transaction when
        given, else its own."""
        if limit <= 0 or not types:
            return Claimed()
        if conn is None:
            with self.transaction() as own:
                return self.claim(run_id, limit, types, own)
        records = conn.execute(QUERIES["claim"], self._claim_params(run_id, limit, types))
        return _claimed(records.fetchall())

    def _claim_params(self, run_id: str, limit: int, types: Sequence[TypeConfig]) -> Any:
        return {
            "queue": self.queue,
            "run": run_id,
            "limit": limit,
            "types": [c.name for c in types],
            "leases": [c.policy.lease for c in types],
            "timeouts": [c.policy.timeout for c in types],
            "max_ages": [c.policy.max_age for c in types],
            **self._connector_params(types),
        }

    def _connector_params(self, types: Sequence[TypeConfig]) -> dict[str, Any]:
        """The connectors of ``types`` as the claim reads them (docs/design.md §13)."""
        of = [self.settings.connector_of(c.name) for c in types]
        connectors = {c.name: c for c in of}
        return {
            "connectors": [c.name for c in of],
            "con_names": list(connectors),
            "con_interval": [c.interval for c in connectors.values()],
            "con_slots": [c.concurrency for c in connectors.values()],
        }

    def ensure_connectors(self, types: Sequence[TypeConfig]) -> None:
        """A row for each limited connector of ``types``, for the claim to lock."""
        names = sorted(
            {self.settings.connector_of(c.name).name for c in types}
            & {c.name for c in self.settings.connectors.values() if c.limited}
        )
        if not names:
            return
        with self.transaction() as conn:
            conn.execute(QUERIES["connectors_ensure"], {"queue": self.queue, "names": names})

    def connector_wait(self, types: Sequence[TypeConfig]) -> float | None:
        """Seconds until a rate-limited connector of ``types`` with due tasks has its next
        token (``None``: no due task waits on a token)."""
        params = self._connector_params(types)
        if not any(x is not None for x in params["con_interval"]):
            return None
        with self.transaction() as conn:
            found = conn.execute(
                QUERIES["connector_next"],
                {"queue": self.queue, "types": [c.name for c in types], **params},
            ).fetchone()
        if not found or found["next_at"] is None:
            return None
        return max(0.0, float((found["next_at"] - found["now"]).total_seconds()))

    def connector_outcomes(self, run_id: str, effects: Sequence[Effect]) -> None:
        """Apply finished and returned tasks' effects to their connectors (slots freed,
        the breaker's streak and transitions, their QueueLog rows), in a transaction of
        their own: before the outcomes' own, so a claim never waits on a turn's locks."""
        if not effects:
            return
        with self.transaction() as conn:
            conn.execute(
                QUERIES["connector_outcomes"],
                {
                    "queue": self.queue,
                    "run": run_id,
                    "names": [e.connector for e in effects],
                    "ids": [e.task_id for e in effects],
                    "kinds": [str(e.kind) for e in effects],
                    "thresholds": [e.threshold for e in effects],
                    "cooldowns": [e.cooldown for e in effects],
                    "errors": [e.error for e in effects],
                },
            )

    def peek(self, limit: int, types: Sequence[TypeConfig]) -> list[PgClaim]:
        """What ``claim`` would take now; nothing locked or written (``--dry-run``)."""
        if limit <= 0 or not types:
            return []
        with self.transaction() as conn:
            records = conn.execute(
                QUERIES["peek"],
                {"queue": self.queue, "limit": limit, "types": [c.name for c in types]},
            ).fetchall()
        return [_claim(r) for r in records]

    def connector_gates(self, types: Sequence[TypeConfig], limit: int) -> dict[str, Gate]:
        """The connectors of ``types`` whose claim would now take fewer than ``limit`` of
        their due tasks (``--dry-run``, docs/design.md §13), by name: how many it would
        take, why the rest wait, and its due tasks. The claim's own rules
        (``sheetq.connectors.admits``) on the rows as they are; nothing locked or written."""
        configs = {}
        for c in types:
            found = self.settings.connector_of(c.name)
            configs[found.name] = found
        if not configs:
            return {}
        with self.transaction() as conn:
            clock = conn.execute(QUERIES["server_now"]).fetchone()
            assert clock is not None
            now: datetime = clock["now"]
            rows = {
                str(r["name"]): r
                for r in conn.execute(QUERIES["connector_rows"], {"queue": self.queue})
            }
            counts = {
                str(r["type"]): int(r["waiting"])
                for r in conn.execute(
                    QUERIES["connector_counts"],
                    {"queue": self.queue, "types": [c.name for c in types], "now": now},
                )
            }
        gates = {}
        for name, config in configs.items():
            row = rows.get(name)
            breaker = _breaker(row) if row is not None else Breaker()
            limits = Limits(interval=config.interval, concurrency=config.concurrency)
            allowed = admits(breaker, now, limits, limit)
            if allowed >= limit:
                continue
            due = sum(counts.get(t, 0) for t in (config.types or (name,)))
            gates[name] = Gate(allowed, why_waiting(breaker, now, limits), due)
        return gates

    # --- settling --------------------------------------------------------------------

    def settle(
        self,
        run_id: str,
        outcomes: Sequence[Settle],
        conn: psycopg.Connection[Any] | None = None,
    ) -> list[bool]:
        """Write ``outcomes`` (group commit: one statement however many), each fenced by its
        lease; those that did not land are refused and logged (``refuse``). Returns per
        outcome whether it is written (an outcome found already written, its commit cut
        off with a lost connection, counts as written)."""
        if not outcomes:
            return []
        if conn is None:
            with self.transaction() as own:
                return self.settle(run_id, outcomes, own)
        found = conn.execute(QUERIES["settle"], _settle_params(self.queue, run_id, outcomes))
        landed = {int(r["n"]) for r in found.fetchall()}
        landed |= self._refuse(conn, run_id, outcomes, landed)
        return [n in landed for n in range(1, len(outcomes) + 1)]

    def _refuse(
        self,
        conn: psycopg.Connection[Any],
        run_id: str,
        outcomes: Sequence[Settle],
        landed: set[int],
    ) -> set[int]:
        """Of ``outcomes`` whose ordinals (1-based) are not in ``landed``: refuse and log the
        late ones, and return the ordinals of those found written after all (``refuse``)."""
        missed = [(n, o) for n, o in enumerate(outcomes, start=1) if n not in landed]
        if not missed:
            return set()
        again = conn.execute(
            QUERIES["refuse"],
            {
                "queue": self.queue,
                "run": run_id,
                "ids": [o.task_id for _, o in missed],
                "refuse": [o.refuse for _, o in missed],
                "events": [str(o.event) for _, o in missed],
                "statuses": [str(o.status) for _, o in missed],
                "messages": [o.message for _, o in missed],
                "retry_counts": [o.retry_count for _, o in missed],
                "durations": [o.duration_ms for _, o in missed],
                "max_chars": MAX_ERROR_CHARS,
            },
        )
        return {missed[int(r["n"]) - 1][0] for r in again.fetchall()}

    def settle_and_claim(
        self, run_id: str, outcomes: Sequence[Settle], limit: int, types: Sequence[TypeConfig]
    ) -> tuple[list[bool], Claimed]:
        """A worker's turn: settle ``outcomes`` and claim up to ``limit`` in ONE statement
        (``settle_and_claim``: ``settle`` and ``claim`` joined; one round trip, its own
        transaction). The claim does not see what the settle wrote (one snapshot): a task
        the settle makes due again (a retry due now, the next task of a group) is claimed by
        a later turn, woken by its ``NOTIFY``. Outcomes that did not land are refused, or
        found written after all, in a transaction of their own (``refuse``). Returns per
        outcome whether it is written, and the claim."""
        if limit <= 0 or not types:
            return self.settle(run_id, outcomes), Claimed()
        params = {
            **_settle_params(self.queue, run_id, outcomes),
            **self._claim_params(run_id, limit, types),
        }
        rows = self._alone(TURN, params)
        landed = {int(n) for n in (rows[0]["first_rows"] or [])} if rows else set()
        claimed = _claimed([r for r in rows if r["task_id"] is not None])
        if len(landed) < len(outcomes):
            with self.transaction() as conn:
                landed |= self._refuse(conn, run_id, outcomes, landed)
        return [n in landed for n in range(1, len(outcomes) + 1)], claimed

    def _alone(
        self, statement: tuple[bytes, tuple[str, ...]], params: Mapping[str, Any]
    ) -> list[dict[str, Any]]:
        """Run one statement (``positional``) as its own transaction and return its rows: on
        the autocommit connection, no BEGIN and COMMIT round trips; in a transaction that
        pins a test clock's time when there is one. Database errors as in ``transaction``."""
        query, names = statement
        values = [params[name] for name in names]
        if self.pinned:
            with self.transaction() as conn:
                return (
                    psycopg.RawCursor(conn, row_factory=dict_row).execute(query, values).fetchall()
                )
        self.requests_made += 1
        try:
            cursor = psycopg.RawCursor(self.conn, row_factory=dict_row)
            return cursor.execute(query, values).fetchall()
        except psycopg.Error as exc:
            raise explain(exc, self.url) from None

    def end_lease(self, run_id: str, task_id: str) -> None:
        """End the lease of a task whose handler was interrupted: recovered at once."""
        with self.transaction() as conn:
            conn.execute(
                QUERIES["end_lease"], {"queue": self.queue, "task_id": task_id, "run": run_id}
            )

    # --- recovery and max age ------------------------------------------------------------

    def recover(
        self,
        run_id: str,
        types: Sequence[TypeConfig],
        *,
        rng: random.Random,
        blocked: frozenset[str] = frozenset(),
        reconcile_limit: int = RECOVER_LIMIT,
    ) -> Recovery:
        """Recover expired leases of ``types`` (the types this run is configured for) and
        fail their waiting tasks past ``max_age``, each exactly once whichever run gets there
        first. A lost outcome is decided by ``on_unknown`` (``sheetq.policy.recover``); a
        type with a reconcile check is held by this run to ask it (at most
        ``reconcile_limit``, none of a ``blocked`` type: its circuit is open)."""
        done = Recovery()
        if not types:
            return done
        by_name = {c.name: c for c in types}
        with self.transaction() as conn:
            expired = conn.execute(
                QUERIES["expired_leases"],
                {"queue": self.queue, "types": list(by_name), "limit": RECOVER_LIMIT},
            ).fetchall()
            writes: list[Settle] = []
            reconcile: list[dict[str, Any]] = []
            for record in expired:
                config = by_name[str(record["type"])]
                if config.on_unknown == "reconcile" and config.reconcile is not None:
                    if config.name not in blocked and len(reconcile) < reconcile_limit:
                        reconcile.append(record)
                    continue
                now = record["now"]
                decision = recover(int(record["retry_count"]), config, now, rng)
                writes.append(
                    _decided(
                        str(record["task_id"]),
                        config.name,
                        str(record["owner"]),
                        decision,
                        config=config,
                        now=now,
                        fence=str(record["lease_owner"]),
                        event=Event.RECOVERED,
                        message=outcome_message(decision),  # "unknown: …", as on a sheet
                        duration_ms=None,
                    )
                )
            if writes:
                landed = self.settle(run_id, writes, conn)
                for ok, write in zip(landed, writes, strict=True):
                    done.recovered += ok
                    done.failed += ok and write.status is Status.FAILED
            if reconcile:
                seconds = max(by_name[str(r["type"])].policy.lease for r in reconcile) + sum(
                    by_name[str(r["type"])].policy.timeout for r in reconcile
                )
                held = conn.execute(
                    QUERIES["reclaim"],
                    {
                        "queue": self.queue,
                        "run": run_id,
                        "ids": [str(r["task_id"]) for r in reconcile],
                        "seconds": seconds,
                    },
                ).fetchall()
                got = {str(r["task_id"]) for r in held}
                for record in reconcile:
                    if str(record["task_id"]) in got:
                        claim = _claim(record, previous=Status.PROCESSING)
                        claim.reconcile = True
                        done.reconciles.append(claim)
                done.lease_until = max((r["lease_until"] for r in held), default=None)
            done.expired = self._expire(conn, run_id, types)
        return done

    def _expire(
        self, conn: psycopg.Connection[Any], run_id: str, types: Sequence[TypeConfig]
    ) -> int:
        aged = [c for c in types if c.policy.max_age is not None]
        if not aged:
            return 0
        ages = {c.name: float(c.policy.max_age or 0) for c in aged}
        found = conn.execute(
            QUERIES["too_old"],
            {
                "queue": self.queue,
                "types": list(ages),
                "max_ages": list(ages.values()),
                "shortest": min(ages.values()),
                "limit": EXPIRE_LIMIT,
            },
        ).fetchall()
        ids: list[str] = []
        messages: list[str] = []
        owners: list[str] = []
        for record in found:
            config = next(c for c in aged if c.name == record["type"])
            message = expiry(
                due_since(record["due_since"], None), record["now"], config.policy.max_age
            )
            if message:
                ids.append(str(record["task_id"]))
                messages.append(message)
                owners.append("" if record["owner"] else config.owner)
        if not ids:
            return 0
        row = conn.execute(
            QUERIES["expire"],
            {
                "queue": self.queue,
                "run": run_id,
                "ids": ids,
                "messages": messages,
                "owners": owners,
            },
        ).fetchone()
        return int(row["n"]) if row else 0

    # --- counts ---------------------------------------------------------------------------

    def without_handler(self, types: Sequence[str]) -> Counter[str]:
        """Waiting tasks whose type has no handler, by type (``(empty)`` for a blank type);
        only ``types`` when given (docs/design.md §3: a typo in a type is visible)."""
        handled = [n for n, c in self.settings.types.items() if c.handler is not None]
        with self.transaction() as conn:
            found = conn.execute(
                QUERIES["without_handler"],
                {"queue": self.queue, "handled": handled, "types": list(types)},
            ).fetchall()
        return Counter({str(r["type"]) or "(empty)": int(r["n"]) for r in found})


def _settle_params(queue: str, run_id: str, outcomes: Sequence[Settle]) -> dict[str, Any]:
    return {
        "queue": queue,
        "run": run_id,
        "ids": [o.task_id for o in outcomes],
        "fences": [o.fence for o in outcomes],
        "release": [o.release for o in outcomes],
        "statuses": [str(o.status) for o in outcomes],
        "retry_counts": [o.retry_count for o in outcomes],
        "retry_in": [o.retry_in for o in outcomes],
        "error_classes": [o.error_class for o in outcomes],
        "errors": [o.error for o in outcomes],
        "results": [o.result for o in outcomes],
        "owners": [o.owner for o in outcomes],
        "events": [str(o.event) for o in outcomes],
        "messages": [o.message for o in outcomes],
        "durations": [o.duration_ms for o in outcomes],
    }


@dataclass(frozen=True)
class Gate:
    """A connector that would hold tasks back in a dry run: how many of its due tasks the
    claim would take now (``allowed``), why the others wait, and how many are due."""

    allowed: int
    why: str
    due: int


def _breaker(row: Mapping[str, Any]) -> Breaker:
    """A ``sheetq_connectors`` row as ``sheetq.connectors`` reads it (slots: task id →
    lease end, stored as epoch seconds)."""
    slots = {
        str(k): datetime.fromtimestamp(float(v), UTC) for k, v in dict(row["slots"] or {}).items()
    }
    return Breaker(
        state=State(str(row["state"])),
        until=row["until"],
        reason=str(row["reason"]),
        failures=int(row["failures"]),
        probe=str(row["probe"]),
        probe_until=row["probe_until"],
        opened_at=row["opened_at"],
        slots=slots,
        next_at=row["next_at"],
    )


def _claim(record: Mapping[str, Any], previous: Status | None = None) -> PgClaim:
    return PgClaim(
        connector=str(record.get("connector") or ""),
        probe=bool(record.get("probe")),
        failures=int(record.get("failures") or 0),
        task_id=str(record["task_id"]),
        type=str(record["type"]),
        retry_count=int(record["retry_count"]),
        idempotency_key=str(record["idempotency_key"]),
        owner=str(record["owner"]),
        created=record["created_at"],
        payload_json=str(record["payload_json"]),
        previous=previous or Status(str(record["previous"])),
    )


def _claimed(records: Sequence[Mapping[str, Any]]) -> Claimed:
    out = Claimed()
    # the claim's order (docs/design.md §14): highest priority, longest due, task id
    for record in sorted(records, key=lambda r: (-r["priority"], r["due_at"], r["task_id"])):
        out.now = record["now"]
        if record["loser"]:
            out.skipped += 1
            continue
        out.claims.append(_claim(record))
        out.lease_until = record["lease_until"]
    return out


# --- the database's time, for decisions made in Python -------------------------------------


class ServerClock:
    """``clock`` moved by the server's skew (``RunDb.skew``: 0 with a test clock), so the
    decisions a run makes in Python (may a task still start before its lease ends, when is
    its retry due) are made on the database's time. ``monotonic`` and ``sleep`` are
    ``clock``'s."""

    def __init__(self, clock: Clock, db: RunDb | None = None) -> None:
        self._clock = clock
        self.db = db

    @property
    def host(self) -> Clock:
        """The clock this one moves: this host's (or the test clock)."""
        return self._clock

    def now(self) -> datetime:
        skew = self.db.skew if self.db is not None else 0.0
        return self._clock.now() + timedelta(seconds=skew)

    def monotonic(self) -> float:
        return self._clock.monotonic()

    def sleep(self, seconds: float) -> None:
        self._clock.sleep(seconds)


def runnable(
    settings: Settings, types: Sequence[str], open_circuits: Mapping[str, str] | Sequence[str]
) -> list[TypeConfig]:
    """Types a claim may take: configured with a handler, selected by ``--type`` (if any),
    circuit not open."""
    blocked = set(open_circuits)
    return [
        config
        for name, config in settings.types.items()
        if config.handler is not None and (not types or name in types) and name not in blocked
    ]


def configured(settings: Settings, types: Sequence[str]) -> list[TypeConfig]:
    """Types whose expired leases and ``max_age`` this run looks after: those its
    configuration names (handler or not), selected by ``--type`` (if any)."""
    return [c for name, c in settings.types.items() if not types or name in types]
