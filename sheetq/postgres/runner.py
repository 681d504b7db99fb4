"""``sheetq process`` on PostgreSQL (docs/design.md §5, §11): claim, run, settle each task.

The same ``RunOptions``, ``RunSummary``, ``--json`` document and summary line as the sheet
runner, on different machinery: no host lock, no run lease and no journal. Any number of
runs and workers share the queue; a claim is one statement (``sheetq.postgres.run``), and
each outcome commits the moment its handler returns, fenced by the lease. A run claims a
task only when it is about to start it (one handler at a time here), so after a kill only
the running task's outcome is unknown (recovered per ``on_unknown`` when its lease ends)
and no claimed-but-unstarted task is charged an attempt. A batch (``--batch-size``) is up
to that many tasks claimed one after another, after recovering the expired leases and
failing the tasks past ``max_age`` of the types this run is configured for;
``--max-batches`` and ``--until-empty`` count those batches.

A lost connection (a restart, a failover, ``pg_terminate_backend``) loses no finished
outcome: the run reconnects with backoff (``RECONNECT``, about a minute in all) and writes
the outcome it holds, still fenced by its lease; only when that runs out does the run
break (exit 1), and then the lease recovers the task.

Running a task (rate limit, handler, ``on_unknown``, the retry decision, the breaker) is
``sheetq.execute.Executor``'s, shared with the sheet runner; writing it is here.
"""

from __future__ import annotations

import logging
import random
import threading
from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, TypeVar

from sheetq.clock import Clock
from sheetq.config import Settings, TypeConfig
from sheetq.errors import Interrupted, StoreUnavailable
from sheetq.execute import Executed, Executor
from sheetq.model import new_run_id
from sheetq.postgres import alerts as pg_alerts
from sheetq.postgres import connectors as pg_connectors
from sheetq.postgres import presence
from sheetq.postgres.connection import describe
from sheetq.postgres.run import (
    Claimed,
    PgClaim,
    Recovery,
    RunDb,
    ServerClock,
    Settle,
    configured,
    effect,
    finished,
    released,
    runnable,
)
from sheetq.summary import RunOptions, RunSummary

if TYPE_CHECKING:
    from sheetq.handlers.python import Watch
    from sheetq.port import Notifier

log = logging.getLogger("sheetq.runner")

_IDLE_CLAIMS = 1000  # duplicate losers skipped in a row by one batch's claims, before giving up
RECONNECT = (0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 30.0)  # seconds between reconnects (with jitter)
T = TypeVar("T")


