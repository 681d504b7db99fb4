"""The queue port (DESIGN.md §10): what the commands ask of a queue, wherever it is stored.

``open_queue(settings)`` is the one place that knows which backend a queue is in: the sheet
engine (``sheetq.sheet_queue.SheetQueue``, a Google spreadsheet or a ``local:`` workbook)
or PostgreSQL (``sheetq.postgres.port.PgQueue``, imported only when
``settings.database_url`` is set, so the CLI starts without psycopg or gspread).

The commands validate their arguments, call one port method, and print what it returns;
the policy both backends share (keys, the retry decision, ``on_unknown``, max age, the
planners of ``sheetq.queue``/``operations``/``archive``) stays in pure modules that never
import gspread, sqlite3 or psycopg.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    import random

    from sheetq.alerts.owed import Notifier
    from sheetq.archive import ArchiveReport
    from sheetq.clock import Clock
    from sheetq.config import Settings
    from sheetq.enqueue import Enqueued, NewTask
    from sheetq.held import HeldGroup
    from sheetq.log_archive import LogArchiveReport
    from sheetq.model import Status
    from sheetq.queue import QueueRow
    from sheetq.stats import Stats
    from sheetq.store.base import Row, Store, WorkbookInfo
    from sheetq.summary import RunOptions, RunSummary
    from sheetq.tally import QueueTally


@dataclass
class StatusReport:
    """What ``sheetq status`` prints: the tally of the Queue, the rows held by runs that are
    gone (only looked for when something is processing), and the workbook it came from
    (title, time zone, cell usage), as of ``now``."""

    info: WorkbookInfo
    tally: QueueTally
    gone: list[HeldGroup]
    now: datetime


@dataclass
class ShowReport:
    """What ``sheetq show`` prints: the task's rows as (worksheet, row) (Queue first, then
    QueueArchive) and its history, oldest first: the first ``log_archived`` rows from
    QueueLogArchive (moved there by ``archive --log-older-than``), the rest from QueueLog."""

    found: list[tuple[str, Row]]
    history: list[Row]
    log_archived: int = 0


@dataclass
class ChangeReport:
    """What ``requeue``/``skip`` did (or, dry run, would do): the rows changed, the named
    task ids not in the Queue, the named ones left alone, and every Queue row by id (to say
    why a named one was refused)."""

    picked: list[QueueRow]
    unknown: list[str]
    refused: list[str]
    by_id: dict[str, QueueRow]


@dataclass
class ArchiveOutcome:
    """What ``sheetq archive`` did: the Queue rows' report (``None`` when a ``process`` run
    on this host held the queue past the wait: ``held_by`` names its lock file), and the
    QueueLog report when ``--log-older-than`` was given."""

    report: ArchiveReport | None
    logs: list[LogArchiveReport] = field(default_factory=list)
    held_by: str | None = None


@runtime_checkable
class QueuePort(Protocol):
    """One queue, shaped like what a queue does, not where it is stored (DESIGN.md §10):
    enqueue a batch, run (claim up to N due tasks under a lease, execute, settle fenced by
    the lease, recover expired leases), requeue / skip / archive by filter, and the reads
    behind ``status``, ``list``, ``show`` and ``stats``.

    Claim and settle live inside ``run``, differently per backend:

    - sheet engine (``SheetQueue``, ``sheetq.runner.Runner``): pipelined batches: one
      read-then-write claims a batch under the queue's run lease; a batch's results ride in
      the next claim's write (DESIGN.md §6), the last batch's in a final write; expired
      leases are recovered in the claim.
    - PostgreSQL (``PgQueue``, ``sheetq.postgres.runner.PgRunner``): each claim takes at
      most the run's free slots ``FOR UPDATE SKIP LOCKED``, and each task's outcome is
      settled in its own transaction fenced by its lease (a row no longer processing under
      that lease is not touched) (DESIGN.md §11).

    Errors are the CLI's (``sheetq.errors``): ``SchemaError`` exit 2 when ``init`` has not
    prepared the store, ``StoreUnavailable`` exit 1, ``UsageError`` exit 2.
    """

    settings: Settings
    positions: bool  # rows have sheet positions (``row`` in reports; ``null`` on PostgreSQL)

    def init(self, *, fmt: bool, dashboard: bool, clock: Clock, say: Callable[[str], None]) -> None:
        """Create or upgrade the queue's storage; each line of what was done goes to ``say``."""
        ...

    def enqueue(
        self,
        tasks: Sequence[NewTask],
        *,
        clock: Clock,
        not_before: Callable[[str], datetime | None],
    ) -> list[Enqueued]:
        """Add the tasks once, atomically: enqueued / duplicate / conflict per task.
        ``not_before(time_zone)`` gives their not-before time (``--delay``/``--at``; an
        ``--at`` without offset is in the store's zone)."""
        ...

    def run(
        self,
        options: RunOptions,
        *,
        clock: Clock,
        rng: random.Random,
        notifier: Notifier | None,
        on_progress: Callable[[str], None] | None,
    ) -> RunSummary:
        """One ``sheetq process`` run: claim, execute, settle, alert (see the class doc)."""
        ...

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
    ) -> ChangeReport:
        """Send matching rows back to pending, each logged ``requeued``."""
        ...

    def skip(
        self, *, task_ids: Sequence[str], reason: str, dry_run: bool, clock: Clock
    ) -> ChangeReport:
        """Mark the named tasks skipped, each logged with ``reason``."""
        ...

    def archive(
        self,
        *,
        now: datetime,
        older_than: float | None,
        log_older_than: float | None,
        include_failed: bool,
        dry_run: bool,
        lock_wait: float,
    ) -> ArchiveOutcome:
        """Move finished rows older than ``older_than`` seconds (and QueueLog rows older
        than ``log_older_than``) to the archive; waits up to ``lock_wait`` seconds for a
        run that holds the queue where runs exclude archiving."""
        ...

    def status(self, *, clock: Clock) -> StatusReport:
        """Counts, ages and gone runs for ``sheetq status``."""
        ...

    def stats(self, *, since: datetime, now: datetime, types: Sequence[str]) -> Stats:
        """QueueLog numbers over ``[since, now]`` for ``sheetq stats``."""
        ...

    def list_rows(self, *, statuses: set[Status], types: Sequence[str], limit: int) -> list[Row]:
        """Queue rows with these statuses and types (empty: any), in queue order; at most
        ``limit`` (0: all)."""
        ...

    def show(self, task_id: str) -> ShowReport:
        """One task's rows and history."""
        ...


