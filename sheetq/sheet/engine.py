"""``SheetQueue``: the queue port (``sheetq.port``) on the sheet engine.

A worksheet-shaped ``Store`` (Google through gspread, or the ``local:`` SQLite workbook)
under the sheet's rules: read columns, plan with the pure planners of this package, apply
one atomic change set, re-locate rows by ``task_id``. Each method delegates to the module
that owns the operation: ``enqueue``, ``runner.Runner``, ``operations``, ``archive``,
``log_archive``, ``alerts``, ``tally``, ``held``, ``doctor``.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from sheetq.connectors import Breaker, Change, pause, resume
from sheetq.errors import Interrupted, UsageError
from sheetq.model import CONNECTOR_COLUMNS, LOG_COLUMNS, QUEUE_COLUMNS, Row, Status, new_run_id
from sheetq.port import (
    AlertOutcome,
    ArchiveOutcome,
    ArchiveReport,
    ChangeReport,
    ConnectorView,
    LogArchiveReport,
    MirrorPass,
    NotBefore,
    QueuePort,
    Say,
    Send,
    ShowReport,
    StatusReport,
    TaskState,
    Worker,
)
from sheetq.sheet import LOCAL_PREFIX, open_store
from sheetq.sheet.connectors import CONNECTORS_SHEET, Seen, initial_rows
from sheetq.sheet.plan import SCAN_COLUMNS, QueueRow, parse_rows
from sheetq.sheet.schema import check_schema
from sheetq.sheet.store import ChangeSet, Gridded, Read, Snapshot, Store, UpdateRow, WorkbookInfo
from sheetq.summary import stopped
from sheetq.times import zone

# Connectors on a sheet persist in a `Connectors` worksheet (docs/design.md §13), made by
# `init` when the configuration has a [connectors.NAME] table.
_SHEET_CONNECTORS = (
    "this workbook has no Connectors worksheet: add a [connectors.NAME] table to "
    "sheetq.toml and run `sheetq init`"
)

if TYPE_CHECKING:
    from sheetq.accept import Enqueued, NewTask
    from sheetq.checks import Check
    from sheetq.clock import Clock
    from sheetq.config import Settings
    from sheetq.migrate import Source, Written
    from sheetq.port import HeldGroup, Notifier
    from sheetq.stats import Stats
    from sheetq.summary import RunOptions, RunSummary

Plan = Callable[[list[QueueRow], "Settings", datetime], tuple[list[QueueRow], "ChangeSet"]]


class SheetQueue:
    """The queue in a spreadsheet or a ``local:`` workbook. The store is opened on first
    use (``create``: a local workbook may be made; ``time_limit``: see
    ``sheetq.backends.open_queue``)."""

    positions = True  # a row is a sheet row a person can go to

    def __init__(
        self,
        settings: Settings,
        *,
        create: bool = False,
        time_limit: float | None = None,
        time_limit_name: str = "",
    ) -> None:
        self.settings = settings
        self._create = create
        self._time_limit = time_limit
        self._time_limit_name = time_limit_name
        self._store: Store | None = None

    @property
    def where(self) -> str:
        target = self.settings.spreadsheet
        if target.startswith(LOCAL_PREFIX):
            return f"local workbook {target[len(LOCAL_PREFIX) :].strip()}"
        return f"Google spreadsheet {target}"

    @property
    def store(self) -> Store:
        """The store, opened on first use."""
        if self._store is None:
            self._store = open_store(
                self.settings,
                create=self._create,
                time_limit=self._time_limit,
                time_limit_name=self._time_limit_name,
            )
        return self._store

    def close(self) -> None:
        if self._store is not None:
            self._store.close()
            self._store = None

    def _checked(self, *, archive: bool = False) -> WorkbookInfo:
        """The workbook, its schema checked (exit 2 naming what ``init`` fixes)."""
        info = self.store.open()
        check_schema(info, self.settings, archive=archive)
        return info

    # --- setting up ----------------------------------------------------------------------

    def init(self, *, fmt: bool, dashboard: bool, clock: Clock, say: Say) -> None:
        """Create or adopt the four worksheets, fit grids, adopt old rows, format, and build
        the dashboard when asked (``sheetq init``)."""
        from sheetq.sheet.adopt import adopt_rows

        settings = self.settings
        store = self.store
        titles = {
            settings.queue_sheet: QUEUE_COLUMNS,
            settings.log_sheet: LOG_COLUMNS,
            settings.archive_sheet: QUEUE_COLUMNS,
            settings.log_archive_sheet: LOG_COLUMNS,
        }
        if settings.connectors_sheet:  # docs/design.md §13: shared state across runs
            titles[CONNECTORS_SHEET] = CONNECTOR_COLUMNS
        added = store.ensure_worksheets(titles)
        for title, columns in added.items():
            say(f"{title}: added column(s) {', '.join(columns)}")
        info = store.open()
        if CONNECTORS_SHEET in titles:
            (rows,) = store.read([Read(CONNECTORS_SHEET, ("name",))])
            present = [r.text("name").strip() for r in rows.rows]
            fresh = initial_rows(settings, present, clock.now())
            if fresh:
                store.apply(ChangeSet(appends=fresh))
                added_names = ", ".join(str(r.values["name"]) for r in fresh)
                say(f"{CONNECTORS_SHEET}: added connector(s) {added_names}")
        for title in (settings.queue_sheet, settings.log_sheet, settings.archive_sheet):
            info.sheet(title).columns(titles[title])
        for line in store.fit_grids(list(titles)):
            say(line)
        report = adopt_rows(store, info, settings, now=clock.now())
        for line in report:
            say(line)
        if fmt:
            for line in store.format_worksheets(
                settings.queue_sheet, settings.log_sheet, settings.archive_sheet
            ):
                say(line)
        names = list(titles)
        if dashboard:
            from sheetq.sheet.dashboard import build_dashboard, dashboard_title

            for line in build_dashboard(store, settings):
                say(line)
            names.append(dashboard_title(settings))
        # one closing line, the same on a first and a later run: every worksheet prepared
        say(f"{info.title}: {', '.join(names[:-1])} and {names[-1]} are ready")

    def _connector_rows(self, clock: Clock) -> tuple[WorkbookInfo, dict[str, Seen], datetime]:
        """The Connectors rows, persons' edits recognised, as of ``clock``'s now."""
        from sheetq.sheet.connectors import parse

        info = self._checked()
        if CONNECTORS_SHEET not in info.sheets:
            raise UsageError(_SHEET_CONNECTORS)
        (snap,) = self.store.read([Read(CONNECTORS_SHEET, CONNECTOR_COLUMNS)])
        now = clock.now()
        return info, parse(snap.rows, now, zone(info.time_zone), info.locale), now

    def connectors(self, *, clock: Clock) -> list[ConnectorView]:
        """Every configured connector from the Connectors worksheet, with its types' tasks
        running and waiting counted in the Queue (``sheetq.sheet.connectors.counted``, as
        ``status`` counts them), read in the same request."""
        from sheetq.sheet.connectors import counted, parse, view

        info = self._checked()
        if CONNECTORS_SHEET not in info.sheets:
            raise UsageError(_SHEET_CONNECTORS)
        settings = self.settings
        rows, queue = self.store.read(
            [
                Read(CONNECTORS_SHEET, CONNECTOR_COLUMNS),
                Read(settings.queue_sheet, ("task_id", "type", "status", "next_retry_at")),
            ]
        )
        now = clock.now()
        tz = zone(info.time_zone)
        seen = parse(rows.rows, now, tz, info.locale)
        tasks = parse_rows(queue.rows, tz, info.locale)
        return [
            counted(view(config, seen.get(name), now), tasks, now)
            for name, config in sorted(settings.connectors.items())
        ]

    def _connector_change(
        self,
        name: str,
        clock: Clock,
        change: Callable[[Breaker, datetime], tuple[Breaker, Change]],
    ) -> ConnectorView:
        """A person's pause or resume: the row and its QueueLog row in one atomic write."""
        from sheetq.sheet.connectors import Seen, view, writes

        config = self.settings.known_connector(name)
        info, seen, now = self._connector_rows(clock)
        item = seen.get(name)
        breaker, done = change(item.breaker if item else Breaker(), now)
        run_id = new_run_id("connector")
        lacking = info.sheet(CONNECTORS_SHEET).missing(CONNECTOR_COLUMNS)
        self.store.apply(
            writes(
                self.settings,
                seen,
                {name: breaker},
                [(name, done)],
                now=now,
                run_id=run_id,
                lacking=lacking,
            )
        )
        return view(config, Seen(item.row if item else 0, breaker, breaker), now)

    def connector_pause(
        self, name: str, *, seconds: float | None, reason: str, clock: Clock
    ) -> ConnectorView:
        return self._connector_change(name, clock, lambda b, now: pause(b, now, seconds, reason))

    def connector_resume(self, name: str, *, reason: str, clock: Clock) -> ConnectorView:
        return self._connector_change(name, clock, lambda b, now: resume(b, reason))

    def checks(self) -> list[Check]:
        """``sheetq doctor``'s lines for the workbook (``sheetq.sheet.doctor``)."""
        from sheetq.sheet.doctor import check_sheet

        return check_sheet(self.settings)

    # --- tasks in and out ----------------------------------------------------------------

    def enqueue(
        self, tasks: Sequence[NewTask], *, clock: Clock, not_before: NotBefore
    ) -> list[Enqueued]:
        """One read of the keys, then one atomic write (more above Google's request cap)."""
        from sheetq.sheet.enqueue import enqueue, open_for_enqueue

        info, keys = open_for_enqueue(self.store, self.settings)  # one request, init's layout
        check_schema(info, self.settings, archive=True)
        moment = not_before(info.time_zone)
        for task in tasks:
            task.not_before = moment
        return enqueue(
            self.store, info, self.settings, list(tasks), now=clock.now(), snapshots=keys
        )

    def run(
        self,
        options: RunOptions,
        *,
        clock: Clock,
        rng: random.Random,
        notifier: Notifier | None,
        on_progress: Callable[[str], None] | None,
    ) -> RunSummary:
        """``sheetq.sheet.runner.Runner``: pipelined batches under the run lease."""
        from sheetq.sheet.runner import Runner

        runner = Runner(
            self.store,
            self.settings,
            clock=clock,
            rng=rng,
            notifier=notifier,
            on_progress=on_progress,
        )
        began = clock.monotonic()
        try:
            return runner.run(options)
        except (KeyboardInterrupt, Interrupted) as exc:
            raise stopped(exc, runner.summary, clock.monotonic() - began) from None

    def worker(
        self,
        *,
        concurrency: int,
        types: tuple[str, ...],
        poll: float,
        clock: Clock,
        rng: random.Random,
        notifier: Notifier | None,
        mirror: MirrorPass | None = None,
    ) -> Worker:
        raise UsageError(
            "sheetq worker needs PostgreSQL: set SHEETQ_DATABASE_URL (or --database-url); "
            "on a spreadsheet, run `sheetq process` from cron instead"
        )

    # --- a person's commands -------------------------------------------------------------

    def requeue(
        self,
        *,
        task_ids: Sequence[str],
        statuses: Sequence[Status],
        types: Sequence[str],
        error_classes: Sequence[str],
        reset_attempts: bool,
        dry_run: bool,
        clock: Clock,
        priority: int | None = None,
    ) -> ChangeReport:
        """``plan_requeue`` over the Queue, applied to the rows as read."""
        from sheetq.sheet.operations import plan_requeue

        def plan(rows: list[QueueRow], settings: Settings, now: datetime) -> Any:
            return plan_requeue(
                rows,
                settings=settings,
                now=now,
                task_ids=task_ids,
                statuses=list(statuses),
                types=types,
                error_classes=error_classes,
                reset_attempts=reset_attempts,
                run_id=new_run_id("requeue"),
                priority=priority,
            )

        return self._change(plan, task_ids=task_ids, dry_run=dry_run, clock=clock)

    def skip(
        self, *, task_ids: Sequence[str], reason: str, dry_run: bool, clock: Clock
    ) -> ChangeReport:
        """``plan_skip`` for the named tasks, applied like ``requeue``."""
        from sheetq.sheet.operations import plan_skip

        def plan(rows: list[QueueRow], settings: Settings, now: datetime) -> Any:
            return plan_skip(
                rows,
                settings=settings,
                now=now,
                task_ids=task_ids,
                reason=reason,
                run_id=new_run_id("skip"),
            )

        return self._change(plan, task_ids=task_ids, dry_run=dry_run, clock=clock)

    def _change(
        self, plan: Plan, *, task_ids: Sequence[str], dry_run: bool, clock: Clock
    ) -> ChangeReport:
        """Plan over the Queue's rows and apply the change to the rows as read."""
        info = self._checked()
        (snap,) = self.store.read([Read(self.settings.queue_sheet, SCAN_COLUMNS)])
        rows = parse_rows(snap.rows, zone(info.time_zone), info.locale)
        picked, changes = plan(rows, self.settings, clock.now())
        unknown = sorted(set(task_ids) - {r.task_id for r in rows})
        refused = sorted(set(task_ids) - set(unknown) - {r.task_id for r in picked})
        if not dry_run and changes:
            result = self.store.apply(changes)
            gone = set(result.missing)
            picked = [r for r in picked if r.task_id not in gone]
        named = set(task_ids)
        return ChangeReport(
            [task_state(r) for r in picked],
            unknown,
            refused,
            {r.task_id: task_state(r) for r in rows if r.task_id in named},
        )

    def archive(
        self,
        *,
        clock: Clock,
        older_than: float | None,
        log_older_than: float | None,
        include_failed: bool,
        dry_run: bool,
        lock_wait: float,
        on_wait: Callable[[str], None] | None = None,
    ) -> ArchiveOutcome:
        """``run_archive`` then ``run_log_archive``; exclusive with ``process`` on this host
        (a run holds rows by number between reads): waits up to ``lock_wait`` seconds for
        its host lock."""

        def run() -> ArchiveOutcome:  # the time once the queue is free: after any wait
            now = clock.now()
            return self._archive(now, older_than, log_older_than, include_failed, dry_run)

        if dry_run:
            return run()
        from filelock import Timeout

        from sheetq.sheet.runner import host_lock as host_lock_for

        host_lock = host_lock_for(self.settings, timeout=lock_wait)
        try:
            try:
                host_lock.acquire(timeout=0)
            except Timeout:
                if on_wait is not None:
                    on_wait(
                        f"a sheetq process run on this host holds this queue "
                        f"({host_lock.lock_file}); waiting up to {lock_wait:g}s for it to finish"
                    )
                host_lock.acquire()
        except Timeout:
            return ArchiveOutcome(None, held_by=str(host_lock.lock_file))
        try:
            return run()
        finally:
            host_lock.release()

    def _archive(
        self,
        now: datetime,
        older_than: float | None,
        log_older_than: float | None,
        include_failed: bool,
        dry_run: bool,
    ) -> ArchiveOutcome:
        from sheetq.sheet.archive import run_archive
        from sheetq.sheet.log_archive import run_log_archive
        from sheetq.sheet.runner import lease_name

        logs: list[LogArchiveReport] = []
        info = self._checked(archive=older_than is not None)  # after the host lock: lease now
        report = ArchiveReport(dry_run, now)
        if older_than is not None:
            report = run_archive(
                self.store,
                info,
                self.settings,
                now=now,
                older_than=older_than,
                include_failed=include_failed,
                dry_run=dry_run,
                run_id=new_run_id("archive"),
                lease_name=lease_name(self.settings.queue_sheet),
            )
        if log_older_than is not None and not report.locked:
            logs.append(
                run_log_archive(
                    self.store,
                    info,
                    self.settings,
                    now=now,
                    older_than=log_older_than,
                    dry_run=dry_run,
                )
            )
        return ArchiveOutcome(report, logs)

    def send_alerts(
        self, send: Send, *, clock: Clock, text: Callable[[str], bool] | None = None
    ) -> AlertOutcome:
        """Owed alerts as one message, then ``alerted_at`` on the rows it covered: open 1 +
        scan 1 + mark 1 request. While a ``process`` run on this host holds the queue, it
        sends them itself; this only says so."""
        from filelock import Timeout

        from sheetq.sheet.runner import host_lock as host_lock_for

        host_lock = host_lock_for(self.settings)
        try:
            host_lock.acquire()
        except Timeout:
            return AlertOutcome(
                None,
                locked="a sheetq process run on this host holds this queue; it sends the owed "
                "alerts when it finishes",
            )
        try:
            outcome = self._send_alerts(send, clock)
            if text is not None:
                self._send_connector_alerts(text, clock, outcome)
            return outcome
        finally:
            host_lock.release()

    def _send_alerts(self, send: Send, clock: Clock) -> AlertOutcome:
        from sheetq.errors import StoreError
        from sheetq.sheet.alerts import FRESH_POSITIONS, mark_alerted, owed

        store, settings = self.store, self.settings
        info = self._checked()
        (snap,) = store.read([Read(settings.queue_sheet, SCAN_COLUMNS)])
        scanned_at = clock.monotonic()
        rows = parse_rows(snap.rows, zone(info.time_zone), info.locale)
        items = owed(
            rows, link=lambda row, task_id: store.link(info, settings.queue_sheet, row, task_id)
        )
        outcome = AlertOutcome(len(items), requests=store.requests_made)
        if not items:
            return outcome
        outcome.report, outcome.delivery = send(items, info.title)
        covered = set(outcome.report.covered)
        if not outcome.delivery.sent or not covered:
            outcome.requests = store.requests_made
            return outcome
        changes = mark_alerted(
            [i for i in items if i.task_id in covered],
            settings=settings,
            now=clock.now(),
            run_id=new_run_id("alert"),
        )
        # Located with the scan if it was read moments ago, else afresh; verified after.
        fresh = clock.monotonic() - scanned_at <= FRESH_POSITIONS
        try:
            store.apply(changes, baseline=(snap,) if fresh else ())
            outcome.marked = True
        except StoreError as exc:
            outcome.mark_error = exc.message
        outcome.requests = store.requests_made
        return outcome

    def _send_connector_alerts(
        self, text: Callable[[str], bool], clock: Clock, outcome: AlertOutcome
    ) -> None:
        """The connectors' owed alerts (docs/design.md §13), each sent, then what was told
        written in their rows' ``alerted`` cells (one read, one write when any was sent). A
        row with a person's edit not yet taken is left to the next ``process`` run."""
        from sheetq.connectors import alert_text
        from sheetq.errors import StoreError
        from sheetq.sheet.connectors import ALERT_COLUMNS, owed_alerts, parse

        settings = self.settings
        if not settings.connectors_sheet:
            return
        info = self.store.open()
        if CONNECTORS_SHEET not in info.sheets:
            return
        if info.sheet(CONNECTORS_SHEET).missing(ALERT_COLUMNS):  # `sheetq doctor` names them
            return
        tz = zone(info.time_zone)
        now = clock.now()
        snap, conn = self.store.read(
            [Read(settings.queue_sheet, SCAN_COLUMNS), Read(CONNECTORS_SHEET, CONNECTOR_COLUMNS)]
        )
        seen = parse(conn.rows, now, tz, info.locale)
        rows = parse_rows(snap.rows, tz, info.locale)
        due = (Status.PENDING, Status.RETRY)

        def waiting(types: tuple[str, ...]) -> int:
            return sum(1 for r in rows if r.status in due and r.type in types)

        breakers = {
            n: s.breaker for n, s in seen.items() if n in settings.connectors and not s.edit
        }
        changes = ChangeSet()
        for alert in owed_alerts(settings, seen, breakers, waiting, now):
            if not text(alert_text(alert, info.title)):
                outcome.connector_unsent += 1
                continue
            outcome.connector_sent += 1
            name = alert["name"]
            changes.updates.append(
                UpdateRow(
                    CONNECTORS_SHEET, name, seen[name].row, {"alerted": alert["kind"]}, "name"
                )
            )
        if changes:
            try:
                self.store.apply(changes)
            except StoreError as exc:
                outcome.mark_error = outcome.mark_error or exc.message
        outcome.requests = self.store.requests_made

    # --- reads ---------------------------------------------------------------------------

    def status(self, *, clock: Clock) -> StatusReport:
        """The Queue's tally, the runs that are gone when something is processing, and how
        full a Google spreadsheet is."""
        from sheetq.sheet.cells import cell_usage
        from sheetq.sheet.plan import STATUS_COLUMNS
        from sheetq.sheet.tally import tally_rows

        settings = self.settings
        # Google: one spreadsheets.get (headers, and the columns where init puts them; one
        # read more when a person moved one), then every worksheet's grid (a get with ranges
        # answers only for the worksheets they touch): 2 requests, as before.
        # the Connectors rows ride in the same request (docs/design.md §13)
        reads = [Read(settings.queue_sheet, STATUS_COLUMNS)]
        if settings.connectors_sheet:
            reads.append(Read(CONNECTORS_SHEET, CONNECTOR_COLUMNS))
        info, (snap, *more) = self.store.open_with(
            reads,
            layout={settings.queue_sheet: QUEUE_COLUMNS, CONNECTORS_SHEET: CONNECTOR_COLUMNS},
        )
        check_schema(info, settings)
        now = clock.now()
        rows = parse_rows(snap.rows, zone(info.time_zone), info.locale)
        tallied = tally_rows(rows, settings, now)
        gone = self._gone(info, tallied.processing, now) if tallied.processing else []
        grids = self.store.grid_sizes() if isinstance(self.store, Gridded) else {}
        cells = cell_usage(grids, settings.queue_sheet, settings.log_sheet, tallied.created, now)
        notable = []
        notes: list[str] = []
        if more and more[0].rows:
            from sheetq.sheet.connectors import counted, parse, view

            seen = parse(more[0].rows, now, zone(info.time_zone), info.locale)
            views = [
                counted(view(c, seen.get(n), now), rows, now)
                for n, c in sorted(settings.connectors.items())
            ]
            notable = [v for v in views if v.notable]
            notes = [n for name, item in sorted(seen.items()) if (n := item.typo_note(name))]
        return StatusReport(
            info.title,
            info.time_zone,
            tallied.tally,
            gone,
            now,
            cells,
            connectors=notable,
            notes=notes,
        )

    def _gone(self, info: WorkbookInfo, rows: Sequence[QueueRow], now: datetime) -> list[HeldGroup]:
        """Processing rows whose run is gone, by run (``sheetq.sheet.held``): the run lease
        has ended, or this host's journal names a run that is not running."""
        from sheetq.sheet.held import held_by_gone_runs
        from sheetq.sheet.journal import Journal, host_lock_held, journal_path
        from sheetq.sheet.runner import lease_expiry, lease_name, lock_path

        token = info.leases.get(lease_name(self.settings.queue_sheet))
        killed: list[str] = []
        lock = lock_path(self.settings)
        journal = Journal(journal_path(lock))
        if journal.path.exists():
            state = journal.load()
            if state and host_lock_held(lock) is False:  # its run is not running: killed here
                killed = list(state.runs)
        return held_by_gone_runs(
            rows,
            lease_expires=lease_expiry(token) if token else None,
            now=now,
            settings=self.settings,
            killed_here=killed,
        )

    def stats(self, *, since: datetime, now: datetime, types: Sequence[str]) -> Stats:
        """``sheetq.stats.compute`` over the rows it needs."""
        from sheetq.stats import ARCHIVE_COLUMNS, compute
        from sheetq.stats import LOG_COLUMNS as LOG_READ
        from sheetq.stats import QUEUE_COLUMNS as QUEUE_READ

        settings = self.settings
        info = self._checked()
        reads = [Read(settings.log_sheet, LOG_READ), Read(settings.queue_sheet, QUEUE_READ)]
        if settings.archive_sheet in info.sheets:
            reads.append(Read(settings.archive_sheet, ARCHIVE_COLUMNS))
        snaps = self.store.read(reads)
        return compute(
            snaps[0].rows,
            snaps[1].rows,
            snaps[2].rows if len(snaps) > 2 else (),
            since=since,
            now=now,
            types=types,
            tz=zone(info.time_zone),
            locale=info.locale,
        )

    def list_rows(self, *, statuses: set[Status], types: Sequence[str], limit: int) -> list[Row]:
        """Queue rows with a task id matching the filters, in sheet order, at most ``limit``."""
        self._checked()
        (snap,) = self.store.read([Read(self.settings.queue_sheet)])
        picked = [
            r
            for r in snap.rows
            if r.text("task_id")
            and (not statuses or Status.parse(r.text("status")) in statuses)
            and (not types or r.text("type") in types)
        ]
        return picked[:limit] if limit else picked

    def show(self, task_id: str) -> ShowReport:
        """The task's Queue and QueueArchive rows, and its history: its QueueLogArchive rows
        (the older ones, moved by ``archive --log-older-than``), then its QueueLog rows. One
        read of the worksheets there are."""
        settings = self.settings
        info = self._checked()
        titles = [settings.queue_sheet, settings.archive_sheet]
        titles = [t for t in titles if t == settings.queue_sheet or t in info.sheets]
        logs = [t for t in (settings.log_archive_sheet, settings.log_sheet) if t in info.sheets]
        snaps = self.store.read([Read(t) for t in titles + logs])
        mine = [
            (title, r)
            for title, snap in zip(titles + logs, snaps, strict=True)
            for r in snap.rows
            if r.text("task_id") == task_id
        ]
        found = [(title, r) for title, r in mine if title in titles]
        history = [r for title, r in mine if title in logs]
        archived = sum(1 for title, _ in mine if title == settings.log_archive_sheet)
        return ShowReport(found, history, archived)

    # --- moving a queue --------------------------------------------------------------------

    def export(self, *, clock: Clock) -> Source:
        """Queue, QueueLog, QueueArchive (and QueueLogArchive, if present) read whole and
        converted for PostgreSQL (``sheetq.migrate.prepare``); refuses (``UsageError``, exit
        2) while a ``process`` run holds the run lease or a row is ``processing`` under a
        lease that has not run out: copying then would copy a state about to change."""
        from sheetq.migrate import prepare

        settings = self.settings
        info = self._checked()
        present = [
            t for t in (settings.archive_sheet, settings.log_archive_sheet) if t in info.sheets
        ]
        if settings.archive_sheet in present:
            check_schema(info, settings, archive=True)
        titles = [settings.queue_sheet, settings.log_sheet, *present]
        snaps = {s.worksheet: s for s in self.store.read([Read(t) for t in titles])}
        tz = zone(info.time_zone)
        _check_quiet(info, snaps[settings.queue_sheet], settings, clock.now())

        def sheet(title: str) -> tuple[str, list[Row]] | None:
            return (title, snaps[title].rows) if title in snaps else None

        queue, log = sheet(settings.queue_sheet), sheet(settings.log_sheet)
        assert queue is not None and log is not None
        return prepare(
            queue=queue,
            log=log,
            archive=sheet(settings.archive_sheet),
            log_archive=sheet(settings.log_archive_sheet),
            tz=tz,
            locale=info.locale,
        )

    def absorb(self, source: Source, *, now: datetime, run_id: str) -> Written:
        raise UsageError("sheetq migrate copies a queue into PostgreSQL: give --to postgresql://…")


