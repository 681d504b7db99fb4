"""The sheet engine: the queue in a worksheet-shaped store (docs/design.md §10).

* ``store`` — the store protocol, shaped like what a spreadsheet offers (read columns,
  apply one atomic change set, re-locate rows by ``task_id``), and its values;
* ``google`` (+ ``google_*``) and ``sqlite`` — its two adapters: a Google spreadsheet
  through gspread, and the embedded ``local:`` SQLite workbook;
* ``plan``, ``operations``, ``archive``, ``log_archive``, ``adopt``, ``enqueue`` — the
  planning functions: a snapshot in, a change set out, no I/O;
* ``runner`` and ``journal`` — ``sheetq process`` on a sheet: pipelined batches under the
  run lease, a host journal so that a kill loses no finished work;
* ``engine`` — ``SheetQueue``, the queue port (``sheetq.port``) on all of the above.

``open_store(settings)`` picks the adapter from ``SHEETQ_SPREADSHEET``: ``local:PATH`` is
the embedded SQLite workbook, anything else a Google spreadsheet URL or key. Adapters are
imported lazily: gspread is heavy.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sheetq.errors import ConfigError

if TYPE_CHECKING:
    from sheetq.config import Settings
    from sheetq.sheet.store import Store

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
    local backend waits for another writer's lock."""
    target = settings.spreadsheet
    if is_local(target):
        from sheetq.sheet.sqlite import SqliteStore

        path = target[len(LOCAL_PREFIX) :].strip()
        if not path:
            raise ConfigError(
                "SHEETQ_SPREADSHEET=local:PATH needs a file path, e.g. local:sheetq.db"
            )
        if time_limit is None:
            return SqliteStore(path, create=create)
        return SqliteStore(path, create=create, timeout=time_limit, timeout_name=time_limit_name)
    from sheetq.sheet.google import GoogleStore

    return GoogleStore.from_settings(
        settings, time_limit=time_limit, time_limit_name=time_limit_name
    )