class PgTasks:
    """What the PostgreSQL ``process`` run and ``worker`` share: one run id, one summary, one
    ``Executor`` (breaker, rate limits, counts) on the database's time, and running one
    claimed task to the write of its outcome. Thread-safe: ``run_claim`` may run in several
    threads; writing is the caller's (one connection, one thread)."""

    def __init__(
        self,
        settings: Settings,
        *,
        clock: Clock,
        rng: random.Random | None = None,
        notifier: Notifier | None = None,
        run_id: str | None = None,
        on_progress: Callable[[str], None] | None = None,
    ) -> None:
        self.settings = settings
        self.clock = ServerClock(clock)  # its ``db`` is set once connected
        self.rng = rng or random.Random()
        self.notifier = notifier
        self.run_id = run_id or new_run_id()
        self.summary = RunSummary(self.run_id)
        self._lock = threading.Lock()
        self._refused = 0
        self.executor = Executor(
            settings,
            clock=self.clock,
            rng=self.rng,
            summary=self.summary,
            note=self._note_locked,
            on_progress=on_progress or (lambda _m: None),
        )

    # --- notes and counts -----------------------------------------------------------

    def note(self, message: str) -> None:
        with self._lock:
            self._note_locked(message)

    def _note_locked(self, message: str) -> None:
        if message not in self.summary.notes:
            self.summary.notes.append(message)
            log.info(message)

    def count_recovery(self, recovery: Recovery) -> None:
        """Count a recovery pass: recovered, failed of them, expired, reconciles held."""
        with self._lock:
            self.summary.recovered += recovery.recovered
            self.summary.failed += recovery.failed
            self.summary.expired += recovery.expired
            self.summary.claimed += len(recovery.reconciles)
        for claim in recovery.reconciles:
            log.info("claimed %s %s (reconcile)", claim.task_id, claim.type)

    def count_claim(self, claimed: Claimed) -> None:
        """Count a claim: the tasks claimed, duplicate losers skipped."""
        with self._lock:
            self.summary.skipped += claimed.skipped
            self.summary.claimed += len(claimed.claims)
        for claim in claimed.claims:
            log.info("claimed %s %s (attempt %d)", claim.task_id, claim.type, claim.retry_count + 1)

    def runnable(self, options: RunOptions) -> list[TypeConfig]:
        """The types a claim may take now (a handler, selected, circuit closed)."""
        return runnable(self.settings, tuple(options.types), self.executor.open_circuits)

    def recover(self, db: RunDb, options: RunOptions, reconcile_limit: int) -> Recovery:
        """Recover expired leases and fail tasks past ``max_age``, of the types this run is
        configured for (and ``--type``); counted. Pauses whose time ran out end first."""
        pg_connectors.tick(db, self.run_id)
        recovery = db.recover(
            self.run_id,
            configured(self.settings, tuple(options.types)),
            rng=self.rng,
            blocked=frozenset(self.executor.open_circuits),
            reconcile_limit=reconcile_limit,
        )
        self.count_recovery(recovery)
        return recovery

    def settled(self, outcome: Settle, landed: bool) -> None:
        """Count an outcome once its transaction committed: a release that landed, or a
        finished attempt refused because its lease had run out."""
        if landed and outcome.release:
            with self._lock:
                self.summary.released += 1
        elif not landed and outcome.refuse:
            with self._lock:
                self._refused += 1
                self._note_locked(
                    f"{self._refused} late outcome(s) refused: the lease had expired and "
                    "another run recovered the task (logged in QueueLog, not written)"
                )

    # --- one task --------------------------------------------------------------------

    def release(self, claim: PgClaim, reason: str) -> Settle:
        """The write giving ``claim`` back unstarted (its connector slot with it)."""
        log.info("released %s: %s", claim.task_id, reason)
        write = released(claim, run_id=self.run_id, reason=reason)
        write.effect = effect(self.settings, claim, None)
        return write

    def why_not(self, claim: PgClaim, lease_until: datetime, stopping: Callable[[], bool]) -> str:
        """Why ``claim`` may not start now (``""``: it may), after its rate-limit wait."""
        config = self.settings.type_config(claim.type)
        reason = self.executor.cannot_start(claim, config, lease_until, out_of_time=False)
        if not reason:
            # the rate limit is the connector's, taken in the claim (docs/design.md §13)
            reason = "the worker is stopping" if stopping() else ""
        return reason

    def execute(self, claim: PgClaim, watch: Watch | None = None) -> Settle:
        """Run the claimed task's handler (or reconcile check) and decide its outcome.
        ``watch``: a Python handler runs on this thread (``Executor.execute``)."""
        config = self.settings.type_config(claim.type)
        executed = self.executor.execute(
            claim, claim.payload_json, config, reconcile=claim.reconcile, watch=watch
        )
        return self._finished(claim, config, executed)

    def timed_out(self, claim: PgClaim, started: float) -> Settle:
        """The outcome of ``claim`` whose Python handler, started at ``started`` (the
        clock's monotonic seconds), was abandoned at its timeout (``Executor.timed_out``)."""
        config = self.settings.type_config(claim.type)
        executed = self.executor.timed_out(claim, claim.payload_json, config, started=started)
        return self._finished(claim, config, executed)

    def _finished(self, claim: PgClaim, config: TypeConfig, executed: Executed) -> Settle:
        """The write of ``executed`` (its connector's effect with it)."""
        write = finished(
            claim,
            executed.decision,
            config=config,
            now=self.clock.now(),
            run_id=self.run_id,
            duration_ms=executed.duration_ms,
            event=executed.event,
        )
        write.effect = effect(self.settings, claim, executed.decision)
        return write

    def run_claim(
        self,
        claim: PgClaim,
        lease_until: datetime,
        *,
        stopping: Callable[[], bool] = lambda: False,
        watch: Watch | None = None,
    ) -> Settle:
        """Run one claimed task, or give it back unstarted (its circuit opened, its lease
        would run out first, or ``stopping()`` says so before the handler starts), and
        return what to write, unwritten. ``watch``: as in ``execute``."""
        reason = self.why_not(claim, lease_until, stopping)
        if reason:
            return self.release(claim, reason)
        return self.execute(claim, watch)

    # --- alerts ------------------------------------------------------------------------

    def alerts(self, db: RunDb) -> None:
        """Send the owed failure alerts through the queue's alert claim (one digest at a
        time per queue, no transaction open while Telegram answers) and count them."""
        if self.notifier is None:
            owed = pg_alerts.owed_count(db)
            with self._lock:
                self.summary.alerts_owed = owed
            return
        digest = pg_alerts.send_owed(
            db,
            self.notifier,
            title=f"PostgreSQL {describe(self.settings.database_url)}",
            run_id=self.run_id,
            now=self.clock.host.now,
        )
        report = digest.report
        if digest.owed is None:  # another run is sending them: they are owed until it marks
            left = pg_alerts.owed_count(db)
        else:
            left = digest.owed if digest.mark_error else digest.owed - digest.covered
        with self._lock:
            self.summary.alerts_sent += digest.covered
            self.summary.alerts_owed = left
            for note in [*(report.notes if report else []), *digest.notes]:
                self._note_locked(note)
        self._connector_alerts(db)

    def _connector_alerts(self, db: RunDb) -> None:
        """The connectors' owed alerts (opened, still open, closed: docs/design.md §13),
        after the failure digest, each taken by one sender across every run and worker."""
        text = getattr(self.notifier, "text", None)
        if text is None:
            return
        sent = pg_connectors.send_owed(
            db, self.settings, text, f"PostgreSQL {describe(self.settings.database_url)}"
        )
        if sent:
            self.note(f"{sent} connector alert(s) sent")


