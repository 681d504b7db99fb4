"""The one place that turns a configuration into a queue (docs/design.md "One seam").

``open_queue(settings)`` gives the ``QueuePort`` named by the settings: PostgreSQL when
``settings.database_url`` is set (``sheetq.postgres.engine.PgQueue``), else the sheet engine
over ``settings.spreadsheet`` (``sheetq.sheet.engine.SheetQueue``: a Google spreadsheet, or
the ``local:`` SQLite workbook). Nothing is opened or connected yet: each engine opens its
store on first use. The engines are imported here, when chosen, so that a command on a
sheet never loads psycopg and one on PostgreSQL never loads gspread (start-up time, not
import cycles: neither engine imports this module).
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sheetq.config import Settings
    from sheetq.port import QueuePort


def open_queue(
    settings: Settings,
    *,
    create: bool = False,
    time_limit: float | None = None,
    time_limit_name: str = "",
) -> QueuePort:
    """The queue ``settings`` name. ``create``: a ``local:`` workbook may be made (``init``).
    ``time_limit`` (seconds, named ``time_limit_name`` in errors: ``enqueue``'s
    ``SHEETQ_ENQUEUE_TIMEOUT``) bounds Google's requests and retries, the local workbook's
    wait for another writer, and PostgreSQL's connect and wait for the queue's lock."""
    if settings.database_url:
        from sheetq.postgres.engine import PgQueue

        return PgQueue(settings, time_limit=time_limit, time_limit_name=time_limit_name)
    from sheetq.sheet.engine import SheetQueue

    return SheetQueue(
        settings, create=create, time_limit=time_limit, time_limit_name=time_limit_name
    )


def on_google(settings: Settings) -> bool:
    """Whether ``settings`` put the queue in a Google spreadsheet (not PostgreSQL, not a
    ``local:`` workbook): where every request counts against the Sheets quota."""
    from sheetq.sheet import is_local

    return not settings.database_url and not is_local(settings.spreadsheet)


def open_sheet(settings: Settings) -> QueuePort:
    """The sheet engine over ``settings.spreadsheet`` even when the queue is in PostgreSQL:
    the source of ``sheetq migrate``, and the mirror's spreadsheet for ``sheetq doctor``."""
    return open_queue(replace(settings, database_url=""))
