"""``PgQueue``: the queue port (``sheetq.port``) on PostgreSQL. (Transitional.)"""

from __future__ import annotations

import random
import sys
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from sheetq.errors import Interrupted, UsageError
from sheetq.model import Row, Status, new_run_id
from sheetq.port import (
    AlertOutcome,
    ArchiveOutcome,
    ArchiveReport,
    ChangeReport,
    LogArchiveReport,
    NotBefore,
    Say,
    Send,
    ShowReport,
    StatusReport,
    Worker,
)
from sheetq.summary import stopped

if TYPE_CHECKING:
    from sheetq.checks import Check
    from sheetq.clock import Clock
    from sheetq.config import Settings
    from sheetq.enqueue import Enqueued, NewTask
    from sheetq.migrate import Source, Written
    from sheetq.port import Notifier
    from sheetq.postgres.store import PgStore
    from sheetq.stats import Stats
    from sheetq.summary import RunOptions, RunSummary


class PgQueue:
    positions = False

    def __init__(
        self, settings: Settings, *, time_limit: float | None = None, time_limit_name: str = ""
    ) -> None:
        self.settings = settings
        self._time_limit = time_limit
        self._time_limit_name = time_limit_name
        self._store: PgStore | None = None

    @property
    def where(self) -> str:
        from sheetq.postgres.connection import describe

        return describe(self.settings.database_url)

    @property
    def store(self) -> PgStore:
        if self._store is None:
            from sheetq.postgres.store import PgStore

            self._store = PgStore(
                self.settings, time_limit=self._time_limit, time_limit_name=self._time_limit_name
            )
        return self._store

    def close(self) -> None:
        if self._store is not None:
            self._store.close()
            self._store = None

    def init(self, *, fmt: bool, dashboard: bool, clock: Clock, say: Say) -> None:
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

    def checks(self) -> list[Check]:
        from sheetq.postgres.doctor import check_postgres

        return check_postgres(self.settings)

    def enqueue(
        self, tasks: Sequence[NewTask], *, clock: Clock, not_before: NotBefore
    ) -> list[Enqueued]:
        from sheetq.postgres.enqueue import enqueue as enqueue_pg

        store = self.store
        moment = not_before("UTC")
        for task in tasks:
            task.not_before = moment
        return enqueue_pg(store, self.settings, list(tasks), now=clock.now())

    def run(
        self,
        options: RunOptions,
        *,
        clock: Clock,
        rng: random.Random,
        notifier: Notifier | None,
        on_progress: Callable[[str], None] | None,
    ) -> RunSummary:
        from sheetq.postgres.runner import PgRunner

        runner = PgRunner(
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
    ) -> Worker:
        from sheetq.postgres.worker import PgWorker

        return PgWorker(
            self.settings,
            clock=clock,
            rng=rng,
            notifier=notifier,
            concurrency=concurrency,
            types=types,
            poll=poll,
        )

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
        from sheetq.sheet.operations import plan_requeue

        def plan(rows: Any, settings: Settings, now: datetime) -> Any:
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
            )

        return self._change(plan, task_ids, dry_run, clock)

    def skip(
        self, *, task_ids: Sequence[str], reason: str, dry_run: bool, clock: Clock
    ) -> ChangeReport:
        from sheetq.sheet.operations import plan_skip

        def plan(rows: Any, settings: Settings, now: datetime) -> Any:
            return plan_skip(
                rows,
                settings=settings,
                now=now,
                task_ids=task_ids,
                reason=reason,
                run_id=new_run_id("skip"),
            )

        return self._change(plan, task_ids, dry_run, clock)

    def _change(
        self, plan: Any, task_ids: Sequence[str], dry_run: bool, clock: Clock
    ) -> ChangeReport:
        from sheetq.sheet.engine import task_state
        from sheetq.sheet.plan import SCAN_COLUMNS, parse_rows
        from sheetq.sheet.store import Read
        from sheetq.times import zone

        store = self.store
        info = store.open()
        (snap,) = store.read([Read(self.settings.queue_sheet, SCAN_COLUMNS)])
        rows = parse_rows(snap.rows, zone(info.time_zone), info.locale)
        picked, changes = plan(rows, self.settings, clock.now())
        unknown = sorted(set(task_ids) - {r.task_id for r in rows})
        refused = sorted(set(task_ids) - set(unknown) - {r.task_id for r in picked})
        if not dry_run and changes:
            result = store.apply_as_read(changes, (snap,))
            gone = set(result.missing)
            picked = [r for r in picked if r.task_id not in gone]
        return ChangeReport(
            [task_state(r) for r in picked],
            unknown,
            refused,
            {r.task_id: task_state(r) for r in rows},
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
        from sheetq.sheet.archive import run_archive
        from sheetq.sheet.log_archive import run_log_archive
        from sheetq.sheet.runner import lease_name

        store = self.store
        info = store.open()
        logs: list[LogArchiveReport] = []
        report = ArchiveReport(dry_run, now)
        if older_than is not None:
            report = run_archive(
                store,
                info,
                self.settings,
                now=now,
                older_than=older_than,
                include_failed=include_failed,
                dry_run=dry_run,
                run_id=new_run_id("archive"),
                lease_name=lease_name(self.settings.queue_sheet),
                max_bytes=sys.maxsize,
            )
        if log_older_than is not None and not report.locked:
            logs.append(
                run_log_archive(
                    store,
                    info,
                    self.settings,
                    now=now,
                    older_than=log_older_than,
                    dry_run=dry_run,
                )
            )
        return ArchiveOutcome(report, logs)

    def send_alerts(self, send: Send, *, clock: Clock) -> AlertOutcome:
        from sheetq.postgres import queue as pgq

        store = self.store
        info = store.open()
        result: dict[str, Any] = {}

        def notifier(items: Any, title: str) -> Any:
            report, delivery = send(items, title)
            result["report"], result["delivery"], result["owed"] = report, delivery, len(items)
            return report

        pgq.send_owed_alerts(
            store,
            settings=self.settings,
            info=info,
            notifier=notifier,
            now=clock.now,
            run_id=new_run_id("alert"),
        )
        outcome = AlertOutcome(result.get("owed", 0), requests=store.requests_made)
        outcome.report = result.get("report")
        outcome.delivery = result.get("delivery")
        outcome.marked = outcome.delivery is not None and outcome.delivery.sent
        return outcome

    def status(self, *, clock: Clock) -> StatusReport:
        from sheetq.postgres.reports import status_tally
        from sheetq.sheet.held import held_by_gone_runs

        store = self.store
        info = store.open()
        now = clock.now()
        tally, processing = status_tally(store, self.settings, now)
        gone = (
            held_by_gone_runs(
                processing, lease_expires=None, now=now, settings=self.settings, run_lease=False
            )
            if processing
            else []
        )
        return StatusReport(info.title, "UTC", tally, gone, now)

    def stats(self, *, since: datetime, now: datetime, types: Sequence[str]) -> Stats:
        from sheetq.postgres.reports import window_stats

        self.store.open()
        return window_stats(self.store, since=since, now=now, types=types)

    def list_rows(self, *, statuses: set[Status], types: Sequence[str], limit: int) -> list[Row]:
        from sheetq.postgres.reports import list_rows as select_rows

        self.store.open()
        return select_rows(self.store, sorted(str(s) for s in statuses), types, limit)

    def show(self, task_id: str) -> ShowReport:
        from sheetq.postgres.reports import show_rows

        self.store.open()
        return ShowReport(*show_rows(self.store, task_id))

    def export(self, *, clock: Clock) -> Source:
        raise UsageError("sheetq migrate copies from a spreadsheet: set SHEETQ_SPREADSHEET")

    def absorb(self, source: Source, *, now: datetime, run_id: str) -> Written:
        from sheetq.postgres.migrate import write

        return write(self.settings.database_url, self.settings, source, now=now, run_id=run_id)
