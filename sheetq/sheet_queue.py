"""``SheetQueue``: the queue port (``sheetq.port``) on the sheet engine, DESIGN.md §10.

A worksheet-shaped ``Store`` (Google through gspread, or the ``local:`` SQLite workbook)
under today's semantics: read columns, plan with the shared pure planners, apply one atomic
change set, re-locate rows by ``task_id``. Each method delegates to the module that owns
the operation (``enqueue``, ``runner.Runner``, ``operations``, ``archive``,
``log_archive``, ``stats``, ``tally``, ``held``); the read helpers below are also
PostgreSQL's Python path (``SHEETQ_PG_REPORTS=python``), since ``PgStore`` is
worksheet-shaped too.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from sheetq.port import ArchiveOutcome, ChangeReport, ShowReport, StoreQueue

if TYPE_CHECKING:
    from sheetq.archive import ArchiveReport
    from sheetq.clock import Clock
    from sheetq.config import Settings
    from sheetq.enqueue import Enqueued, NewTask
    from sheetq.held import HeldGroup
    from sheetq.log_archive import LogArchiveReport
    from sheetq.model import Status
    from sheetq.port import NotBefore, Running
    from sheetq.queue import QueueRow
    from sheetq.stats import Stats
    from sheetq.store.base import Row, Store, WorkbookInfo
    from sheetq.tally import QueueTally

Plan = Callable[[list["QueueRow"], "Settings", datetime], tuple[list["QueueRow"], Any]]


class SheetQueue(StoreQueue):
    """The queue in a spreadsheet or a ``local:`` workbook. ``store`` makes the store on
    first use (see ``sheetq.port.open_queue``); requeue, skip and the reports' shape are
    ``StoreQueue``'s."""

    positions = True  # a row is a sheet row a person can go to

    @property
    def store(self) -> Store:
        """The store, opened on first use."""
        return self._open_store()

    def init(self, *, fmt: bool, dashboard: bool, clock: Clock, say: Callable[[str], None]) -> None:
        """Create or adopt the four worksheets, fit grids, adopt old rows, format, and build
        the dashboard when asked (``sheetq init``, DESIGN.md §2, §8)."""
        from sheetq.adopt import adopt_rows
        from sheetq.model import LOG_COLUMNS, QUEUE_COLUMNS

        settings = self.settings
        store = self.store
        added = store.ensure_worksheets(
            {
                settings.queue_sheet: QUEUE_COLUMNS,
                settings.log_sheet: LOG_COLUMNS,
                settings.archive_sheet: QUEUE_COLUMNS,
                settings.log_archive_sheet: LOG_COLUMNS,
            }
        )
        info = store.open()
        for title in (settings.queue_sheet, settings.log_sheet, settings.archive_sheet):
            info.sheet(title).columns(QUEUE_COLUMNS if title != settings.log_sheet else LOG_COLUMNS)
        for title, columns in added.items():
            say(f"{title}: added column(s) {', '.join(columns)}")
        for line in store.fit_grids(
            [
                settings.queue_sheet,
                settings.log_sheet,
                settings.archive_sheet,
                settings.log_archive_sheet,
            ]
        ):
            say(line)
        report = adopt_rows(store, info, settings, now=clock.now())
        for line in report:
            say(line)
        if fmt:
            for line in store.format_worksheets(
                settings.queue_sheet, settings.log_sheet, settings.archive_sheet
            ):
                say(line)
        if dashboard:
            from sheetq.dashboard import build_dashboard

            for line in build_dashboard(store, settings):
                say(line)
        if not added and not report:
            say(
                f"{info.title}: {settings.queue_sheet}, {settings.log_sheet} and "
                f"{settings.archive_sheet} are ready"
            )
        else:
            say(f"{info.title}: ready")

    def _enqueue(self, tasks: list[NewTask], clock: Clock, when: NotBefore) -> list[Enqueued]:
        """One read of the keys, then one atomic write (DESIGN.md §4)."""
        from sheetq.enqueue import enqueue as enqueue_tasks
        from sheetq.enqueue import open_for_enqueue
        from sheetq.schema import check_schema

        # one request on an init-made sheet
        info, keys = open_for_enqueue(self.store, self.settings)
        check_schema(info, self.settings, archive=True)
        moment = when(info.time_zone)
        for task in tasks:
            task.not_before = moment
        return enqueue_tasks(
            self.store, info, self.settings, tasks, now=clock.now(), snapshots=keys
        )

    def _runner_type(self) -> Callable[..., Running]:
        """``sheetq.runner.Runner``: pipelined batches under the run lease (DESIGN.md §5, §6)."""
        from sheetq.runner import Runner

        return Runner

    def _exclusive(self, run: Callable[[], ArchiveOutcome], lock_wait: float) -> ArchiveOutcome:
        """Archive is exclusive with ``process`` on this host (a run holds rows by number
        between reads): waits up to ``lock_wait`` seconds for its host lock."""
        from filelock import Timeout

        from sheetq.runner import host_lock as host_lock_for

        host_lock = host_lock_for(self.settings, timeout=lock_wait)
        try:
            host_lock.acquire()
        except Timeout:
            return ArchiveOutcome(None, held_by=str(host_lock.lock_file))
        try:
            return run()
        finally:
            host_lock.release()

    def _gone(self, info: WorkbookInfo, tally: QueueTally, now: datetime) -> list[HeldGroup]:
        """Gone runs from the run lease and this host's journal (``sheetq.held``)."""
        return _gone_runs(self.settings, info, tally.processing, now)


