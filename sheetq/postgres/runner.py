"""``sheetq process`` on PostgreSQL (docs/design.md §5, §11): claim, run, settle each task.

The same ``RunOptions``, ``RunSummary``, ``--json`` document and summary line as the sheet
runner, on different machinery: no host lock, no run lease and no journal. Any number of
runs and workers share the queue; each claim is one transaction with ``FOR UPDATE SKIP
LOCKED`` (``sheetq.postgres.queue.claim``), and each outcome commits the moment its handler
returns, fenced by the lease (``settle``). A run claims a task only when it is about to
start it (one handler at a time here), so after a kill only the running task's outcome is
unknown (recovered per ``on_unknown`` when its lease ends) and no claimed-but-unstarted
task is charged an attempt. A batch (``--batch-size``) is up to that many tasks claimed
one after another; ``--max-batches`` and ``--until-empty`` count those batches.

Running a task (rate limit, handler, ``on_unknown``, the retry decision, the breaker) is
``sheetq.execute.Executor``'s, shared with the sheet runner; writing it is here.
"""

from __future__ import annotations

import logging
import random
import threading
from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING

from sheetq.clock import Clock
from sheetq.config import Settings
from sheetq.errors import Interrupted
from sheetq.execute import Executor
from sheetq.model import new_run_id
from sheetq.postgres import alerts as pg_alerts
from sheetq.postgres import hotpath, presence
from sheetq.postgres import queue as pgq
from sheetq.sheet.plan import BatchPlan, Claim, complete, release
from sheetq.sheet.store import ChangeSet, UpdateRow, WorkbookInfo
from sheetq.summary import RunOptions, RunSummary
from sheetq.times import format_ts

if TYPE_CHECKING:
    from sheetq.port import Notifier
    from sheetq.postgres.store import PgStore

log = logging.getLogger("sheetq.runner")

_IDLE_CLAIMS = 1000  # claims in a row that only recovered or expired rows, before giving up