NotBefore = Callable[[str], "datetime | None"]  # not-before time from the store's time zone


class Running(Protocol):
    """What ``StoreQueue.run`` makes and runs: ``sheetq.runner.Runner`` or
    ``sheetq.postgres.runner.PgRunner``."""

    def run(self, options: RunOptions) -> RunSummary: ...


class StoreQueue:
    """What ``SheetQueue`` and ``PgQueue`` share: both keep a worksheet-shaped ``Store``
    (made on first use by ``store()``), run through a runner, requeue / skip with the shared
    planners applied to the rows as read, and shape the reports the same way: check the
    schema, then read. The reads are the sheet engine's Python path
    (``sheetq.sheet_queue``); a subclass overrides the ``_tally``, ``_gone``, ``_stats``,
    ``_list`` and ``_show`` hooks (PostgreSQL computes them in SQL) and ``_runner``."""

    positions = True

    def __init__(self, settings: Settings, store: Callable[[], Store]) -> None:
        self.settings = settings
        self._factory = store
        self._opened: Store | None = None

    def _open_store(self) -> Store:
        """The store, opened on first use."""
        if self._opened is None:
            self._opened = self._factory()
        return self._opened

    archive_max_bytes: int | None = None  # ``run_archive``'s cap per write (None: Google's)

    def enqueue(
        self,
        tasks: Sequence[NewTask],
        *,
        clock: Clock,
        not_before: Callable[[str], datetime | None],
    ) -> list[Enqueued]:
        """Add the tasks once, atomically (``_enqueue``); see ``QueuePort``."""
        return self._enqueue(list(tasks), clock, not_before)

    def _enqueue(self, tasks: list[NewTask], clock: Clock, when: NotBefore) -> list[Enqueued]:
        """The backend's enqueue; ``when(time_zone)`` gives the tasks' not-before time."""
        raise NotImplementedError

    def _runner_type(self) -> Callable[..., Running]:
        """The backend's runner class, made as ``(store, settings, clock=, rng=, notifier=,
        on_progress=)``."""
        raise NotImplementedError

    def run(
        self,
        options: RunOptions,
        *,
        clock: Clock,
        rng: random.Random,
        notifier: Notifier | None,
        on_progress: Callable[[str], None] | None,
    ) -> RunSummary:
        """One run of the backend's runner (``_runner_type``); see ``QueuePort``."""
        make = self._runner_type()
        runner = make(
            self._open_store(),
            self.settings,
            clock=clock,
            rng=rng,
            notifier=notifier,
            on_progress=on_progress,
        )
        return runner.run(options)

    def archive(
        self,
        *,
        now: datetime,
        older_than: float | None,
        log_older_than: float | None,
        include_failed: bool,
        dry_run: bool,
        lock_wait: float,
    ) -> ArchiveOutcome:
        """``run_archive`` then ``run_log_archive`` (``sheetq.sheet_queue.archive_rows``),
        inside ``_exclusive`` (the sheet engine's host lock, waited for up to ``lock_wait``
        seconds; on PostgreSQL nothing to wait for)."""
        from sheetq.sheet_queue import archive_rows

        def run() -> ArchiveOutcome:
            return archive_rows(
                self._open_store(),
                self.settings,
                now=now,
                older_than=older_than,
                log_older_than=log_older_than,
                include_failed=include_failed,
                dry_run=dry_run,
                max_bytes=self.archive_max_bytes,
            )

        return run() if dry_run else self._exclusive(run, lock_wait)

    def _exclusive(self, run: Callable[[], ArchiveOutcome], lock_wait: float) -> ArchiveOutcome:
        """``run()`` where runs exclude archiving (the default: nothing to exclude)."""
        return run()

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
    ) -> ChangeReport:
        """``plan_requeue`` over the Queue, applied to the rows as read (on PostgreSQL:
        only to rows still as read)."""
        from sheetq.sheet_queue import change_rows, requeue_plan

        plan = requeue_plan(task_ids, statuses, types, error_classes, reset_attempts)
        return change_rows(
            self._open_store(),
            self.settings,
            plan,
            task_ids=task_ids,
            dry_run=dry_run,
            clock=clock,
        )

    def skip(
        self, *, task_ids: Sequence[str], reason: str, dry_run: bool, clock: Clock
    ) -> ChangeReport:
        """``plan_skip`` for the named tasks, applied like ``requeue``."""
        from sheetq.sheet_queue import change_rows, skip_plan

        return change_rows(
            self._open_store(),
            self.settings,
            skip_plan(task_ids, reason),
            task_ids=task_ids,
            dry_run=dry_run,
            clock=clock,
        )

    def _checked(self) -> WorkbookInfo:
        """The store's workbook, its schema checked (exit 2 naming what ``init`` fixes)."""
        from sheetq.sheet_queue import check

        info = self._open_store().open()
        check(info, self.settings)
        return info

    def status(self, *, clock: Clock) -> StatusReport:
        """The tally (``_tally``), and the runs that are gone when something is processing
        (``_gone``)."""
        info = self._checked()
        now = clock.now()
        tally = self._tally(info, now)
        gone = self._gone(info, tally, now) if tally.counts.get("processing") else []
        return StatusReport(info, tally, gone, now)

    def stats(self, *, since: datetime, now: datetime, types: Sequence[str]) -> Stats:
        """The log's numbers over ``[since, now]`` (``_stats``)."""
        return self._stats(self._checked(), since=since, now=now, types=types)

    def list_rows(self, *, statuses: set[Status], types: Sequence[str], limit: int) -> list[Row]:
        """Queue rows with these statuses and types, in queue order (``_list``)."""
        self._checked()
        return self._list(statuses, types, limit)

    def show(self, task_id: str) -> ShowReport:
        """One task's rows and history (``_show``)."""
        return self._show(self._checked(), task_id)

    def _tally(self, info: WorkbookInfo, now: datetime) -> QueueTally:
        from sheetq.sheet_queue import read_tally

        return read_tally(self._open_store(), self.settings, info, now)

    def _gone(self, info: WorkbookInfo, tally: QueueTally, now: datetime) -> list[HeldGroup]:
        raise NotImplementedError

    def _stats(
        self, info: WorkbookInfo, *, since: datetime, now: datetime, types: Sequence[str]
    ) -> Stats:
        from sheetq.sheet_queue import read_stats

        store = self._open_store()
        return read_stats(store, self.settings, info, since=since, now=now, types=types)

    def _list(self, statuses: set[Status], types: Sequence[str], limit: int) -> list[Row]:
        from sheetq.sheet_queue import read_list

        return read_list(self._open_store(), self.settings, statuses, types, limit)

    def _show(self, info: WorkbookInfo, task_id: str) -> ShowReport:
        from sheetq.sheet_queue import read_show

        return read_show(self._open_store(), self.settings, info, task_id)


def open_queue(
    settings: Settings, *, store: Callable[[], Store] | None = None, **store_kwargs: Any
) -> QueuePort:
    """The queue named by ``settings``: ``PgQueue`` when ``settings.database_url`` is set,
    else ``SheetQueue``. Nothing is opened yet: the store is made on first use by
    ``store()`` when given (the CLI's, which it closes), else by
    ``sheetq.store.open_store(settings, **store_kwargs)``."""
    factory = store
    if factory is None:

        def opener() -> Store:
            from sheetq.store import open_store

            return open_store(settings, **store_kwargs)

        factory = opener

    if settings.database_url:  # the queue lives in PostgreSQL (DESIGN.md §11)
        from sheetq.postgres.port import PgQueue

        return PgQueue(settings, factory)
    from sheetq.sheet_queue import SheetQueue

    return SheetQueue(settings, factory)