# --- shared with PostgreSQL's Python path --------------------------------------------------


def check(info: WorkbookInfo, settings: Settings) -> None:
    """``check_schema`` (exit 2 naming what ``sheetq init`` would fix)."""
    from sheetq.schema import check_schema

    check_schema(info, settings)


def read_tally(store: Store, settings: Settings, info: WorkbookInfo, now: datetime) -> QueueTally:
    """The Queue's status columns, tallied (``sheetq.tally.tally_rows``)."""
    from sheetq.queue import STATUS_COLUMNS, parse_rows
    from sheetq.store.base import Read
    from sheetq.tally import tally_rows
    from sheetq.times import zone

    (snap,) = store.read([Read(settings.queue_sheet, STATUS_COLUMNS)])
    rows = parse_rows(snap.rows, zone(info.time_zone), info.locale)
    return tally_rows(rows, settings, now)


def read_list(
    store: Store, settings: Settings, statuses: set[Status], types: Sequence[str], limit: int
) -> list[Row]:
    """Queue rows with a task id matching the filters, in sheet order, at most ``limit``."""
    from sheetq.model import Status
    from sheetq.store.base import Read

    (snap,) = store.read([Read(settings.queue_sheet)])
    picked = [
        r
        for r in snap.rows
        if r.text("task_id")
        and (not statuses or Status.parse(r.text("status")) in statuses)
        and (not types or r.text("type") in types)
    ]
    if limit:
        picked = picked[:limit]
    return picked


def read_show(store: Store, settings: Settings, info: WorkbookInfo, task_id: str) -> ShowReport:
    """The task's Queue and QueueArchive rows, and its history: its QueueLogArchive rows
    (the older ones, moved by ``archive --log-older-than``), then its QueueLog rows. One
    read of the worksheets there are."""
    from sheetq.store.base import Read

    titles = [settings.queue_sheet, settings.archive_sheet]
    titles = [t for t in titles if t == settings.queue_sheet or t in info.sheets]
    logs = [t for t in (settings.log_archive_sheet, settings.log_sheet) if t in info.sheets]
    snaps = store.read([Read(t) for t in titles + logs])
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


def read_stats(
    store: Store,
    settings: Settings,
    info: WorkbookInfo,
    *,
    since: datetime,
    now: datetime,
    types: Sequence[str],
) -> Stats:
    """``sheetq.stats.compute`` over the rows it needs."""
    from sheetq.stats import ARCHIVE_COLUMNS, LOG_COLUMNS, QUEUE_COLUMNS, compute
    from sheetq.store.base import Read
    from sheetq.times import zone

    reads = [Read(settings.log_sheet, LOG_COLUMNS), Read(settings.queue_sheet, QUEUE_COLUMNS)]
    if settings.archive_sheet in info.sheets:
        reads.append(Read(settings.archive_sheet, ARCHIVE_COLUMNS))
    snaps = store.read(reads)
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


