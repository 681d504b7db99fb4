"""The one-at-a-time alert digest on PostgreSQL (docs/design.md §11 "Alerts", §9), over the
worksheet-shaped ``PgStore``. (Transitional: the alert claim moves to SQL.)"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from sheetq.config import Settings
from sheetq.model import QUEUE_COLUMNS
from sheetq.postgres.codec import values_from_record
from sheetq.sheet.plan import parse_rows
from sheetq.sheet.store import Row, WorkbookInfo

if TYPE_CHECKING:
    from sheetq.port import AlertItem, AlertReport
    from sheetq.postgres.store import PgStore

OWED_LIMIT = 10_000  # failed rows one alert digest covers at most (the rest: next digest)


def _rows(records: list[dict[str, object]]) -> list[Row]:
    return [
        Row(number, values_from_record(record, QUEUE_COLUMNS))
        for number, record in enumerate(records, start=2)
    ]


def send_owed_alerts(
    store: PgStore,
    *,
    settings: Settings,
    info: WorkbookInfo,
    notifier: Callable[[list[AlertItem], str], AlertReport],
    now: Callable[[], datetime],
    run_id: str,
) -> tuple[int, int, list[str]]:
    """Send the owed failure alerts as one digest and mark them, at most one digest at a time
    per queue however many runs and workers share it (docs/design.md §11 "Alerts", §9).

    One transaction holds the queue's alert lock (``pg_try_advisory_xact_lock``; busy: another
    run is sending, return at once) and the owed rows (``failed``, ``alerted_at`` empty,
    locked like claims) while the notifier sends; the rows it covered get ``alerted_at`` and
    an ``alerted`` log row (``sheetq.port.mark_alerted``) in the same transaction.
    Returns (alerts sent, alerts still owed, notes)."""
    from sheetq.sheet.alerts import mark_alerted, owed

    with store.transaction() as conn:
        got = conn.execute(
            "SELECT pg_try_advisory_xact_lock(hashtext(%s)) AS got",
            (f"sheetq-alerts:{store.queue}",),
        ).fetchone()
        if not got or not got["got"]:
            return 0, 0, []
        records = conn.execute(
            "SELECT * FROM sheetq_tasks WHERE queue = %s AND status = 'failed'"
            " AND alerted_at IS NULL ORDER BY updated_at, task_id LIMIT %s"
            " FOR UPDATE SKIP LOCKED",
            (store.queue, OWED_LIMIT),
        ).fetchall()
        rows = parse_rows(_rows(records), UTC, "en_US")
        items = owed(
            rows, link=lambda row, task_id: store.link(info, settings.queue_sheet, row, task_id)
        )
        if not items:
            return 0, 0, []
        report = notifier(items, info.title)
        covered = set(report.covered)
        if covered:
            store.apply_in(
                conn,
                mark_alerted(
                    [i for i in items if i.task_id in covered],
                    settings=settings,
                    now=now(),
                    run_id=run_id,
                ),
            )
        return len(covered), len(items) - len(covered), list(report.notes)
