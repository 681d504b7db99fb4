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
import sys
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING

from sheetq.port import ShowReport, StoreQueue
from sheetq.postgres.store import PgStore

if TYPE_CHECKING:
    from sheetq.clock import Clock
    from sheetq.enqueue import Enqueued, NewTask
    from sheetq.held import HeldGroup
    from sheetq.model import Status
    from sheetq.port import NotBefore, Running
    from sheetq.stats import Stats
    from sheetq.store.base import Row, WorkbookInfo
    from sheetq.tally import QueueTally


def sql_reports() -> bool:
    """Whether ``status``/``list``/``show``/``stats`` compute in SQL
    (``sheetq.postgres.reports``): yes unless ``SHEETQ_PG_REPORTS=python``, which forces the
    shared Python path over every row."""
    return os.environ.get("SHEETQ_PG_REPORTS", "") != "python"


class PgQueue(StoreQueue):
    """The queue in PostgreSQL. ``store`` makes the ``PgStore`` (and so connects) on first
    use (see ``sheetq.port.open_queue``); requeue, skip and the reports' shape are
    ``StoreQueue``'s, the reports' reads are SQL (``reports``)."""

    positions = False  # a database row has no sheet position: reports print ``row: null``
    # ``archive``: one transaction, however many rows (no request cap); no run lock to wait
    # for: workers and archive share the queue row by row (a move applies only to a row
    # still as read)
    archive_max_bytes = sys.maxsize

    @property
    def store(self) -> PgStore:
        """The store, connected on first use."""
        store = self._open_store()
        assert isinstance(store, PgStore)
        return store

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

    def _enqueue(self, tasks: list[NewTask], clock: Clock, when: NotBefore) -> list[Enqueued]:
        """Only the batch's keys, one transaction (DESIGN.md §11); ``--at`` without an
        offset is UTC."""
        from sheetq.postgres.enqueue import enqueue as enqueue_pg

        store = self.store
        moment = when("UTC")
        for task in tasks:
            task.not_before = moment
        return enqueue_pg(store, self.settings, tasks, now=clock.now())

    def _runner_type(self) -> Callable[..., Running]:
        """``PgRunner``: claims and settles per task (DESIGN.md §11)."""
        from sheetq.postgres.runner import PgRunner

        return PgRunner

    def _tally(self, info: WorkbookInfo, now: datetime) -> QueueTally:
        """GROUP BY, not every row (``reports.status_tally``)."""
        if not sql_reports():
            return super()._tally(info, now)
        from sheetq.postgres.reports import status_tally

        return status_tally(self.store, self.settings, now)

    def _gone(self, info: WorkbookInfo, tally: QueueTally, now: datetime) -> list[HeldGroup]:
        """No run lease and no journal here: a processing task's run is gone when its own
        lease has ended."""
        from sheetq.held import held_by_gone_runs

        return held_by_gone_runs(
            tally.processing, lease_expires=None, now=now, settings=self.settings, run_lease=False
        )

    def _stats(
        self, info: WorkbookInfo, *, since: datetime, now: datetime, types: Sequence[str]
    ) -> Stats:
        """Aggregated in SQL over the window (``reports.window_stats``)."""
        if not sql_reports():
            return super()._stats(info, since=since, now=now, types=types)
        from sheetq.postgres.reports import window_stats

        return window_stats(self.store, since=since, now=now, types=types)

    def _list(self, statuses: set[Status], types: Sequence[str], limit: int) -> list[Row]:
        """WHERE … ORDER BY … LIMIT (``reports.list_rows``)."""
        if not sql_reports():
            return super()._list(statuses, types, limit)
        from sheetq.postgres.reports import list_rows as select_rows

        return select_rows(self.store, sorted(str(s) for s in statuses), types, limit)

    def _show(self, info: WorkbookInfo, task_id: str) -> ShowReport:
        """Lookups by task_id (``reports.show_rows``)."""
        if not sql_reports():
            return super()._show(info, task_id)
        from sheetq.postgres.reports import show_rows

        return ShowReport(*show_rows(self.store, task_id))
