"""One ``sheetq process`` run: locks, batches, handlers, circuit breaker, rate limits.

The steps are docs/design.md §5: host lock, the host journal of a killed run, then per batch
a scan, a read of the rows it will claim (whole: payloads, and the pre-image a repair
needs), and one write that carries the previous batch's results, this scan's recoveries,
expiries and requeues, this batch's claims, their log rows and the run lease's
compare-and-set (docs/design.md §6: 2 reads + 1 write). Then the handlers, each journalled
before and after. The last batch's results go out with the lease release after the last
scan. Then owed alerts, and a summary. Every write is addressed by ``task_id`` and
verified by the store (``Store.apply``).
"""

from __future__ import annotations

import hashlib
import logging
import random
import re
import secrets
from collections.abc import Callable, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from sheetq.clock import Clock
from sheetq.config import Settings, TypeConfig
from sheetq.connectors import Breaker, Limits, State, alert_text, effective, why_waiting
from sheetq.errors import Interrupted, LeaseConflict, StoreError
from sheetq.execute import Executor
from sheetq.model import CONNECTOR_COLUMNS, FINISHED, Status, new_run_id
from sheetq.policy import is_due
from sheetq.port import AlertItem, Notifier
from sheetq.sheet.alerts import FRESH_POSITIONS, mark_alerted
from sheetq.sheet.alerts import owed as owed_alerts
from sheetq.sheet.connectors import ALERT_COLUMNS, CONNECTORS_SHEET, Seen
from sheetq.sheet.connectors import owed_alerts as owed_connector_alerts
from sheetq.sheet.connectors import parse as parse_connectors
from sheetq.sheet.connectors import writes as connector_writes
from sheetq.sheet.journal import Journal, journal_path, plan_recovery
from sheetq.sheet.plan import (
    SCAN_COLUMNS,
    BatchPlan,
    Claim,
    Lookahead,
    QueueRow,
    complete,
    next_batch,
    parse_rows,
    plan_batch,
    release,
)
from sheetq.sheet.schema import check_schema
from sheetq.sheet.store import (
    ApplyResult,
    ChangeSet,
    LeaseChange,
    Read,
    Row,
    Snapshot,
    Store,
    UpdateRow,
)
from sheetq.summary import RunOptions, RunSummary, dumps, summary_line
from sheetq.times import format_ts, zone

log = logging.getLogger("sheetq.runner")

# Re-exported: the run's options and summary live in ``sheetq.summary`` (shared with the
# PostgreSQL worker); ``from sheetq.sheet.runner import RunOptions, summary_line`` keeps working.
__all__ = [
    "RunOptions",
    "RunSummary",
    "Runner",
    "dumps",
    "host_lock",
    "lease_expiry",
    "lease_name",
    "lease_token",
    "lock_path",
    "summary_line",
]


def lock_path(settings: Settings) -> Path:
    """One host lock file per spreadsheet and queue worksheet (in ``SHEETQ_LOCK_DIR``)."""
    ident = f"{settings.spreadsheet}\0{settings.queue_sheet}"
    if settings.spreadsheet.startswith("local:"):
        ident = (
            f"local:{Path(settings.spreadsheet[6:]).expanduser().resolve()}\0{settings.queue_sheet}"
        )
    digest = hashlib.sha256(ident.encode()).hexdigest()[:16]
    slug = re.sub(r"[^A-Za-z0-9]+", "-", settings.queue_sheet).strip("-")[:30] or "queue"
    return settings.lock_dir / f"{slug}-{digest}.lock"


def host_lock(settings: Settings, *, timeout: float = 0) -> Any:
    """The host lock file of this queue (a ``filelock.FileLock``, not yet acquired).

    Raises ``ConfigError`` (exit 2) when ``SHEETQ_LOCK_DIR`` cannot be created.
    """
    from filelock import FileLock

    from sheetq.errors import ConfigError

    path = lock_path(settings)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(
            f"SHEETQ_LOCK_DIR: cannot create {path.parent} ({exc.strerror or exc}); set it to "
            "a writable directory"
        ) from None
    return FileLock(str(path), timeout=timeout)


