"""Storage: one narrow port (``base``) and its adapters (``sqlite``, ``google``, and
``sheetq.postgres.store``).

``open_store(settings)`` picks the adapter: ``SHEETQ_DATABASE_URL`` puts the queue in
PostgreSQL; else ``SHEETQ_SPREADSHEET``: ``local:PATH`` is the embedded SQLite workbook,
anything else a Google spreadsheet URL or key. Adapters are imported lazily: gspread is heavy.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sheetq.errors import ConfigError

if TYPE_CHECKING:
    from sheetq.config import Settings
    from sheetq.store.base import Store

LOCAL_PREFIX = "local:"


def is_local(spreadsheet: str) -> bool:
    return spreadsheet.startswith(LOCAL_PREFIX)


def open_store(
    settings: Settings,
    *,
    create: bool = False,
    time_limit: float | None = None,
    time_limit_name: str = "",
) -> Store:
    """The store named by ``settings.spreadsheet``. ``create`` lets a local workbook be made.

    ``time_limit`` (seconds, ``enqueue``'s ``SHEETQ_ENQUEUE_TIMEOUT``, named in errors by
    ``time_limit_name``) bounds Google's requests and retries from now on, how long the
    local backend waits for another writer's lock, and PostgreSQL's connect and wait for the
    queue's lock."""
    if settings.database_url:  # the queue lives in PostgreSQL (DESIGN.md §11)
        from sheetq.postgres.store import PgStore

        return PgStore(settings, time_limit=time_limit, time_limit_name=time_limit_name)
    target = settings.spreadsheet
    if is_local(target):
        from sheetq.store.sqlite import SqliteStore

        path = target[len(LOCAL_PREFIX) :].strip()
        if not path:
            raise ConfigError(
                "SHEETQ_SPREADSHEET=local:PATH needs a file path, e.g. local:sheetq.db"
            )
        if time_limit is None:
            return SqliteStore(path, create=create)
        return SqliteStore(path, create=create, timeout=time_limit)
    from sheetq.store.google import GoogleStore

    return GoogleStore.from_settings(
        settings, time_limit=time_limit, time_limit_name=time_limit_name
    )
