"""Operator commands as change sets: the dead-letter redrive (``requeue``) and ``skip``.

Pure functions over parsed Queue rows (``sheetq.sheet.plan.parse_rows``); each changed row
gets its QueueLog row in the same change set.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from sheetq.config import Settings
from sheetq.model import Event, Status
from sheetq.redact import shorten
from sheetq.sheet.plan import QueueRow, log_row
from sheetq.sheet.store import CellValue, ChangeSet, UpdateRow
from sheetq.times import format_ts


def plan_requeue(
    rows: Sequence[QueueRow],
    *,
    settings: Settings,
    now: datetime,
    task_ids: Sequence[str] = (),
    statuses: Sequence[Status] = (Status.FAILED,),
    types: Sequence[str] = (),
    error_classes: Sequence[str] = (),
    reset_attempts: bool = False,
    run_id: str = "",
    priority: int | None = None,
) -> tuple[list[QueueRow], ChangeSet]:
    """The dead-letter redrive: matching rows back to ``pending``, each logged ``requeued``;
    ``priority`` (docs/design.md §14) written to them when given.

    With ``task_ids`` the filters apply to those rows only; a ``processing``
    row is never taken from its runner.
    """
    wanted_ids = set(task_ids)
    picked = [
        r
        for r in rows
        if (not wanted_ids or r.task_id in wanted_ids)
        and r.status in statuses
        and r.status is not Status.PROCESSING
        and (not types or r.type in types)
        and (not error_classes or r.error_class in error_classes)
    ]
    changes = ChangeSet()
    stamp = format_ts(now)
    for row in picked:
        count = 0 if reset_attempts else row.retry_count
        values: dict[str, CellValue] = {
            "status": str(Status.PENDING),
            "next_retry_at": stamp,  # due now; max_age counts from the redrive
            "error_class": "",
            "alerted_at": "",
            "lease_owner": "",
            "lease_until": "",
            "updated_at": stamp,
        }
        if reset_attempts:
            values["retry_count"] = 0
        if priority is not None:
            values["priority"] = priority
        changes.updates.append(UpdateRow(settings.queue_sheet, row.task_id, row.row, values))
        note = f"requeued with `sheetq requeue` (was {row.status_text.strip() or 'empty'}"
        note += ", attempts reset" if reset_attempts else ""
        note += f", priority {priority})" if priority is not None else ")"
        changes.appends.append(
            log_row(
                now,
                row.task_id,
                row.type,
                Event.REQUEUED,
                Status.PENDING,
                count,
                note,
                run_id,
                worksheet=settings.log_sheet,
            )
        )
    return picked, changes


def plan_skip(
    rows: Sequence[QueueRow],
    *,
    settings: Settings,
    now: datetime,
    task_ids: Sequence[str],
    reason: str = "",
    run_id: str = "",
) -> tuple[list[QueueRow], ChangeSet]:
    """Waiting or failed rows to ``skipped`` by hand (never ``processing``, ``done`` or
    already ``skipped`` ones)."""
    wanted = set(task_ids)
    allowed = (Status.PENDING, Status.RETRY, Status.FAILED)
    picked = [r for r in rows if r.task_id in wanted and r.status in allowed]
    changes = ChangeSet()
    stamp = format_ts(now)
    message = f"skipped with `sheetq skip`{': ' + reason if reason else ''}"
    for row in picked:
        changes.updates.append(
            UpdateRow(
                settings.queue_sheet,
                row.task_id,
                row.row,
                {
                    "status": str(Status.SKIPPED),
                    "next_retry_at": "",
                    "lease_owner": "",
                    "lease_until": "",
                    "updated_at": stamp,
                    "last_error": shorten(message, 500),
                },
            )
        )
        changes.appends.append(
            log_row(
                now,
                row.task_id,
                row.type,
                Event.SKIPPED,
                Status.SKIPPED,
                row.retry_count,
                message,
                run_id,
                worksheet=settings.log_sheet,
            )
        )
    return picked, changes
