"""``sheetq worker`` (docs/design.md §11): a long-running process over a PostgreSQL queue.

Up to ``concurrency`` handlers run at once, each in its own thread
(``sheetq.postgres.slots``: a Python handler runs on that thread itself; one still running
at its timeout is left behind, and a new thread writes the timeout's outcome and takes its
slot); handler threads never touch the database. The main thread owns one connection and, in
ONE statement per turn (``sheetq.postgres.run.RunDb.settle_and_claim``: the settle
statement and the claim statement joined, sent alone: one round trip, one commit), settles
every outcome that finished since the last turn (each fenced by its lease, with its log
row: group commit; a turn waits up to ``LINGER`` for handlers still running, so one commit
carries them too) and claims as many tasks as there are free handler slots; then it hands
the claims to the freed threads. Every ``poll`` seconds it first recovers expired leases
and fails tasks past ``max_age``, of the types it is configured for (``--type``). So each
claimed task starts at once, a kill leaves only started tasks outcome-unknown, and a busy
worker commits once per turn, not twice per task.
It sleeps until a handler finishes, a ``NOTIFY sheetq`` for this queue arrives (a separate
autocommit connection listens; the schema's trigger notifies when a task becomes
pending/retry), or ``poll`` seconds pass (due retries, expired leases), so an enqueued task
starts within a second.

A lost connection (the server restarted, a failover, ``pg_terminate_backend``) is logged
in one line and retried with backoff (1 s, 2 s, … 30 s, with jitter); outcomes that
finished meanwhile are settled after the reconnect (or, if it never comes back, their
leases expire and they are recovered per ``on_unknown``). Given a ``mirror`` pass (the CLI
hands one in when ``SHEETQ_SPREADSHEET`` is set too), a thread runs it every ``[mirror]
interval``; its failures are logged and never stop task processing.

``stop()`` (SIGTERM, SIGINT) stops claiming; running handlers finish within their timeout
and settle; a task still waiting for its rate-limit slot is released; ``run`` returns.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import random
import threading
import time
from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, Any

from sheetq.clock import Clock, SystemClock
from sheetq.config import Settings
from sheetq.errors import SheetqError, StoreUnavailable
from sheetq.handlers.groups import end_running
from sheetq.handlers.python import Abandoned
from sheetq.model import new_run_id
from sheetq.postgres import presence
from sheetq.postgres.run import PgClaim, RunDb, Settle, configured
from sheetq.postgres.runner import PgTasks
from sheetq.postgres.slots import CallWatch, Slots
from sheetq.redact import plural
from sheetq.summary import RunOptions, RunSummary
from sheetq.times import format_ts

if TYPE_CHECKING:
    from sheetq.port import MirrorPass, Notifier

log = logging.getLogger("sheetq.worker")

POLL = 1.0  # seconds between claims when nothing wakes the worker (due retries, leases)
ALERT_EVERY = 10.0  # seconds between owed-alert digests, at most
BACKOFF_MAX = 30.0  # seconds between reconnect attempts, at most
MIRROR_JOIN = 60.0  # seconds a stopping worker waits for a mirror pass under way
LINGER = 0.002  # seconds a turn waits for running handlers to finish too (group commit)


class _StoppableClock:
    """The injected clock, whose real waits (a rate-limit slot) end early when the worker
    stops, so a task waiting to start is released at once on SIGTERM. A fake clock (tests)
    keeps its own instant sleep."""

    def __init__(self, clock: Clock, stop: threading.Event) -> None:
        self._clock = clock
        self._stop = stop

    def now(self) -> datetime:
        return self._clock.now()

    def monotonic(self) -> float:
        return self._clock.monotonic()

    def sleep(self, seconds: float) -> None:
        if isinstance(self._clock, SystemClock):
            self._stop.wait(max(0.0, seconds))
        else:
            self._clock.sleep(seconds)


class PgWorker:
    """``sheetq worker``: claims and runs tasks until ``stop()``. Time is injected."""

    def __init__(
        self,
        settings: Settings,
        *,
        clock: Clock,
        rng: random.Random | None = None,
        notifier: Notifier | None = None,
        concurrency: int = 1,
        types: tuple[str, ...] = (),
        poll: float = POLL,
        run_id: str | None = None,
        mirror: MirrorPass | None = None,
    ) -> None:
        self._stop = threading.Event()
        self._mirror_pass = mirror
        self.settings = settings
        self._raw_clock = clock  # the database's session clock follows it (a test clock)
        self.clock: Clock = _StoppableClock(clock, self._stop)
        self.concurrency = max(1, concurrency)
        self.options = RunOptions(batch_size=self.concurrency, max_batches=None, types=types)
        self.run_id = run_id or new_run_id("worker")
        self.poll = poll
        self.tasks = PgTasks(
            settings,
            clock=self.clock,
            rng=rng,
            notifier=notifier,
            run_id=self.run_id,
        )
        self.tasks.executor.local_breaker = False  # the database's breaker is the worker's
        self.summary: RunSummary = self.tasks.summary
        self.stopped = ""  # why the worker stopped (e.g. "SIGTERM")
        self._wake = threading.Event()
        self._idle = threading.Event()  # set when no handler is running
        self._lock = threading.Lock()
        self._running = 0
        self._finished: list[Settle] = []  # outcomes waiting for the next turn
        self._active: dict[str, datetime] = {}  # task id → lease end, handler running

    # --- control -----------------------------------------------------------------------

    def stop(self, why: str = "stopped") -> None:
        """Stop claiming; running handlers finish. Safe to call from a signal handler."""
        if not self._stop.is_set():
            self.stopped = why
            self._stop.set()
        self._wake.set()

    def abandon(self) -> str:
        """Exiting at once (a second SIGTERM/SIGINT): end the running handlers' process
        groups (SIGKILL) and say, in one line, which tasks stay ``processing`` and when their
        leases end (they are recovered per ``on_unknown`` then); ``""`` if none ran.
        Called from a signal handler: takes no lock another thread could hold for long."""
        end_running()
        active = dict(self._active)
        if not active:
            return ""
        ids = ", ".join(sorted(active)[:5]) + (", …" if len(active) > 5 else "")
        last = format_ts(max(active.values()))
        if len(active) == 1:
            return (
                f"1 task left processing ({ids}), its handler ended; recovered per on_unknown "
                f"when its lease ends at {last}"
            )
        return (
            f"{plural(len(active), 'task')} left processing ({ids}), their handlers ended; "
            f"recovered per on_unknown when their leases end, by {last}"
        )

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    # --- the loop ------------------------------------------------------------------------

    def run(self, *, on_ready: Callable[[], None] | None = None) -> RunSummary:
        """Run until ``stop()``; returns the summary. ``on_ready`` is called once listening."""
        started = self.clock.monotonic()
        db = self._new_db()
        threads = [threading.Thread(target=self._listen, name="sheetq-listen", daemon=True)]
        if self._mirror_pass is not None:
            threads.append(threading.Thread(target=self._mirror, name="sheetq-mirror", daemon=True))
        for thread in threads:
            thread.start()
        pool = Slots(
            self.concurrency, name="sheetq-handler", started_clock=self.tasks.clock.monotonic
        )
        next_alert = 0.0
        next_recovery = 0.0
        next_orphans = 0.0  # when to look again for groups a killed run left (real time)
        failures_seen = -1
        pending: list[Settle] = []
        log.info(
            "worker %s: up to %d handler(s) on queue %r",
            self.tasks.run_id,
            self.concurrency,
            self.settings.queue_sheet,
        )
        if on_ready is not None:
            on_ready()
        try:
            while True:
                self._wake.clear()
                self._linger()
                with self._lock:
                    pending += self._finished
                    self._finished = []
                    running = self._running
                if self.stopping and not pending and running == 0:
                    break
                if time.monotonic() >= next_orphans:  # before this turn recovers anything
                    self.tasks.executor.end_orphans()
                    next_orphans = time.monotonic() + self.poll
                try:
                    if not self.stopping and self.clock.monotonic() >= next_recovery:
                        self._recover(db, pool)
                        next_recovery = self.clock.monotonic() + self.poll
                    more = self._turn(db, pool, pending)
                    pending = []
                    failures = self.summary.failed
                    if failures != failures_seen and self.clock.monotonic() >= next_alert:
                        self.tasks.alerts(db)
                        failures_seen = failures if not self.summary.alerts_owed else -1
                        next_alert = self.clock.monotonic() + ALERT_EVERY
                except StoreUnavailable as exc:
                    if not self._reconnect(db, exc):
                        break  # stopping while the database is away: leases expire
                    continue
                if more and not self.stopping:
                    continue  # slots free and tasks may still be due: claim again at once
                self._wake.wait(self._idle_wait(db))
        finally:
            self._stop.set()
            pool.shutdown()  # running handlers finish (each within its timeout)
            self._wake.set()
        if not pending and not self._finished:
            with contextlib.suppress(StoreUnavailable):
                self.tasks.alerts(db)
        self.summary.seconds = self.clock.monotonic() - started
        self.summary.open_circuits = dict(self.tasks.executor.open_circuits)
        self.summary.requests = db.requests_made
        with contextlib.suppress(Exception):  # closing at exit; nothing left to save
            db.close()
        for thread in threads:  # a mirror pass under way finishes its write
            thread.join(MIRROR_JOIN)
        return self.summary

    def _idle_wait(self, db: RunDb) -> float:
        """Seconds to sleep when nothing more is due: ``poll``, or less when a connector's
        next token comes sooner (docs/design.md §13); none when stopping with no handler
        running (the stop's wake-up may have been cleared by this turn's loop: the loop
        ends now instead of a ``poll`` later)."""
        if self.stopping:
            with self._lock:
                return 0.0 if self._running == 0 else self.poll
        if self._free() <= 0:
            return self.poll
        try:
            wait = db.connector_wait(self.tasks.runnable(self.options))
        except StoreUnavailable:
            return self.poll
        return self.poll if wait is None else min(self.poll, max(0.001, wait))

    def _linger(self) -> None:
        """Before a turn that settles outcomes while other handlers still run, wait up to
        ``LINGER`` seconds for those to finish too, so that one commit carries them all
        (group commit: a turn costs the server about the same for one task as for four)."""
        with self._lock:
            linger = bool(self._finished) and self._running > 0
            if linger:
                self._idle.clear()
        if linger and not self.stopping:
            self._idle.wait(LINGER)

    def _free(self) -> int:
        with self._lock:
            return 0 if self.stopping else self.concurrency - self._running

    def _recover(self, db: RunDb, pool: Slots) -> None:
        """Recover expired leases and fail tasks past ``max_age`` (the types this worker is
        configured for); reconcile checks it now holds start at once in free slots."""
        recovery = self.tasks.recover(db, self.options, max(0, self._free()))
        if recovery.reconciles:
            assert recovery.lease_until is not None
            self._hand_out(pool, recovery.reconciles, recovery.lease_until)

    def _hand_out(self, pool: Slots, claims: list[PgClaim], until: datetime) -> None:
        self.summary.batches += 1
        with self._lock:
            self._running += len(claims)
        for claim in claims:
            pool.submit(
                functools.partial(self._job, claim, until), functools.partial(self._late, claim)
            )

    def _turn(self, db: RunDb, pool: Slots, pending: list[Settle]) -> bool:
        """One statement: settle ``pending`` (group commit) and claim up to the free
        slots; then hand the claims to handler threads. Returns whether to claim again at
        once."""
        free = self._free()
        if free <= 0 and not pending:
            return False
        effects = [o.effect for o in pending if o.effect is not None]
        if effects:  # slots and breaker first, in a transaction of their own (no deadlock)
            db.connector_outcomes(self.run_id, effects)
            for outcome in pending:
                outcome.effect = None  # applied: not again if the settle must be retried
        landed, claimed = db.settle_and_claim(
            self.run_id, pending, max(0, free), self.tasks.runnable(self.options)
        )
        for outcome, ok in zip(pending, landed, strict=True):
            self.tasks.settled(outcome, ok)
        if free <= 0:
            return False
        self.tasks.count_claim(claimed)
        if claimed.claims:
            assert claimed.lease_until is not None
            self._hand_out(pool, claimed.claims, claimed.lease_until)
        # every free slot filled: more may be due; duplicate losers skipped: tasks may be
        # due behind them. Otherwise nothing is due until a wake-up or the next poll.
        return len(claimed.claims) == free or bool(claimed.skipped)

    def _job(self, claim: PgClaim, lease_until: datetime, call: CallWatch) -> None:
        """A handler thread: run the task (a Python handler on this very thread, its
        timeout kept by ``call``); its outcome is written by the main thread."""
        with self._lock:
            self._active[claim.task_id] = lease_until
        self._finish(
            claim,
            lambda: self.tasks.run_claim(
                claim, lease_until, stopping=lambda: self.stopping, watch=call
            ),
        )

    def _late(self, claim: PgClaim, started: float) -> None:
        """The thread replacing one whose Python handler outlived its timeout: the task's
        outcome is the timeout's (then ``on_unknown``); the late result is ignored."""
        self._finish(claim, lambda: self.tasks.timed_out(claim, started))

    def _finish(self, claim: PgClaim, work: Callable[[], Settle]) -> None:
        """Run ``work`` and queue its outcome for the next turn; free the slot."""
        outcome: Settle | None = None
        try:
            outcome = work()
        except Abandoned:
            raise  # left behind at its timeout: the replacing thread frees the slot
        except Exception as exc:  # the task keeps its lease; the next claimer recovers it
            log.error("%s: %s: %s", claim.task_id, type(exc).__name__, exc)
            self.tasks.note(
                f"{claim.task_id}: outcome not written ({type(exc).__name__}); "
                "recovered when its lease ends"
            )
        with self._lock:
            self._active.pop(claim.task_id, None)
            if outcome is not None:
                self._finished.append(outcome)
            self._running -= 1
            if self._running == 0:
                self._idle.set()
        self._wake.set()

    # --- connections -------------------------------------------------------------------------

    def _new_db(self) -> RunDb:
        """The main thread's connection: schema checked (an older schema or no privilege
        stops here), clocks measured, generic plans."""
        db = RunDb(self.settings, self._raw_clock)
        try:
            db.open()
            db.hot()
            self._announce(db)
        except BaseException:
            db.close()
            raise
        self.tasks.clock.db = db
        db.ensure_connectors(configured(self.settings, tuple(self.options.types)))
        return db

    def _announce(self, db: RunDb) -> None:
        """Hold this worker's presence lock on the connection's session (docs/design.md §11
        "A gone worker is named"); again on every new connection."""
        presence.announce(db, run_id=self.run_id, kind="worker")

    def _reconnect(self, db: RunDb, exc: Exception) -> bool:
        """Back off (1 s, 2 s, … ``BACKOFF_MAX``, with jitter) and reconnect until the
        database answers. ``False``: the worker stopped while it was away."""
        log.warning("lost the PostgreSQL connection (%s); reconnecting", _first_line(exc))
        delay = 1.0
        while True:
            self.clock.sleep(delay * self.tasks.rng.uniform(0.75, 1.25))
            try:
                db.reconnect()
                db.hot()
                self._announce(db)
            except StoreUnavailable as again:
                if self.stopping:
                    return False
                log.warning("%s; next try in about %gs", _first_line(again), delay)
                delay = min(BACKOFF_MAX, delay * 2)
                continue
            log.info("reconnected to PostgreSQL")
            self._wake.set()
            return True

    def _listen(self) -> None:
        """Wake the loop on ``NOTIFY sheetq`` naming this queue; reconnects with backoff
        when the connection breaks (the loop polls every ``poll`` seconds meanwhile)."""
        from sheetq.postgres.connection import connect

        delay = 1.0
        while not self.stopping:
            conn: Any = None
            try:
                conn = connect(self.settings.database_url, autocommit=True)
                conn.execute("LISTEN sheetq")
                delay = 1.0
                self._wake.set()  # a notification may have been missed while away
                while not self.stopping:
                    for note in conn.notifies(timeout=0.5):
                        if note.payload == self.settings.queue_sheet:
                            self._wake.set()
            except Exception as exc:  # polling goes on without it
                if not self.stopping:
                    # a first failure is the same lost server the main loop reports in its
                    # one warning line: said at -v; failing again is worth a warning
                    say = log.info if delay <= 1.0 else log.warning
                    say(
                        "LISTEN sheetq stopped (%s); polling every %gs, listening again in "
                        "about %gs",
                        _first_line(exc),
                        self.poll,
                        delay,
                    )
                    self._stop.wait(delay * random.uniform(0.75, 1.25))
                    delay = min(BACKOFF_MAX, delay * 2)
            finally:
                if conn is not None:
                    with contextlib.suppress(Exception):  # closing; nothing left to save
                        conn.close()

    def _mirror(self) -> None:
        """Every ``[mirror] interval``: one mirror pass (docs/design.md §12). Google failing is
        one warning; the next pass catches up. Never stops task processing."""
        assert self._mirror_pass is not None
        while not self.stopping:
            try:
                report = self._mirror_pass(self.clock)
            except SheetqError as exc:
                log.warning("mirror pass failed: %s", _first_line(exc))
            except Exception as exc:  # a bug in a pass must not stop the worker
                log.warning("mirror pass failed: %s: %s", type(exc).__name__, _first_line(exc))
            else:
                for warning in report.warnings:
                    log.info("mirror: %s", warning)
                log.info(report.line())
            self._stop.wait(max(0.1, self.settings.mirror_interval))


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__