def _check_quiet(info: WorkbookInfo, queue: Snapshot, settings: Settings, now: datetime) -> None:
    """Refuse (``UsageError``, exit 2) while the queue is being processed: a run lease that
    has not expired, or rows ``processing`` under a ``lease_until`` still in the future."""
    from sheetq.sheet.runner import lease_expiry, lease_name
    from sheetq.times import format_ts, parse_ts

    token = info.leases.get(lease_name(settings.queue_sheet))
    until = lease_expiry(token) if token else None
    if until is not None and until > now:
        raise UsageError(
            f"a `sheetq process` run holds the queue's run lease until {format_ts(until)}; "
            "wait for it to finish (or stop it), then run `sheetq migrate` again"
        )
    tz = zone(info.time_zone)
    held: list[datetime] = []
    for raw in queue.rows:
        if Status.parse(raw.values.get("status")) is not Status.PROCESSING:
            continue
        lease = parse_ts(raw.values.get("lease_until"), tz, info.locale)
        if isinstance(lease, datetime) and lease > now:
            held.append(lease)
    if held:
        raise UsageError(
            f"{len(held)} task(s) are processing under a lease until {format_ts(max(held))}; "
            "wait for the run to finish (or stop it), then run `sheetq migrate` again"
        )


def task_state(row: QueueRow) -> TaskState:
    """A parsed Queue row as the port's ``TaskState``."""
    return TaskState(
        task_id=row.task_id,
        type=row.type,
        status=row.status,
        status_text=row.status_text,
        retry_count=row.retry_count,
        error_class=row.error_class,
        lease_owner=row.lease_owner,
        lease_until=row.raw.text("lease_until"),
    )


def _conforms(queue: SheetQueue) -> QueuePort:
    return queue  # mypy checks that SheetQueue implements the port
