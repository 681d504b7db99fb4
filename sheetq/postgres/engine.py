"""``PgQueue``: the queue port (``sheetq.port``) on PostgreSQL. (Transitional.)"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from sheetq.errors import Interrupted, UsageError
from sheetq.model import Row, Status, new_run_id
from sheetq.port import (
    AlertItem,
    AlertOutcome,
    AlertReport,
    ArchiveOutcome,
    ArchiveReport,
    ChangeReport,
    ConnectorView,
    LogArchiveReport,
    MirrorPass,
    NotBefore,
    Say,
    Send,
    ShowReport,
    StatusReport,
    Worker,
)
from sheetq.postgres import alerts, manage, presence, reports
from sheetq.postgres import connectors as pg_connectors
from sheetq.postgres import enqueue as pg_enqueue
from sheetq.postgres.session import Session
from sheetq.summary import stopped

if TYPE_CHECKING:
    from sheetq.accept import Enqueued, NewTask
    from sheetq.checks import Check
    from sheetq.clock import Clock
    from sheetq.config import Settings
    from sheetq.migrate import Source, Written
    from sheetq.port import Delivery, Notifier
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
        self._session: Session | None = None

    @property
    def where(self) -> str:
        from sheetq.postgres.connection import describe

        return describe(self.settings.database_url)

    @property
    def session(self) -> Session:
        """The connection of the commands that manage and read the queue."""
        if self._session is None:
            self._session = Session(
                self.settings, time_limit=self._time_limit, time_limit_name=self._time_limit_name
            )
        return self._session

    def close(self) -> None:
        if self._session is not None:
            self._session.close()
            self._session = None

    def init(self, *, fmt: bool, dashboard: bool, clock: Clock, say: Say) -> None:
        if dashboard:
            raise UsageError(
                "--dashboard builds a Dashboard worksheet in a spreadsheet; a queue in "
                "PostgreSQL (SHEETQ_DATABASE_URL) has none: use `sheetq status` and "
                "`sheetq stats`"
            )
        queue = self.settings.queue_sheet
        applied, version = self.session.upgrade()
        where = self.session.where
        for number, name in applied:
            say(f"{where}: applied schema migration {number} ({name})")
        state_words = "" if applied else " is current, nothing to do"
        say(f"{where}: schema version {version}{state_words}; queue {queue!r} ready")

    def connectors(self, *, clock: Clock) -> list[ConnectorView]:
        return pg_connectors.views(self.session, clock.now())

    def connector_pause(
        self, name: str, *, seconds: float | None, reason: str, clock: Clock
    ) -> ConnectorView:
        return pg_connectors.pause(
            self.session, name, seconds=seconds, reason=reason, now=clock.now()
        )

    def connector_resume(self, name: str, *, reason: str, clock: Clock) -> ConnectorView:
        return pg_connectors.resume(self.session, name, reason=reason, now=clock.now())

    def checks(self) -> list[Check]:
        from sheetq.postgres.doctor import check_postgres

        return check_postgres(self.settings)

    def enqueue(
        self, tasks: Sequence[NewTask], *, clock: Clock, not_before: NotBefore
    ) -> list[Enqueued]:
        moment = not_before("UTC")
        for task in tasks:
            task.not_before = moment
        return pg_enqueue.enqueue(self.session, self.settings, list(tasks), now=clock.now())

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
        finally:
            runner.close()

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
        from sheetq.postgres.worker import PgWorker

        return PgWorker(
            self.settings,
            clock=clock,
            rng=rng,
            notifier=notifier,
            concurrency=concurrency,
            types=types,
            poll=poll,
            mirror=mirror,
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
        priority: int | None = None,
    ) -> ChangeReport:
        return manage.requeue(
            self.session,
            now=clock.now(),
            task_ids=task_ids,
            statuses=statuses,
            types=types,
            error_classes=error_classes,
            reset_attempts=reset_attempts,
            dry_run=dry_run,
            priority=priority,
        )

    def skip(
        self, *, task_ids: Sequence[str], reason: str, dry_run: bool, clock: Clock
    ) -> ChangeReport:
        return manage.skip(
            self.session, now=clock.now(), task_ids=task_ids, reason=reason, dry_run=dry_run
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
        """Tasks and log rows, each in one transaction; no run lease to wait for (§11)."""
        now = clock.now()
        report = ArchiveReport(dry_run, now)
        if older_than is not None:
            report = manage.archive(
                self.session,
                now=now,
                older_than=older_than,
                include_failed=include_failed,
                dry_run=dry_run,
            )
        logs: list[LogArchiveReport] = []
        if log_older_than is not None:
            logs.append(
                manage.archive_log(
                    self.session, now=now, older_than=log_older_than, dry_run=dry_run
                )
            )
        return ArchiveOutcome(report, logs)

    def send_alerts(
        self, send: Send, *, clock: Clock, text: Callable[[str], bool] | None = None
    ) -> AlertOutcome:
        """One digest through the queue's alert claim, the same one every run and worker
        takes (``sheetq.postgres.alerts``): nothing is sent while another run's holds."""
        delivered: list[Delivery] = []

        def notify(items: list[AlertItem], title: str) -> AlertReport:
            report, delivery = send(items, title)
            delivered.append(delivery)
            return report

        session = self.session
        digest = alerts.send_owed(
            session, notify, title=session.where, run_id=new_run_id("alert"), now=clock.now
        )
        outcome = AlertOutcome(digest.owed, requests=session.requests, locked=digest.locked)
        outcome.report = digest.report
        outcome.delivery = delivered[0] if delivered else None
        outcome.marked = outcome.delivery is not None and outcome.delivery.sent
        outcome.marked = outcome.marked and not digest.mark_error
        outcome.mark_error = digest.mark_error
        if text is not None and digest.locked == "":
            told: list[bool] = []

            def one(message: str) -> bool:
                told.append(text(message))
                return told[-1]

            pinned = pg_connectors.Pinned(session, clock.now)
            pg_connectors.send_owed(pinned, self.settings, one, session.where)
            outcome.connector_sent = sum(told)
            outcome.connector_unsent = len(told) - sum(told)
        return outcome

    def status(self, *, clock: Clock) -> StatusReport:
        session = self.session
        now = session.moment(clock.now())
        tally = reports.status_tally(session, self.settings, now)
        gone = (
            presence.held_groups(session, self.settings, now) if tally.counts["processing"] else []
        )
        notable = [v for v in pg_connectors.views(session, now) if v.notable]
        return StatusReport(session.where, "UTC", tally, gone, now, connectors=notable)

    def stats(self, *, since: datetime, now: datetime, types: Sequence[str]) -> Stats:
        return reports.window_stats(self.session, since=since, now=now, types=types)

    def list_rows(self, *, statuses: set[Status], types: Sequence[str], limit: int) -> list[Row]:
        return reports.list_rows(self.session, sorted(str(s) for s in statuses), types, limit)

    def show(self, task_id: str) -> ShowReport:
        report = ShowReport(*reports.show_rows(self.session, task_id))
        live = [row for sheet, row in report.found if sheet == self.settings.queue_sheet]
        if live and live[0].values.get("status") == "processing":
            session = self.session
            now = session.moment(datetime.now(UTC))
            with session.transaction() as conn:
                holder = presence.gone_holders(conn, session.queue, [task_id]).get(task_id)
            if holder is not None:
                kind = str(live[0].values.get("type") or "")
                report.held = presence.show_line(holder, kind, self.settings, now)
        return report

    def export(self, *, clock: Clock) -> Source:
        raise UsageError("sheetq migrate copies from a spreadsheet: set SHEETQ_SPREADSHEET")

    def absorb(self, source: Source, *, now: datetime, run_id: str) -> Written:
        from sheetq.postgres.migrate import write

        return write(self.settings.database_url, self.settings, source, now=now, run_id=run_id)