class PgTasks:
    """What the PostgreSQL ``process`` run and ``worker`` share: one run id, one summary, one
    ``Executor`` (breaker, rate limits, counts), and running one claimed task to its
    committed outcome. Thread-safe: ``start`` may run in several threads, each with its own
    store (psycopg connections are not for concurrent use)."""

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
        self.rng = rng or random.Random()
        self.notifier = notifier
        self.run_id = run_id or new_run_id()
        self.summary = RunSummary(self.run_id)
        self._lock = threading.Lock()
        self._refused = 0
        self.executor = Executor(
            settings,
            clock=clock,
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

    def count_plan(self, plan: BatchPlan) -> None:
        """Count a claim's side effects: recoveries, expiries, requeues, duplicate skips."""
        with self._lock:
            self.summary.recovered += plan.recovered
            self.summary.expired += plan.expired
            self.summary.requeued += plan.requeued
            self.summary.skipped += plan.skipped
            self.summary.failed += plan.failed
            self.summary.claimed += len(plan.claims)
        for claim in plan.claims:
            row = claim.row
            log.info(
                "claimed %s %s (%s)",
                row.task_id,
                row.type,
                "reconcile" if claim.reconcile else f"attempt {row.retry_count + 1}",
            )

    def claim(self, store: PgStore, batch_size: int, options: RunOptions) -> BatchPlan:
        """Claim up to ``batch_size`` tasks in one transaction (``hotpath.turn``)."""
        _, plan = hotpath.turn(
            store,
            [],
            run_id=self.run_id,
            now=self.clock.now(),
            batch_size=batch_size,
            types=tuple(options.types),
            open_circuits=tuple(self.executor.open_circuits),
            settings=self.settings,
            rng=self.rng,
        )
        assert plan is not None
        self.count_plan(plan)
        return plan

    def settle(self, store: PgStore, claim: Claim, outcome: ChangeSet) -> None:
        """Commit one finished attempt, fenced by its lease (``hotpath.turn``, no claim)."""
        landed, _ = hotpath.turn(
            store,
            [(outcome, True)],
            run_id=self.run_id,
            now=self.clock.now(),
            batch_size=0,
            types=(),
            open_circuits=(),
            settings=self.settings,
            rng=self.rng,
        )
        self.settled(claim, True, landed[0])

    # --- one task --------------------------------------------------------------------

    def give_back(self, store: PgStore, claim: Claim, reason: str) -> None:
        """Release a claimed task that did not start: previous status, no attempt."""
        changes = self.release_changes(claim, reason)
        self.settled(claim, False, pgq.release(store, changes, self.run_id))

    def release_changes(self, claim: Claim, reason: str) -> ChangeSet:
        """The change set giving ``claim`` back unstarted (``sheetq.sheet.plan.release``)."""
        log.info("released %s: %s", claim.row.task_id, reason)
        return release(
            claim, now=self.clock.now(), run_id=self.run_id, reason=reason, settings=self.settings
        )

    def settled(self, claim: Claim, refuse: bool, landed: bool) -> None:
        """Count an outcome once its transaction committed: a release that landed, or a
        finished attempt refused because its lease had run out."""
        if landed and not refuse:
            with self._lock:
                self.summary.released += 1
        elif not landed and refuse:
            with self._lock:
                self._refused += 1
                self._note_locked(
                    f"{self._refused} late outcome(s) refused: the lease had expired and "
                    "another run recovered the task (logged in QueueLog, not written)"
                )

    def run_claim(
        self,
        claim: Claim,
        lease_until: datetime,
        *,
        stopping: Callable[[], bool] = lambda: False,
    ) -> tuple[ChangeSet, bool]:
        """Run one claimed task (or decide to give it back unstarted: its circuit opened, its
        lease would run out first, or ``stopping()`` says so before the handler starts) and
        return what to write, unwritten: ``(changes, refuse)``, ``refuse`` true for a
        finished attempt (``sheetq.sheet.plan.complete``), false for a release."""
        row = claim.row
        config = self.settings.type_config(row.type)
        reason = self.executor.cannot_start(row, config, lease_until, out_of_time=False)
        if not reason:
            self.executor.wait_rate_limit(config)
            reason = "the worker is stopping" if stopping() else ""
        if reason:
            return self.release_changes(claim, reason), False
        executed = self.executor.execute(
            row, row.raw.text("payload_json"), config, reconcile=claim.reconcile
        )
        outcome = complete(
            claim,
            executed.decision,
            config=config,
            now=self.clock.now(),
            run_id=self.run_id,
            duration_ms=executed.duration_ms,
            settings=self.settings,
            event=executed.event,
        )
        return outcome, True

    def start(
        self,
        store: PgStore,
        claim: Claim,
        lease_until: datetime,
        *,
        stopping: Callable[[], bool] = lambda: False,
    ) -> None:
        """Run one claimed task and commit its outcome (``run_claim``, then ``settle`` or
        ``release`` in one transaction). On SIGINT/SIGTERM while the handler runs
        (``Interrupted`` or ``KeyboardInterrupt`` in this thread), the task's lease is ended
        now, so the next claimer recovers it per ``on_unknown``, and the exception goes on."""
        row = claim.row
        config = self.settings.type_config(row.type)
        started = False
        outcome: ChangeSet | None = None
        try:
            reason = self.executor.cannot_start(row, config, lease_until, out_of_time=False)
            if not reason:
                self.executor.wait_rate_limit(config)
                reason = "the worker is stopping" if stopping() else ""
            if reason:
                self.give_back(store, claim, reason)
                return
            started = True
            executed = self.executor.execute(
                row, row.raw.text("payload_json"), config, reconcile=claim.reconcile
            )
            outcome = complete(
                claim,
                executed.decision,
                config=config,
                now=self.clock.now(),
                run_id=self.run_id,
                duration_ms=executed.duration_ms,
                settings=self.settings,
                event=executed.event,
            )
            self.settle(store, claim, outcome)
        except (KeyboardInterrupt, Interrupted):
            self._interrupted(store, claim, started, outcome)
            raise

    def _interrupted(
        self, store: PgStore, claim: Claim, started: bool, outcome: ChangeSet | None
    ) -> None:
        if not started:
            self.give_back(store, claim, "the run was interrupted")
            return
        if outcome is not None:
            # the handler had returned: its outcome is known; write it unless it landed
            pgq.release(store, outcome, self.run_id)
            return
        end = ChangeSet(
            updates=[
                UpdateRow(
                    self.settings.queue_sheet,
                    claim.row.task_id,
                    claim.row.row,
                    {"lease_until": format_ts(self.clock.now())},
                )
            ]
        )
        pgq.release(store, end, self.run_id)
        self.summary.interrupted = claim.row.task_id

    # --- alerts ------------------------------------------------------------------------

    def alerts(self, store: PgStore, info: WorkbookInfo) -> None:
        """Send the owed failure alerts through the queue's alert claim (one digest at a
        time per queue, no transaction open while Telegram answers) and count them."""
        if self.notifier is None:
            with self._lock:
                self.summary.alerts_owed = pg_alerts.owed_count(store)
            return
        digest = pg_alerts.send_owed(
            store, self.notifier, title=info.title, run_id=self.run_id, now=self.clock.now
        )
        report = digest.report
        if digest.owed is None:  # another run is sending them: they are owed until it marks
            left = pg_alerts.owed_count(store)
        else:
            left = digest.owed if digest.mark_error else digest.owed - digest.covered
        with self._lock:
            self.summary.alerts_sent += digest.covered
            self.summary.alerts_owed = left
            for note in [*(report.notes if report else []), *digest.notes]:
                self._note_locked(note)


class PgRunner:
    """``sheetq process`` against a ``PgStore``. Time and randomness are injected."""

    def __init__(
        self,
        store: PgStore,
        settings: Settings,
        *,
        clock: Clock,
        rng: random.Random | None = None,
        notifier: Notifier | None = None,
        run_id: str | None = None,
        on_progress: Callable[[str], None] | None = None,
    ) -> None:
        self.store = store
        hotpath.hot_session(store.conn)
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
        self._started = 0.0

    def run(self, options: RunOptions) -> RunSummary:
        """One run. Returns the summary; raises ``SheetqError`` when the run itself broke and
        ``Interrupted`` on SIGINT/SIGTERM (after ending the running task's lease)."""
        self._started = self.clock.monotonic()
        info = self.store.open()
        presence.announce(self.store, run_id=self.run_id, kind="process")
        if options.dry_run:
            self._dry_run(options)
        else:
            self.tasks.executor.end_orphans()  # before any recovery: docs/design.md §5
            self._loop(options)
        self.summary.without_handler = pgq.without_handler(
            self.store, self.settings, tuple(options.types)
        )
        if not options.dry_run:
            self.tasks.alerts(self.store, info)
        return self._finish()

    def _finish(self) -> RunSummary:
        self.summary.seconds = self.clock.monotonic() - self._started
        self.summary.open_circuits = dict(self.tasks.executor.open_circuits)
        self.summary.requests = self.store.requests_made
        log.info(
            "run %s: %.2fs, %d transaction(s)",
            self.run_id,
            self.summary.seconds,
            self.summary.requests,
        )
        return self.summary

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
        """Up to ``batch_size`` tasks, each claimed as it is about to start. ``False``:
        nothing was due."""
        taken = 0
        idle = 0
        while taken < options.batch_size and idle < _IDLE_CLAIMS:
            if taken and self._out_of_time(options):
                break
            plan = self.tasks.claim(self.store, 1, options)
            if not plan.claims:
                if not plan.has_work:
                    break
                idle += 1  # recoveries / expiries only: there may be due tasks behind them
                continue
            if taken == 0:
                self.summary.batches += 1
            taken += 1
            assert plan.lease_until is not None
            for claim in plan.claims:
                self._start(claim, plan.lease_until)
        return taken > 0

    def _start(self, claim: Claim, lease_until: datetime) -> None:
        try:
            self.tasks.start(self.store, claim, lease_until)
        except (KeyboardInterrupt, Interrupted) as exc:
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

    def _dry_run(self, options: RunOptions) -> None:
        plan = pgq.claim(
            self.store,
            run_id=self.run_id,
            now=self.clock.now(),
            batch_size=options.batch_size,
            types=tuple(options.types),
            open_circuits=(),
            settings=self.settings,
            rng=self.tasks.rng,
            dry_run=True,
        )
        self.summary.recovered = plan.recovered
        self.summary.expired = plan.expired
        self.summary.requeued = plan.requeued
        self.summary.skipped = plan.skipped
        for claim in plan.claims:
            row = claim.row
            self.summary.would_claim.append(
                {
                    "task_id": row.task_id,
                    "type": row.type,
                    "status": str(claim.previous),
                    "attempt": row.retry_count + 1,
                    "row": None,
                    "reconcile": claim.reconcile,
                }
            )
