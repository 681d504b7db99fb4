"""Where a queue's rows are, in the words a message to its user needs (docs/design.md §2, §11).

On a spreadsheet (or ``local:`` workbook) a message names the worksheets (``Queue``,
``QueueLog``…); on PostgreSQL it names the queue and its tables (``sheetq_log``…), since
that user has no sheet to look in.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sheetq.config import Settings


@dataclass(frozen=True)
class Places:
    """The names of a queue's places: its live rows, log, archive and log archive, and
    the store that holds owed alerts (``"the sheet"`` / ``"PostgreSQL"``)."""

    queue: str
    log: str
    archive: str
    log_archive: str
    store: str
    on_postgres: bool

    def name(self, worksheet: str, settings: Settings) -> str:
        """A worksheet title (``settings.queue_sheet``…) as this backend calls the place."""
        titles = {
            settings.queue_sheet: self.queue,
            settings.log_sheet: self.log,
            settings.archive_sheet: self.archive,
            settings.log_archive_sheet: self.log_archive,
        }
        return titles.get(worksheet, worksheet)


def places(settings: Settings) -> Places:
    """The names for the backend ``settings`` select (``database_url``: PostgreSQL)."""
    if settings.database_url:
        return Places(
            queue=f"queue {settings.queue_sheet!r}",
            log="sheetq_log",
            archive="sheetq_archive",
            log_archive="sheetq_log_archive",
            store="PostgreSQL",
            on_postgres=True,
        )
    return Places(
        queue=settings.queue_sheet,
        log=settings.log_sheet,
        archive=settings.archive_sheet,
        log_archive=settings.log_archive_sheet,
        store="the sheet",
        on_postgres=False,
    )
