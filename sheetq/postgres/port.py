"""``PgQueue``: the queue port (``sheetq.port``) on PostgreSQL, DESIGN.md §10, §11.

Each method delegates to the module that owns the operation here: ``enqueue`` (only the
batch's keys, one transaction), ``runner.PgRunner`` (claims ``FOR UPDATE SKIP LOCKED``,
per-task fenced settles), ``reports`` (``status``/``list``/``show``/``stats`` in SQL), and
``PgStore`` under the shared planners for ``requeue``/``skip``/``archive`` (a change
applies only to rows still as read). ``SHEETQ_PG_REPORTS=python`` makes the reports take
the sheet engine's Python path over every row (the reference the tests compare with).
"""

from __future__ import annotations

import os
import random
import sys
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING

from sheetq.port import ArchiveOutcome, ChangeReport, ShowReport, StatusReport
from sheetq.postgres.store import PgStore
from sheetq.sheet_queue import (
    archive_rows,
    change_rows,
    check,
    read_list,
    read_show,
    read_stats,
    read_tally,
    requeue_plan,
    skip_plan,
)

if TYPE_CHECKING:
    from sheetq.alerts.owed import Notifier
    from sheetq.clock import Clock
    from sheetq.config import Settings
    from sheetq.enqueue import Enqueued, NewTask
    from sheetq.model import Status
    from sheetq.stats import Stats
    from sheetq.store.base import Row, Store
    from sheetq.summary import RunOptions, RunSummary


def sql_reports() -> bool:
    """Whether ``status``/``list``/``show``/``stats`` compute in SQL
    (``sheetq.postgres.reports``): yes unless ``SHEETQ_PG_REPORTS=python``, which forces the
    shared Python path over every row."""
    return os.environ.get("SHEETQ_PG_REPORTS", "") != "python"


class PgQueue:
    """The queue in PostgreSQL. ``store`` makes the ``PgStore`` (and so connects) on first
    use (see ``sheetq.port.open_queue``)."""

    positions = False  # a database row has no sheet position: reports print ``row: null``

    def __init__(self, settings: Settings, store: Callable[[], Store]) -> None:
        self.settings = settings
        self._factory = store
        self._store: PgStore | None = None

    @property
    def store(self) -> PgStore:
        """The store, connected on first use."""
        if self._store is None:
            store = self._factory()
            assert isinstance(store, PgStore)
            self._store = store
        return self._store

    def init(self, *, fmt: bool, dashboard: bool, clock: Clock, say: Callable[[str], None]) -> None:
        """``init`` on PostgreSQL (DESIGN.md §11 "Schema"): apply the migrations the database
        lacks and say which, or that the schema is current. Formatting, the dashboard and the
        adoption of Apps Script rows are things of a spreadsheet: a database has none."""
        from sheetq.errors import UsageError

        if dashboard:
            raise UsageError(
                "--dashboard builds a Dashboard worksheet in a spreadsheet; a queue in "
                "PostgreSQL (SHEETQ_DATABASE_URL) has none: use `sheetq status` and "
                "`sheetq stats`"
            )
        queue = self.settings.queue_sheet
        store = self.store
        applied, version = store.upgrade_schema()
        where = f"PostgreSQL {store.where}"
        for number, name in applied:
            say(f"{where}: applied schema migration {number} ({name})")
        state_words = "" if applied else " is current, nothing to do"
        say(f"{where}: schema version {version}{state_words}; queue {queue!r} ready")

    def enqueue(
        self,
        tasks: Sequence[NewTask],
        *,
        clock: Clock,
        not_before: Callable[[str], datetime | None],
    ) -> list[Enqueued]:
        """Only the batch's keys, one transaction (DESIGN.md §11); ``--at`` without an
        offset is UTC."""
        from sheetq.postgres.enqueue import enqueue as enqueue_pg

        store = self.store
        when = not_before("UTC")
        for task in tasks:
            task.not_before = when
        return enqueue_pg(store, self.settings, tasks, now=clock.now())

    def run(
        self,
        options: RunOptions,
        *,
        clock: Clock,
        rng: random.Random,
        notifier: Notifier | None,
        on_progress: Callable[[str], None] | None,
    ) -> RunSummary:
        """``PgRunner``: claims and settles per task (DESIGN.md §11)."""
        from sheetq.postgres.runner import PgRunner

        runner = PgRunner(
            self.store,
            self.settings,
            clock=clock,
            rng=rng,
            notifier=notifier,
            on_progress=on_progress,
        )
        return runner.run(options)

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
        """``plan_requeue``; applied only to rows still as read."""
        return change_rows(
            self.store,
            self.settings,
            requeue_plan(task_ids, statuses, types, error_classes, reset_attempts),
            task_ids=task_ids,
            dry_run=dry_run,
            clock=clock,
        )

    def skip(
        self, *, task_ids: Sequence[str], reason: str, dry_run: bool, clock: Clock
    ) -> ChangeReport:
        """``plan_skip``; applied only to rows still as read."""
        return change_rows(
            self.store,
            self.settings,
            skip_plan(task_ids, reason),
            task_ids=task_ids,
            dry_run=dry_run,
            clock=clock,
        )

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
        """No run lock to wait for: workers and archive share the queue row by row (a move
        applies only to a row still as read); one transaction, however many rows (no
        request cap). ``lock_wait`` is unused."""
        return archive_rows(
            self.store,
            self.settings,
            now=now,
            older_than=older_than,
            log_older_than=log_older_than,
            include_failed=include_failed,
            dry_run=dry_run,
            max_bytes=sys.maxsize,
        )

    def status(self, *, clock: Clock) -> StatusReport:
        """GROUP BY, not every row (``reports.status_tally``). No run lease and no journal
        here: a processing task's run is gone when its own lease has ended."""
        from sheetq.held import held_by_gone_runs

        store = self.store
        info = store.open()
        check(info, self.settings)
        now = clock.now()
        if sql_reports():
            from sheetq.postgres.reports import status_tally

            tally = status_tally(store, self.settings, now)
        else:
            tally = read_tally(store, self.settings, info, now)
        gone = (
            held_by_gone_runs(
                tally.processing,
                lease_expires=None,
                now=now,
                settings=self.settings,
                run_lease=False,
            )
            if tally.counts.get("processing")
            else []
        )
        return StatusReport(info, tally, gone, now)

    def stats(self, *, since: datetime, now: datetime, types: Sequence[str]) -> Stats:
        """Aggregated in SQL over the window (``reports.window_stats``)."""
        store = self.store
        info = store.open()
        check(info, self.settings)
        if sql_reports():
            from sheetq.postgres.reports import window_stats

            return window_stats(store, since=since, now=now, types=types)
        return read_stats(store, self.settings, info, since=since, now=now, types=types)

    def list_rows(self, *, statuses: set[Status], types: Sequence[str], limit: int) -> list[Row]:
        """WHERE … ORDER BY … LIMIT (``reports.list_rows``)."""
        store = self.store
        check(store.open(), self.settings)
        if sql_reports():
            from sheetq.postgres.reports import list_rows as select_rows

            return select_rows(store, sorted(str(s) for s in statuses), types, limit)
        return read_list(store, self.settings, statuses, types, limit)

    def show(self, task_id: str) -> ShowReport:
        """Lookups by task_id (``reports.show_rows``)."""
        store = self.store
        info = store.open()
        check(info, self.settings)
        if sql_reports():
            from sheetq.postgres.reports import show_rows

            return ShowReport(*show_rows(store, task_id))
        return read_show(store, self.settings, info, task_id)
