"""Alert links into the mirror (docs/design.md §11 "Alerts", §12): a queue in PostgreSQL with a
spreadsheet mirror gives each alerted task a link to its mirror row.

Without a mirror, or when the task is not (yet) in the mirror's Queue worksheet, the
item keeps the link the engine gave it, ``sheetq show ID``. Costs 2 Sheets API
requests on Google (open, then the Queue's ``task_id`` column), only when a message is
about to be sent; never raises (Google down: the links stay ``sheetq show ID``).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sheetq.config import Settings
    from sheetq.port import AlertItem

log = logging.getLogger("sheetq.alerts")


def link_mirror_rows(items: Sequence[AlertItem], settings: Settings) -> list[AlertItem]:
    """``items`` with ``row``/``link`` pointing at the task's row in the mirror's Queue
    worksheet where it has one (copies: the caller's items, whose ``row`` addresses the
    queue's own store, are left as they are)."""
    if not (settings.database_url and settings.spreadsheet) or not items:
        return list(items)
    from sheetq.sheet import open_store
    from sheetq.sheet.store import Read

    try:
        store = open_store(replace(settings, database_url=""))
    except Exception as exc:  # an alert must never fail for its links
        log.info("alert links: mirror not opened (%s); links stay `sheetq show ID`", exc)
        return list(items)
    try:
        info = store.open()
        queue = settings.queue_sheet
        if queue not in info.sheets:
            return list(items)
        (snap,) = store.read([Read(queue, ("task_id",))])
        rows = {r.text("task_id"): r.number for r in snap.rows if r.text("task_id")}
        linked = []
        for item in items:
            row = rows.get(item.task_id)
            linked.append(
                item
                if row is None
                else replace(item, row=row, link=store.link(info, queue, row, item.task_id))
            )
        return linked
    except Exception as exc:  # Google down or over quota: the message goes out all the same
        log.info("alert links: mirror not read (%s); links stay `sheetq show ID`", exc)
        return list(items)
    finally:
        store.close()
