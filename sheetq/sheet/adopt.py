"""Adopting an existing sheet (``sheetq init``): old rows get what new rows have.

For every Queue row with a payload: ``payload_hash`` always, and where empty
``idempotency_key``, ``created_at`` and ``task_id``, so old rows deduplicate
like new ones (docs/design.md §2). A payload that is not valid JSON is reported,
not changed.
"""

from __future__ import annotations

from collections import Counter
from datetime import datetime

from sheetq.config import Settings
from sheetq.errors import InputError
from sheetq.idempotency import canonical_json, derive_key, parse_payload, payload_hash
from sheetq.model import new_task_id
from sheetq.sheet.store import CellValue, ChangeSet, Read, Store, UpdateRow, WorkbookInfo
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
    keyless = ChangeSet()  # rows addressed by their payload text (on no other row)
    changes = ChangeSet()  # rows whose payload repeats, addressed by their task_id
    # A row without a task_id is addressed by its payload text, so that text must be on no
    # other row: else a write could not tell them apart.
    texts = Counter(r.text("payload_json").strip() for r in snap.rows)
    twins = 0
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
        if not values:
            continue
        if texts[text.strip()] == 1:
            # addressed by its payload, on no other row: the write's re-location and repair
            # then know every row's identity, adopted or not (a row without a task_id too)
            keyless.updates.append(
                UpdateRow(settings.queue_sheet, text.strip(), row.number, values, "payload_json")
            )
        elif task_id:
            changes.updates.append(UpdateRow(settings.queue_sheet, task_id, row.number, values))
        else:
            twins += 1
    lines: list[str] = []
    # Every write is re-located by its key right before and verified right after (§5): a
    # person sorting the sheet meanwhile never gets a row's identity written onto another.
    adopted = 0
    for part in (keyless, changes):
        if part:
            result = store.apply(part)
            adopted += len(part.updates) - len(result.missing)
    if adopted:
        lines.append(
            f"{settings.queue_sheet}: adopted {adopted} existing row(s) "
            "(payload_hash, idempotency_key, created_at, task_id filled where empty)"
        )
    if twins:
        lines.append(
            f"note: {twins} row(s) without task_id have the same payload as another row, so "
            "sheetq cannot address them safely; type a unique task_id into each (any text, "
            "e.g. legacy-1) and run `sheetq init` again"
        )
    lines.extend(f"warning: {message}; left as is" for message in bad[:20])
    if blank_status:
        lines.append(
            f"note: {blank_status} row(s) have an empty status; type 'pending' to run them"
        )
    return lines