class PgRunner:
    """``sheetq process`` on a PostgreSQL queue. Time and randomness are injected."""

    def __init__(
        self,
        settings: Settings,
        *,
        clock: Clock,
        rng: random.Random | None = None,
        notifier: Notifier | None = None,
        run_id: str | None = None,
        on_progress: Callable[[str], None] | None = None,
    ) -> None:
        self.settings = settings
        self.clock = clock
        self.tasks = PgTasks(
            settings,
            clock=clock,
            rng=rng,
            notifier=notifier,
            run_id=run_id,
            on_progress=on_progress,
        )
        self.run_id = self.tasks.run_id
        self.summary = self.tasks.summary
        self.db = RunDb(settings, clock)
        self.tasks.clock.db = self.db
        self._started = 0.0

    def close(self) -> None:
        self.db.close()

    def run(self, options: RunOptions) -> RunSummary:
        """One run. Returns the summary; raises ``SheetqError`` when the run itself broke and
        ``Interrupted`` on SIGINT/SIGTERM (after ending the running task's lease)."""
        self._started = self.clock.monotonic()
        self.db.open()
        self.db.hot()
        presence.announce(self.db, run_id=self.run_id, kind="process")
        self.db.ensure_connectors(configured(self.settings, tuple(options.types)))
        if options.dry_run:
            self._dry_run(options)
        else:
            self.tasks.executor.end_orphans()  # before any recovery: docs/design.md §5
            self._loop(options)
        self.summary.without_handler = self._retrying(
            lambda: self.db.without_handler(tuple(options.types))
        )
        if not options.dry_run:
            self._retrying(lambda: self.tasks.alerts(self.db))
        return self._finish()

    def _finish(self) -> RunSummary:
        self.summary.seconds = self.clock.monotonic() - self._started
        self.summary.open_circuits = dict(self.tasks.executor.open_circuits)
        self.summary.requests = self.db.requests_made
        log.info(
            "run %s: %.2fs, %d transaction(s)",
            self.run_id,
            self.summary.seconds,
            self.summary.requests,
        )
        return self.summary

    def _retrying(self, step: Callable[[], T]) -> T:
        """``step()``, again after a reconnect when the connection was lost (``RECONNECT``:
        backoff with jitter); ``StoreUnavailable`` once those run out."""
        for delay in (*RECONNECT, None):
            try:
                return step()
            except StoreUnavailable as exc:
                if delay is None:
                    raise
                log.warning("lost the PostgreSQL connection (%s); reconnecting", _first(exc))
                self.clock.sleep(delay * self.tasks.rng.uniform(0.75, 1.25))
                try:
                    self.db.reconnect()
                    self.db.hot()
                    presence.announce(self.db, run_id=self.run_id, kind="process")
                except StoreUnavailable as again:
                    log.warning("%s", _first(again))
        raise AssertionError("unreachable")

    def _out_of_time(self, options: RunOptions) -> bool:
        return (
            options.max_runtime is not None
            and self.clock.monotonic() - self._started >= options.max_runtime
        )

    def _loop(self, options: RunOptions) -> None:
        while True:
            if self._out_of_time(options):
                self.tasks.note("max runtime reached: no new batch claimed")
                return
            if options.max_batches is not None and self.summary.batches >= options.max_batches:
                return
            if not self._batch(options):
                return

    def _batch(self, options: RunOptions) -> bool:
        """Recover, then up to ``batch_size`` tasks, each claimed as it is about to start
        (reconcile checks the recovery now holds first). ``False``: nothing was due and
        nothing recovered."""
        recovery = self._retrying(
            lambda: self.tasks.recover(self.db, options, max(1, options.batch_size))
        )
        held = list(recovery.reconciles)
        taken = 0
        skipped = 0
        while taken < options.batch_size and skipped < _IDLE_CLAIMS:
            if taken and self._out_of_time(options):
                break
            if held:
                claim, until = held.pop(0), recovery.lease_until
            else:
                claimed = self._claim_waiting(options)
                self.tasks.count_claim(claimed)
                if not claimed.claims:
                    if not claimed.skipped:
                        break
                    skipped += 1  # a duplicate loser skipped: there may be due tasks behind it
                    continue
                claim, until = claimed.claims[0], claimed.lease_until
            if taken == 0:
                self.summary.batches += 1
            taken += 1
            assert until is not None
            self._start(claim, until)
        for claim in held:  # out of time before their turn: back, unstarted
            self._write(self.tasks.release(claim, "--max-runtime reached"))
        return taken > 0 or recovery.has_work

    def _claim_waiting(self, options: RunOptions) -> Claimed:
        """Claim one task; when none is granted only because a connector's next token has
        not come yet, wait for it (docs/design.md §5: a rate limit spaces the calls of a
        run) unless ``--max-runtime`` has passed, and claim again."""
        while True:
            claimed = self._retrying(
                lambda: self.db.claim(self.run_id, 1, self.tasks.runnable(options))
            )
            if claimed.claims or claimed.skipped or self._out_of_time(options):
                return claimed
            wait = self._retrying(lambda: self.db.connector_wait(self.tasks.runnable(options)))
            if wait is None:
                return claimed
            log.info("waiting %.2fs for a connector's next start", wait)
            self.clock.sleep(wait)

    def _write(self, outcome: Settle) -> None:
        if outcome.effect is not None:
            found = outcome.effect
            self._retrying(lambda: self.db.connector_outcomes(self.run_id, [found]))
        landed = self._retrying(lambda: self.db.settle(self.run_id, [outcome]))
        self.tasks.settled(outcome, landed[0])

    def _start(self, claim: PgClaim, lease_until: datetime) -> None:
        started = False
        outcome: Settle | None = None
        try:
            reason = self.tasks.why_not(claim, lease_until, lambda: False)
            if reason:
                self._write(self.tasks.release(claim, reason))
                return
            started = True
            outcome = self.tasks.execute(claim)
            self._write(outcome)
        except (KeyboardInterrupt, Interrupted) as exc:
            self._interrupted(claim, started, outcome)
            code = exc.exit_code if isinstance(exc, Interrupted) else 130
            current = (
                f"{self.summary.interrupted}: its outcome is unknown and the next run recovers "
                "it as a lost outcome; "
                if self.summary.interrupted
                else "the running task had finished and its outcome was written; "
            )
            raise Interrupted(
                f"{current}{self.summary.released} unstarted task(s) released", code
            ) from None

    def _interrupted(self, claim: PgClaim, started: bool, outcome: Settle | None) -> None:
        """SIGINT/SIGTERM: an unstarted task goes back; a finished one's outcome is written
        (unless it landed); a running one's lease ends now, so the next run recovers it."""
        if not started:
            self._write(self.tasks.release(claim, "the run was interrupted"))
        elif outcome is not None:
            if outcome.effect is not None:
                self.db.connector_outcomes(self.run_id, [outcome.effect])
            self.db.settle(self.run_id, [outcome])
        else:
            self.db.end_lease(self.run_id, claim.task_id)
            self.summary.interrupted = claim.task_id

    def _dry_run(self, options: RunOptions) -> None:
        """What a claim would take now, by its rules: a connector that is open, paused,
        half-open with its probe out, without a token or a free slot holds its tasks back
        (docs/design.md §13), and a note says which wait and why."""
        runnable = self.tasks.runnable(options)
        limit = options.batch_size
        gates = self.db.connector_gates(runnable, limit)
        # read past the tasks a connector holds back, so the batch is the claim's
        extra = sum(g.due for g in gates.values())
        taken: dict[str, int] = {}
        held: dict[str, list[str]] = {}
        claims: list[PgClaim] = []
        for claim in self.db.peek(limit + extra, runnable):
            if len(claims) >= limit:
                break
            name = self.settings.connector_of(claim.type).name
            gate = gates.get(name)
            if gate is not None:
                if taken.get(name, 0) >= gate.allowed:
                    held.setdefault(name, []).append(claim.task_id)
                    continue
                taken[name] = taken.get(name, 0) + 1
            claims.append(claim)
        for name, gate in sorted(gates.items()):
            waiting = gate.due - taken.get(name, 0)
            if waiting <= 0:
                continue
            ids = held.get(name, [])
            shown = ", ".join(ids[:5]) + (", …" if len(ids) > 5 else "")
            self.tasks.note(
                f"{waiting} due task(s) would wait for connector {name!r} ({gate.why})"
                + (f": {shown}" if shown else "")
            )
        for claim in claims:
            self.summary.would_claim.append(
                {
                    "task_id": claim.task_id,
                    "type": claim.type,
                    "status": str(claim.previous),
                    "attempt": claim.retry_count + 1,
                    "row": None,
                    "reconcile": claim.reconcile,
                }
            )


def _first(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__
