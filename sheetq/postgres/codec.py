"""Database values ↔ the cell values of docs/design.md §2 that the shared queue policy reads and
writes: times as ``2026-01-05T09:00:00Z`` text (empty when NULL), ``retry_count`` and
``duration_ms`` and ``priority`` as numbers, everything else as text."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from sheetq.errors import InputError
from sheetq.model import LOG_COLUMNS, QUEUE_COLUMNS, parse_priority
from sheetq.sheet.store import CellValue, cell_text
from sheetq.times import format_ts, parse_ts

TIME_COLUMNS = frozenset(
    {"created_at", "next_retry_at", "updated_at", "lease_until", "alerted_at", "ts"}
)
INT_COLUMNS = frozenset({"retry_count", "duration_ms", "priority"})
NULLABLE = frozenset({"next_retry_at", "lease_until", "alerted_at", "duration_ms"})
TASK_COLUMNS = QUEUE_COLUMNS
EVENT_COLUMNS = LOG_COLUMNS


def to_db(column: str, value: CellValue) -> Any:
    """One cell value as the database stores it. Raises ``InputError`` for a time or a number
    that is not one (naming the column)."""
    if column in TIME_COLUMNS:
        moment = parse_ts(value)
        if moment is None:
            return None
        if not isinstance(moment, datetime):
            raise InputError(f"{column}: {cell_text(value)!r} is not a time")
        return moment
    if column == "priority":  # a person's unreadable priority is the default's (docs/design.md §14)
        return parse_priority(value) or 0
    if column in INT_COLUMNS:
        text = cell_text(value).strip()
        if not text:
            return None if column in NULLABLE else 0
        try:
            return int(float(text))
        except ValueError:
            raise InputError(f"{column}: {text!r} is not a whole number") from None
    return cell_text(value)


def from_db(column: str, value: Any) -> CellValue:
    """One database value as the cell the sheet engine would hold."""
    if value is None:
        return ""
    if isinstance(value, datetime):
        return format_ts(value)
    if column in INT_COLUMNS:
        return int(value)
    return str(value)


def values_from_record(record: Mapping[str, Any], columns: tuple[str, ...]) -> dict[str, CellValue]:
    return {name: from_db(name, record[name]) for name in columns if name in record}