def lease_name(queue_sheet: str) -> str:
    """The named range used as the queue's run lease (a valid Sheets range name)."""
    return "sheetq_lease_" + hashlib.sha256(queue_sheet.encode()).hexdigest()[:12]


def lease_token(expires: datetime, rng: random.Random | None = None) -> str:
    """A version token that carries its expiry: 10 digits of epoch seconds + 6 random digits."""
    nonce = rng.randrange(10**6) if rng else secrets.randbelow(10**6)
    return f"{int(expires.timestamp()):010d}{nonce:06d}"


def lease_expiry(token: str) -> datetime | None:
    from datetime import UTC

    if len(token) < 10 or not token[:10].isdigit():
        return None
    return datetime.fromtimestamp(int(token[:10]), UTC)


class Runner:
    """Runs ``process`` against one store. Time and randomness are injected."""

    def __init__(
        self,
        store: Store,
        settings: Settings,
        *,
        clock: Clock,
        rng: random.Random | None = None,
        notifier: Notifier | None = None,
        run_id: str | None = None,
        on_progress: Callable[[str], None] | None = None,
    ) -> None:
        self.store = store
        self.settings = settings
        self.clock = clock
        self.rng = rng or random.Random()
        self.notifier = notifier
        self.run_id = run_id or new_run_id()
        self.on_progress = on_progress or (lambda _msg: None)
        self.summary = RunSummary(self.run_id)
        self._lease_name = lease_name(settings.queue_sheet)
        self._lease: str | None = None  # token we hold
        # runs each claimed task's handler; owns the open circuits and this run's failures
        self.executor = Executor(
            settings,
            clock=clock,
            rng=self.rng,
            summary=self.summary,
            note=self._note,
            on_progress=self.on_progress,
        )
        self._started = 0.0
        self._snapshot: Snapshot | None = None  # the last whole-Queue read: scan or verify
        self._snapshot_at = 0.0  # its monotonic time
        self._positions: dict[str, int] = {}  # task_id → row, when known fresher than a scan
        self._claim_rows: list[Row] = []  # the claimed rows, read whole just before the claim
        self._claim_positions: dict[str, int] = {}  # task_id → row, verified after the claim
        self._claim_missing: set[str] = set()  # claimed tasks whose row a person deleted
        self._pending: ChangeSet | None = None  # results not written yet (ride in the next claim)
        self._pending_full: Snapshot | None = None  # their rows' full pre-image
        self._held: set[str] = set()  # tasks claimed by this run whose results are not written
        self._moved_back = 0  # claims of the last batch given back because their rows moved
        # the last plan's due tasks left for later batches, the store's version before its
        # read, and the circuits open then (``_plan_ahead``)
        self._ahead: tuple[Lookahead | None, int | None, frozenset[str]] = (None, None, frozenset())
        self._journal = Journal(journal_path(lock_path(settings)), sync=store.survives_power_loss)
        # the Connectors worksheet as this run first read it (None: none, or not read yet)
        self._connectors: dict[str, Seen] | None = None
        self._told: dict[str, str] = {}  # connector → what this run's alerts told Telegram

    # --- the run ---------------------------------------------------------------

    def run(self, options: RunOptions) -> RunSummary:
        """One run. Returns the summary; raises ``SheetqError`` when the run itself broke."""
        from filelock import Timeout

        self._started = self.clock.monotonic()
        lock = host_lock(self.settings)
        path = lock.lock_file
        try:
            lock.acquire()
        except Timeout:
            self.summary.locked = (
                f"another sheetq process on this host is processing this queue ({path})"
            )
            return self._finish()
        try:
            self._run_locked(options)
        finally:
            lock.release()
        return self._finish()

    def _finish(self) -> RunSummary:
        if self._journal.problem:
            self._note(f"{self._journal.problem}: a kill would leave finished outcomes unknown")
        self.summary.seconds = self.clock.monotonic() - self._started
        self.summary.open_circuits = dict(self.executor.open_circuits)
        self.summary.requests = self.store.requests_made
        log.info(
            "run %s: %.2fs, %d request(s)", self.run_id, self.summary.seconds, self.summary.requests
        )
        return self.summary

    def _run_locked(self, options: RunOptions) -> None:
        info = self.store.open()
        check_schema(info, self.settings)
        self.info = info
        self._tz = zone(info.time_zone)
        self._seen_lease = info.leases.get(self._lease_name)
        if not options.dry_run:  # what a killed run's handlers left running ends first
            self.executor.end_orphans()
        if not self._apply_journal(options):
            return
        last_rows: list[QueueRow] = []
        fresh_scan = False  # the last scan came after the last handler ran
        stalls = 0  # batches in a row that ran nothing because rows moved under them
        while True:
            if self._out_of_time(options):
                self.summary.notes.append("max runtime reached: no new batch claimed")
                break
            if options.max_batches is not None and self.summary.batches >= options.max_batches:
                break
            now = self.clock.now()
            plan = self._plan_ahead(options, now)
            if plan is None:
                version = self.store.version()  # before the read: a later write is seen
                rows = self._scan()
                fresh_scan = True
                last_rows = rows
                now = self.clock.now()
                blocked = self.executor.blocked()
                plan = plan_batch(
                    rows,
                    settings=self.settings,
                    now=now,
                    run_id=self.run_id,
                    batch_size=options.batch_size,
                    rng=self.rng,
                    types=options.types,
                    open_circuits=blocked,
                    held=self._held if self._pending is not None else (),
                    settled=self._settled(),
                )
                self._ahead = (plan.ahead, version, frozenset(blocked))
                log.info("scan: %d row(s), %d due task(s) to claim", len(rows), len(plan.claims))
            self.summary.without_handler = plan.without_handler
            for note in plan.invalid_times:
                self._note(f"unparseable {note}; treated as due")
            for note in plan.invalid_priorities:
                self._note(note)
            if options.dry_run:
                self._dry_run(plan)
                self._dry_run_waits(rows, options, now)
                return
            if not plan.has_work:
                break
            if not self._claim(plan, now):
                return
            if not plan.claims:
                break
            fresh_scan = False
            ran_any = self._work(plan, options)
            if not ran_any:
                # nothing ran: stop, unless rows a person moved were given back unrun and
                # the run may try again (twice at most, so a busy sheet cannot spin it)
                stalls = stalls + 1 if self._moved_back else 3
                if stalls >= 3 or options.max_batches is not None:
                    break
            else:
                stalls = 0
        # the connectors' owed alerts go first: what they told rides in the last write
        self._connector_alerts(last_rows)
        self._flush(fresh_scan=fresh_scan)
        self._alerts(last_rows)

    def _apply_journal(self, options: RunOptions) -> bool:
        """Apply what this host's journal knows of a run that was killed (docs/design.md §5 "A kill
        loses no finished work"): its finished outcomes, its never-started tasks given back,
        its started-but-unfinished tasks made recoverable now. We hold the host lock, so the
        journal's run is dead. One read and one write, only after a kill. ``False``: another
        live run holds the queue's lease (the journal is kept for later)."""
        state = self._journal.load()
        if state.damaged:
            self._note(
                f"host journal {self._journal.path}: {state.damaged} torn or damaged line(s) "
                "ignored"
            )
        if not state:
            if state.size:
                self._journal.clear()
            return True
        runs = ", ".join(sorted(state.runs))
        if options.dry_run:
            self._note(
                f"this host's journal holds the work of killed run {runs}; the next run "
                "applies it first"
            )
            return True
        now = self.clock.now()
        current = self._seen_lease
        if current is not None and current not in state.leases:
            expiry = lease_expiry(current)
            if expiry is not None and expiry > now:
                self.summary.locked = "another sheetq run holds this queue's lease"
                self._note(
                    f"host journal of killed run {runs} kept: applied when the queue is free"
                )
                return False
        rows = self._scan(planned=False)  # a journal's task may have been finished by hand
        recovery = plan_recovery(state, rows, now=now, run_id=self.run_id, settings=self.settings)
        # the killed run's lease, if it still stands, is released in the same request: its
        # token is in the journal, or it has expired (compare-and-set: fails if replaced)
        recovery.changes.lease = LeaseChange(self._lease_name, None, current)
        try:
            self.store.apply(recovery.changes)
        except LeaseConflict:
            self.summary.locked = "another sheetq run took this queue's lease"
            return False
        self._seen_lease = None
        self._journal.clear()
        self.summary.journal = recovery.as_json()
        self.summary.released += recovery.returned
        for note in recovery.notes:
            self._note(note)
        self._note(
            f"host journal of killed run {runs} applied: {recovery.applied} finished outcome(s) "
            f"written, {recovery.returned} unstarted task(s) returned without an attempt, "
            f"{recovery.unknown} started and unfinished (recovered now per on_unknown)"
        )
        return True

    def _out_of_time(self, options: RunOptions) -> bool:
        return (
            options.max_runtime is not None
            and self.clock.monotonic() - self._started >= options.max_runtime
        )

    def _plan_ahead(self, options: RunOptions, now: datetime) -> BatchPlan | None:
        """The next batch without reading the queue again, when the last plan's order still
        holds (``sheetq.sheet.plan.next_batch``): the store tells that no one else wrote since
        that read (the local workbook; Google cannot tell without a read), nothing became
        due, expired or lost its lease since, no circuit changed, and every task this run
        claimed since finished. ``None``: read and plan afresh."""
        ahead, version, blocked = self._ahead
        if ahead is None or not ahead.rest or version is None or options.dry_run:
            return None
        if ahead.horizon is not None and now >= ahead.horizon:
            return None
        if self._moved_back or frozenset(self.executor.blocked()) != blocked:
            return None
        settled = self._settled()
        if any(settled.get(task_id) not in FINISHED for task_id in self._held):
            return None  # a retry or a released task may come first again
        if self.store.version() != version:
            return None
        return next_batch(
            ahead,
            settings=self.settings,
            now=now,
            run_id=self.run_id,
            batch_size=options.batch_size,
        )

    def _settled(self) -> dict[str, Status]:
        """The statuses this run's unwritten results set, by task id (they ride in the next
        claim's write): a group's next task may be claimed in that same write."""
        out: dict[str, Status] = {}
        for update in self._pending.updates if self._pending is not None else ():
            status = Status.parse(update.values.get("status"))
            if update.worksheet == self.settings.queue_sheet and status and update.key:
                out[update.key] = status
        return out

    def _note(self, message: str) -> None:
        if message not in self.summary.notes:
            self.summary.notes.append(message)
            log.info(message)  # the CLI prints the notes; logging them too would say it twice

    def _scan(self, *, planned: bool = True) -> list[QueueRow]:
        # With results held, the scan also locates their write (it rides in the next claim):
        # it then reads `result` too, the one column a result writes that a scan does not.
        # ``planned``: only the rows the plan and the owed alerts can need, where the backend
        # can leave the others out (``Read.planned``).
        columns = (*SCAN_COLUMNS, "result") if self._pending is not None else SCAN_COLUMNS
        reads = [Read(self.settings.queue_sheet, columns, planned=planned)]
        first = self._connectors is None and CONNECTORS_SHEET in self.info.sheets
        if first:  # the run's first scan reads the Connectors rows too: the same request
            reads.append(Read(CONNECTORS_SHEET, CONNECTOR_COLUMNS))
        snap, *more = self.store.read(reads)
        if first:
            self._seed_connectors(more[0].rows)
        self._snapshot = snap
        self._snapshot_at = self.clock.monotonic()
        self._positions = {}
        return parse_rows(snap.rows, self._tz, self.info.locale)

    def _seed_connectors(self, rows: list[Row]) -> None:
        """The connectors' persisted state (docs/design.md §13) becomes this run's: open or
        paused ones hold their types' tasks, the rate limit goes on from its next start."""
        seen = parse_connectors(rows, self.clock.now(), self._tz, self.info.locale)
        self._connectors = seen
        for name, found in sorted(seen.items()):
            if found.typo:
                self._note(found.typo_note(name))
        for name in self.settings.connectors:
            item = seen.get(name)
            self.executor.seed(item.breaker if item else Breaker(), name)

    def _connector_writes(self) -> ChangeSet:
        """The Connectors rows this run changed and their QueueLog rows."""
        if self._connectors is None:
            return ChangeSet()
        return connector_writes(
            self.settings,
            self._connectors,
            dict(self.executor.shared),
            list(self.executor.changes),
            now=self.clock.now(),
            run_id=self.run_id,
            alerted=self._told,
            lacking=self.info.sheet(CONNECTORS_SHEET).missing(CONNECTOR_COLUMNS),
        )

    def _dry_run(self, plan: BatchPlan) -> None:
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
                    "row": row.row,
                    "reconcile": claim.reconcile,
                }
            )

    def _dry_run_waits(self, rows: Sequence[QueueRow], options: RunOptions, now: datetime) -> None:
        """A note per connector that holds its due tasks back (open or paused, from the
        Connectors worksheet: docs/design.md §13), worded as on PostgreSQL."""
        for name in sorted(self.executor.shared):
            breaker = self.executor.shared[name]
            if effective(breaker, now) not in (State.OPEN, State.PAUSED):
                continue
            config = self.settings.connectors.get(name)
            types = config.types if config and config.types else (name,)
            ids = [
                r.task_id
                for r in rows
                if r.type in types
                and (not options.types or r.type in options.types)
                and r.status in (Status.PENDING, Status.RETRY)
                and is_due(r.next_retry_at, now)
            ]
            if not ids:
                continue
            why = why_waiting(breaker, now, Limits())
            shown = ", ".join(ids[:5]) + (", …" if len(ids) > 5 else "")
            self._note(f"{len(ids)} due task(s) would wait for connector {name!r} ({why}): {shown}")

    # --- claim -------------------------------------------------------------------

    def _lease_change(self, plan: BatchPlan, now: datetime) -> LeaseChange | None:
        """Compare-and-set of the run lease; ``None`` if another live run holds it."""
        current = self._lease or self._seen_lease
        if current is not None and current != self._lease:
            expiry = lease_expiry(current)
            if expiry is not None and expiry > now:
                return None
        if not plan.claims:
            return LeaseChange(self._lease_name, None, current)
        assert plan.lease_until is not None
        return LeaseChange(self._lease_name, lease_token(plan.lease_until, self.rng), current)

    def _claim(self, plan: BatchPlan, now: datetime) -> bool:
        """One write: the previous batch's results (if held), the recoveries, expiries and
        requeues of this scan, this batch's claims, and the run lease's compare-and-set.
        Returns ``False`` when another run holds the queue."""
        change = self._lease_change(plan, now)
        if change is None:
            self.summary.locked = "another sheetq run holds this queue's lease"
            return False
        queue = self.settings.queue_sheet
        # The rows this write changes, read whole first: the claimed tasks' payloads for the
        # handlers, and every target's full pre-image, so that a person moving a column
        # between this read and the write can be undone cell by cell (docs/design.md §5).
        numbers = tuple(sorted({u.row for u in plan.changes.updates if u.key is not None}))
        whole = self.store.read([Read(queue, None, rows=numbers)])[0] if numbers else None
        results = self._pending
        changes = ChangeSet()
        if results is not None:
            changes.extend(results)  # the previous batch's results ride in this write
        changes.extend(plan.changes)
        changes.lease = change
        self._journal.claimed(self.run_id, change.token, plan.lease_until, plan.claims)
        baseline = tuple(s for s in (self._snapshot, whole, self._pending_full) if s is not None)
        try:
            # located by the scan moments ago; verified by the write's echo (or a read)
            applied = self.store.apply(changes, baseline=baseline)
        except LeaseConflict:
            self.summary.locked = "another sheetq run took this queue's lease"
            if results is not None:
                self._flush(fresh_scan=True)  # the results must land anyway
            self._lease = None
            self._journal.clear()  # nothing was claimed
            return False
        if results is not None:
            self._pending = None
            self._pending_full = None
            self._after_results(applied)
        self._journal.keep_claim(self.run_id, change.token, plan.lease_until, plan.claims)
        self._lease = change.token
        self._seen_lease = change.token
        self._claim_rows = whole.rows if whole is not None else []
        self._claim_positions = applied.rows
        self._claim_missing = set(applied.missing)
        self._held = {c.row.task_id for c in plan.claims}
        for line in applied.repaired:
            self._note(f"the sheet changed during the claim write: {line}")
        self.summary.recovered += plan.recovered
        self.summary.expired += plan.expired
        self.summary.requeued += plan.requeued
        self.summary.skipped += plan.skipped
        self.summary.failed += plan.failed
        if plan.claims:
            self.summary.batches += 1
            self.summary.claimed += len(plan.claims)
            log.info("batch %d: claimed %d task(s)", self.summary.batches, len(plan.claims))
        else:
            self._lease = None  # released by this write (nothing claimed)
            self._seen_lease = None
            self._journal.clear()
        self._remember_plan_failures(plan)
        return True

    def _remember_plan_failures(self, plan: BatchPlan) -> None:
        from sheetq.sheet.plan import as_int

        for update in plan.changes.updates:
            if update.values.get("status") == Status.FAILED and update.key:
                self.executor.failures[update.key] = AlertItem(
                    task_id=update.key,
                    type="",
                    error_class=str(update.values.get("error_class", "")),
                    attempts=as_int(update.values.get("retry_count")),
                    error=str(update.values.get("last_error", "")),
                    row=update.row,
                )

    # --- work ----------------------------------------------------------------------

    def _read_back(self, plan: BatchPlan) -> tuple[list[tuple[Claim, Row]], list[Claim]]:
        """The claimed rows: (claim, its row as read whole before the claim) for each claimed
        task, and the claims to give back.

        The claim write was verified (the store re-located every target by ``task_id``
        and checked it holds this run's lease), so the payloads read just before it are
        the tasks'. A task whose row a person deleted is given back (the release is
        harmless: it finds no row). A task whose row moved before the claim's whole-row
        read is read again where it is now, one more request, only then: a sort never
        strands a batch.
        """
        queue = self.settings.queue_sheet
        by_number = {r.number: r for r in self._claim_rows}
        keep: list[tuple[Claim, Row]] = []
        give_back: list[Claim] = []
        found: dict[str, Row] = {}
        moved: dict[str, int] = {}
        for claim in plan.claims:
            task_id = claim.row.task_id
            if task_id in self._claim_missing:
                continue
            row = by_number.get(claim.row.row)
            if row is not None and row.text("task_id").strip() == task_id:
                found[task_id] = row
            else:
                moved[task_id] = self._claim_positions.get(task_id, claim.row.row)
        for _attempt in range(2):  # moved again meanwhile: locate by task_id, read again
            if not moved:
                break
            (again,) = self.store.read([Read(queue, None, rows=tuple(moved.values()))])
            at = {r.number: r for r in again.rows}
            for task_id, number in list(moved.items()):
                row = at.get(number)
                if row is not None and row.text("task_id").strip() == task_id:
                    found[task_id] = row
                    del moved[task_id]
            if moved:
                (ids,) = self.store.read([Read(queue, ("task_id",))])
                where = {r.text("task_id").strip(): r.number for r in ids.rows}
                moved = {t: where[t] for t in moved if t in where}
        for claim in plan.claims:
            row = found.get(claim.row.task_id)
            if row is None:
                give_back.append(claim)
                continue
            claim.row.row = self._claim_positions.get(claim.row.task_id, row.number)
            keep.append((claim, row))
        return keep, give_back

    def _work(self, plan: BatchPlan, options: RunOptions) -> bool:
        keep, give_back = self._read_back(plan)
        results = ChangeSet()
        ran_any = False
        assert plan.lease_until is not None
        for claim in give_back:
            results.extend(self._release(claim, "row moved between claim and read-back"))
        self._moved_back = len(give_back)
        stop: BaseException | None = None
        for index, (claim, row) in enumerate(keep):
            outcome: ChangeSet | None = None
            try:
                config = self.settings.type_config(claim.row.type)
                reason = self.executor.cannot_start(
                    claim.row, config, plan.lease_until, self._out_of_time(options)
                )
                if reason:
                    results.extend(self._release(claim, reason))
                    continue
                self.executor.wait_rate_limit(config)
                self.executor.starting(claim.row, plan.lease_until)
                self._journal.started(self.run_id, claim)
                outcome = self._run_one(claim, row, config)
                results.extend(outcome)
                self._journal.ended(self.run_id, claim.row.task_id, outcome)
                ran_any = True
            except (KeyboardInterrupt, Interrupted) as exc:
                stop = exc
                unstarted = [c for c, _ in keep[index + 1 :]]
                if outcome is None:
                    results.extend(self._interrupted(claim, unstarted))
                else:  # the handler had returned: its outcome is known and kept
                    for other in unstarted:
                        results.extend(self._release(other, "the run was interrupted"))
                break
        self._pending = results
        self._pending_full = self._full_after_claim(plan)
        if stop is not None:
            self._flush(fresh_scan=False)
        if stop is not None:
            code = stop.exit_code if isinstance(stop, Interrupted) else 130
            current = (
                f"{self.summary.interrupted}: its outcome is unknown and the next run recovers "
                "it as a lost outcome; "
                if self.summary.interrupted
                else "the running task had finished and its outcome was written; "
            )
            raise Interrupted(
                f"{current}{self.summary.released} unstarted task(s) released", code
            ) from None
        return ran_any

    def _full_after_claim(self, plan: BatchPlan) -> Snapshot | None:
        """The claimed rows as they are in the sheet now: read whole before the claim, with
        the claim's cells on top. The full pre-image of the results write (only a person
        moving a column mid-write needs it)."""
        if not self._claim_rows:
            return None
        claimed = {u.key: u.values for u in plan.changes.updates if u.key is not None}
        rows = [
            Row(r.number, {**r.values, **claimed.get(r.text("task_id").strip(), {})})
            for r in self._claim_rows
        ]
        header = self.info.sheet(self.settings.queue_sheet).header
        return Snapshot(self.settings.queue_sheet, header, rows, tuple(n for n in header if n))

    def _flush(self, *, fresh_scan: bool) -> None:
        """Write the results still held (the last batch's, when no further claim carries
        them) and release the run lease, in one request. ``fresh_scan``: the last scan was
        made just now, after the handlers, so it locates the rows (else the store reads)."""
        results = self._pending
        connectors = self._connector_writes()
        if results is None:
            if self._lease is not None or connectors:
                results = ChangeSet()
            else:
                return
        results.extend(connectors)
        results.lease = LeaseChange(self._lease_name, None, self._lease)
        baseline = tuple(
            s
            for s in ((self._snapshot if fresh_scan else None), self._pending_full)
            if s is not None
        )
        try:
            applied = self.store.apply(results, baseline=baseline)
        except LeaseConflict:
            # Our lease ran out and another run replaced it; the results must land anyway.
            self._note("run lease expired during the batch; results written without it")
            results.lease = None
            applied = self.store.apply(results, baseline=baseline)
        self._journal.clear()  # the batch is in the sheet: nothing left to replay
        self._lease = None
        self._seen_lease = None
        self._pending = None
        self._pending_full = None
        self._after_results(applied)

    def _after_results(self, applied: ApplyResult) -> None:
        for line in applied.repaired:
            self._note(f"the sheet changed during the result write: {line}")
        for key, number in applied.rows.items():
            if key in self.executor.failures:
                self.executor.failures[key].row = number
        located = applied.positions.get(self.settings.queue_sheet)
        if located:
            self._positions = located
        for key in applied.missing:
            if key in self._held:
                self._note(f"{key}: row deleted by a person before its result was written")
        self._held = set()

    def _interrupted(self, current: Claim, unstarted: Sequence[Claim]) -> ChangeSet:
        """Asked to stop mid-task (the handler was killed with its process group): the current
        task keeps ``processing`` with its lease ended now, so the next run recovers it at once
        per ``on_unknown`` (as after a crash); unstarted tasks are released."""
        changes = ChangeSet()
        changes.updates.append(
            UpdateRow(
                self.settings.queue_sheet,
                current.row.task_id,
                current.row.row,
                {"lease_until": format_ts(self.clock.now())},
            )
        )
        self.summary.interrupted = current.row.task_id
        for claim in unstarted:
            changes.extend(self._release(claim, "the run was interrupted"))
        return changes

    def _release(self, claim: Claim, reason: str) -> ChangeSet:
        self.summary.released += 1
        return release(
            claim, now=self.clock.now(), run_id=self.run_id, reason=reason, settings=self.settings
        )

    def _run_one(self, claim: Claim, row: Row, config: TypeConfig) -> ChangeSet:
        """Run the claimed task (``row``: its row read whole) and its outcome's change set."""
        executed = self.executor.execute(
            claim.row, row.text("payload_json"), config, reconcile=claim.reconcile
        )
        return complete(
            claim,
            executed.decision,
            config=config,
            now=self.clock.now(),
            run_id=self.run_id,
            duration_ms=executed.duration_ms,
            settings=self.settings,
            event=executed.event,
        )

    # --- alerts --------------------------------------------------------------------------

    def owed(self, rows: Sequence[QueueRow]) -> list[AlertItem]:
        """Owed alerts: failed rows of the last scan without ``alerted_at``, and this run's
        failures (see ``sheetq.port``)."""
        items = owed_alerts(rows, link=lambda row, task_id: "", failures=self.executor.failures)
        for item in items:
            item.row = self._positions.get(item.task_id, item.row)
            item.link = self.store.link(
                self.info, self.settings.queue_sheet, item.row, item.task_id
            )
        return items

    def _connector_alerts(self, rows: Sequence[QueueRow]) -> None:
        """The connectors' owed alerts (docs/design.md §13), one message each: opened, still
        open after ``escalate_after``, closed again; never one per task. Owed until sent
        (``sheetq.connectors.owed``, from the state and the row's ``alerted``): a send that
        fails is tried again by the next run. Sent just before the run's last write, which
        records what was told in the ``alerted`` cells (no request of its own)."""
        text = getattr(self.notifier, "text", None)
        if self._connectors is None or text is None:
            return
        lacking = self.info.sheet(CONNECTORS_SHEET).missing(ALERT_COLUMNS)
        if lacking:  # what was told could not be recorded: every run would send it again
            self._note(
                f"connector alerts not sent: worksheet '{CONNECTORS_SHEET}' lacks column(s) "
                f"{', '.join(lacking)}; run `sheetq init` to add them"
            )
            return

        def waiting(types: tuple[str, ...]) -> int:
            due = (Status.PENDING, Status.RETRY)
            return sum(1 for r in rows if r.status in due and r.type in types)

        sent = failed = 0
        alerts = owed_connector_alerts(
            self.settings, self._connectors, self.executor.shared, waiting, self.clock.now()
        )
        for alert in alerts:
            if text(alert_text(alert, self.info.title)):
                self._told[alert["name"]] = alert["kind"]
                sent += 1
            else:
                failed += 1
        if sent:
            self._note(f"{sent} connector alert(s) sent")
        if failed:
            self._note(f"{failed} connector alert(s) not sent; they stay owed")

    def _alerts(self, rows: Sequence[QueueRow]) -> None:
        owed = self.owed(rows)
        self.summary.alerts_owed = len(owed)
        if not owed or self.notifier is None:
            return
        report = self.notifier(owed, self.info.title)
        self.summary.notes.extend(report.notes)
        if not report.covered:
            return
        covered = set(report.covered)
        self.summary.alerts_sent = len(covered)
        self.summary.alerts_owed = len(owed) - len(covered)
        changes = mark_alerted(
            [i for i in owed if i.task_id in covered],
            settings=self.settings,
            now=self.clock.now(),
            run_id=self.run_id,
        )
        # Re-located by task_id right before the write and verified right after (§5); a
        # verifying read of the last results write, if it covers alerted_at, locates them.
        fresh = self.clock.monotonic() - self._snapshot_at <= FRESH_POSITIONS
        try:
            applied = self.store.apply(
                changes, baseline=(self._snapshot,) if fresh and self._snapshot else ()
            )
            for line in applied.repaired:
                self._note(f"the sheet changed during the alert-mark write: {line}")
        except StoreError as exc:
            self._note(f"alert sent but alerted_at not written ({exc}); it may be sent again")
