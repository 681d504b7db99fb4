"""Adopting an existing sheet (``sheetq init``): old rows get what new rows have.

For every Queue row with a payload: ``payload_hash`` always, and where empty
``idempotency_key``, ``created_at`` and ``task_id``, so old rows deduplicate
like new ones (DESIGN.md §2). A payload that is not valid JSON is reported,
not changed.
"""

from __future__ import annotations

from datetime import datetime

from sheetq.config import Settings
from sheetq.errors import InputError
from sheetq.idempotency import canonical_json, derive_key, parse_payload, payload_hash
from sheetq.model import new_task_id
from sheetq.store.base import CellValue, ChangeSet, Read, Store, UpdateRow, WorkbookInfo
from sheetq.times import format_ts

_COLUMNS = (
    "task_id",
    "created_at",
    "type",
    "payload_json",
    "idempotency_key",
    "payload_hash",
    "status",
)


def adopt_rows(store: Store, info: WorkbookInfo, settings: Settings, *, now: datetime) -> list[str]:
    """Fill the identity columns of old rows in one write; returns lines to print."""
    (snap,) = store.read([Read(settings.queue_sheet, _COLUMNS)])
    changes = ChangeSet()
    bad: list[str] = []
    blank_status = 0
    for row in snap.rows:
        text = row.text("payload_json")
        if not text.strip():
            continue
        try:
            payload = parse_payload(text, where=f"{settings.queue_sheet} row {row.number}")
        except InputError as exc:
            bad.append(exc.message)
            continue
        canonical = canonical_json(payload)
        values: dict[str, CellValue] = {}
        digest = payload_hash(canonical)
        if row.text("payload_hash") != digest:
            values["payload_hash"] = digest
        task_type = row.text("type").strip()
        if not row.text("idempotency_key").strip() and task_type:
            values["idempotency_key"] = derive_key(
                task_type, payload, canonical, key_fields=settings.type_config(task_type).key_fields
            )
        if not row.text("created_at").strip():
            values["created_at"] = format_ts(now)
        task_id = row.text("task_id").strip()
        if not task_id:
            values["task_id"] = new_task_id()
        if not row.text("status").strip():
            blank_status += 1
        if values:
            changes.updates.append(
                UpdateRow(settings.queue_sheet, task_id or None, row.number, values)
            )
    lines: list[str] = []
    if changes:
        store.apply(changes)
        lines.append(
            f"{settings.queue_sheet}: adopted {len(changes.updates)} existing row(s) "
            "(payload_hash, idempotency_key, created_at, task_id filled where empty)"
        )
    lines.extend(f"warning: {message}; left as is" for message in bad[:20])
    if blank_status:
        lines.append(
            f"note: {blank_status} row(s) have an empty status; type 'pending' to run them"
        )
    return lines
