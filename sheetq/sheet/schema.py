"""The columns sheetq needs, checked before any command reads or writes (docs/design.md §2)."""

from __future__ import annotations

from sheetq.config import Settings
from sheetq.errors import SchemaError
from sheetq.model import LOG_COLUMNS, QUEUE_COLUMNS
from sheetq.sheet.store import WorkbookInfo


def check_schema(info: WorkbookInfo, settings: Settings, *, archive: bool = False) -> None:
    """Refuse to run on worksheets without sheetq's columns (exit 2, says to run init)."""
    wanted = [(settings.queue_sheet, QUEUE_COLUMNS), (settings.log_sheet, LOG_COLUMNS)]
    if archive:
        wanted.append((settings.archive_sheet, QUEUE_COLUMNS))
    for title, columns in wanted:
        sheet = info.sheet(title)
        sheet.columns(columns)  # refuses duplicated sheetq headers
        missing = sheet.missing(columns)
        if missing:
            raise SchemaError(
                f"worksheet '{title}' lacks column(s) {', '.join(missing)}; run `sheetq init` "
                "to add them"
            )