def requeue_plan(
    task_ids: Sequence[str],
    statuses: Sequence[Status],
    types: Sequence[str],
    error_classes: Sequence[str],
    reset_attempts: bool,
) -> Plan:
    """``plan_requeue`` with the command's filters and a fresh run id."""
    from sheetq.model import new_run_id
    from sheetq.operations import plan_requeue

    return lambda rows, settings, now: plan_requeue(
        rows,
        settings=settings,
        now=now,
        task_ids=task_ids,
        statuses=list(statuses),
        types=types,
        error_classes=error_classes,
        reset_attempts=reset_attempts,
        run_id=new_run_id("requeue"),
    )


def skip_plan(task_ids: Sequence[str], reason: str) -> Plan:
    """``plan_skip`` for the named tasks and a fresh run id."""
    from sheetq.model import new_run_id
    from sheetq.operations import plan_skip

    return lambda rows, settings, now: plan_skip(
        rows,
        settings=settings,
        now=now,
        task_ids=task_ids,
        reason=reason,
        run_id=new_run_id("skip"),
    )


def change_rows(
    store: Store,
    settings: Settings,
    plan: Plan,
    *,
    task_ids: Sequence[str],
    dry_run: bool,
    clock: Clock,
) -> ChangeReport:
    """Plan over the Queue's rows and apply the change to the rows as read (on PostgreSQL:
    only rows still as read; the others are dropped from what was changed)."""
    from sheetq.queue import SCAN_COLUMNS, parse_rows
    from sheetq.schema import check_schema
    from sheetq.store.base import Read, apply_as_read
    from sheetq.times import zone

    info = store.open()
    check_schema(info, settings)
    (snap,) = store.read([Read(settings.queue_sheet, SCAN_COLUMNS)])
    rows = parse_rows(snap.rows, zone(info.time_zone), info.locale)
    picked, changes = plan(rows, settings, clock.now())
    unknown = sorted(set(task_ids) - {r.task_id for r in rows})
    refused = sorted(set(task_ids) - set(unknown) - {r.task_id for r in picked})
    if not dry_run and changes:
        result = apply_as_read(store, changes, (snap,))  # PostgreSQL: rows still as read
        gone = set(result.missing)
        picked = [r for r in picked if r.task_id not in gone]
    return ChangeReport(picked, unknown, refused, {r.task_id: r for r in rows})


def archive_rows(
    store: Store,
    settings: Settings,
    *,
    now: datetime,
    older_than: float | None,
    log_older_than: float | None,
    include_failed: bool,
    dry_run: bool,
    max_bytes: int | None,
) -> ArchiveOutcome:
    """``run_archive`` then (unless a run's lease stopped it) ``run_log_archive``."""
    from sheetq.archive import ArchiveReport as _Report
    from sheetq.archive import run_archive
    from sheetq.log_archive import run_log_archive
    from sheetq.model import new_run_id
    from sheetq.runner import lease_name
    from sheetq.schema import check_schema

    logs: list[LogArchiveReport] = []
    info = store.open()  # after the host lock: the lease seen is the current one
    check_schema(info, settings, archive=older_than is not None)
    report: ArchiveReport
    if older_than is None:
        report = _Report(dry_run, now)
    else:
        report = run_archive(
            store,
            info,
            settings,
            now=now,
            older_than=older_than,
            include_failed=include_failed,
            dry_run=dry_run,
            run_id=new_run_id("archive"),
            lease_name=lease_name(settings.queue_sheet),
            max_bytes=max_bytes,
        )
    if log_older_than is not None and not report.locked:
        logs.append(
            run_log_archive(
                store, info, settings, now=now, older_than=log_older_than, dry_run=dry_run
            )
        )
    return ArchiveOutcome(report, logs)


def _gone_runs(settings: Settings, info: WorkbookInfo, rows: Any, now: datetime) -> list[HeldGroup]:
    """Processing rows whose run is gone, by run (see ``sheetq.held``): the run lease has
    ended, or the journal of this host names a run that is not running."""
    from sheetq.held import held_by_gone_runs
    from sheetq.journal import Journal, host_lock_held, journal_path
    from sheetq.runner import lease_expiry, lease_name, lock_path

    token = info.leases.get(lease_name(settings.queue_sheet))
    killed: list[str] = []
    lock = lock_path(settings)
    journal = Journal(journal_path(lock))
    if journal.path.exists():
        state = journal.load()
        if state and host_lock_held(lock) is False:  # its run is not running: killed here
            killed = list(state.runs)
    return held_by_gone_runs(
        rows,
        lease_expires=lease_expiry(token) if token else None,
        now=now,
        settings=settings,
        killed_here=killed,
    )
