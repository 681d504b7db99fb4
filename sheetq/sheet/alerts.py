"""Owed alerts on a sheet: which ``failed`` rows of a scan owe an alert, and the change set
that records that a message covered them (``alerted_at`` and an ``alerted`` log row). Pure.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime

from sheetq.config import Settings
from sheetq.model import Event, Status
from sheetq.policy import alert_order
from sheetq.port import AlertItem
from sheetq.sheet.plan import QueueRow, log_row
from sheetq.sheet.store import ChangeSet, UpdateRow
from sheetq.times import format_ts

# A read older than this (seconds) is not used to locate the alert marks: they are located
# afresh right before the write. Either way the write is verified right after (a sort can
# never leave alerted_at on the wrong row); a fresh read only keeps the pre-image that a
# repair would put back current.
FRESH_POSITIONS = 2.0


def owed(
    rows: Iterable[QueueRow],
    *,
    link: Callable[[int, str], str],
    failures: Mapping[str, AlertItem] | None = None,
) -> list[AlertItem]:
    """Owed alerts: ``failed`` rows of a scan without ``alerted_at`` (``rows`` must come from
    a scan with ``queue.SCAN_COLUMNS``, which includes ``last_error``), plus ``failures``
    recorded since that scan. Auth failures first: they need a person to fix credentials.
    ``link(row, task_id)`` makes each item's link."""
    items: dict[str, AlertItem] = {}
    by_id: dict[str, QueueRow] = {}
    for row in rows:
        by_id[row.task_id] = row
        if row.status is Status.FAILED and not row.alerted_at:
            items[row.task_id] = AlertItem(
                task_id=row.task_id,
                type=row.type,
                error_class=row.error_class,
                attempts=row.retry_count,
                error=row.raw.text("last_error"),
                row=row.row,
                owner=row.owner,
            )
    for task_id, item in (failures or {}).items():
        seen = by_id.get(task_id)
        if seen is not None:
            item.type = item.type or seen.type
            item.owner = item.owner or seen.owner
            item.attempts = item.attempts or seen.retry_count
        items[task_id] = item
    for item in items.values():
        item.link = link(item.row, item.task_id)
    return sorted(items.values(), key=alert_order)


def mark_alerted(
    items: Sequence[AlertItem], *, settings: Settings, now: datetime, run_id: str
) -> ChangeSet:
    """``alerted_at`` for every row a message covered, and an ``alerted`` log row each."""
    changes = ChangeSet()
    stamp = format_ts(now)
    for item in items:
        changes.updates.append(
            UpdateRow(settings.queue_sheet, item.task_id, item.row, {"alerted_at": stamp})
        )
        changes.appends.append(
            log_row(
                now,
                item.task_id,
                item.type,
                Event.ALERTED,
                Status.FAILED,
                item.attempts,
                "failure alert sent",
                run_id,
                worksheet=settings.log_sheet,
            )
        )
    return changes
