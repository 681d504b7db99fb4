"""The alert digest on PostgreSQL: one at a time per queue, and no transaction open while
Telegram answers (docs/design.md §9, §11 "Alerts", "No transaction stays open across a call
outside the database").

Three steps, the statements of ``queries/alerts.sql``:

1. **claim** (one committed transaction): the queue's claim row says "sending until T"
   (the server's clock + ``sending_lease``), taken only when failures are owed and no
   other run's claim holds; it returns the owed tasks. ``sheetq alert``, every
   ``sheetq process`` run and every ``sheetq worker`` take this same claim, so however many
   run on however many hosts, one digest at a time goes out per queue.
2. **send**, outside any transaction: a slow Telegram, a 429's ``retry_after`` or a
   network timeout holds no row lock, and no ``idle_in_transaction_session_timeout`` can cut
   the connection under it.
3. **mark** (a new transaction): ``alerted_at`` and an ``alerted`` log row on each task the
   message covered, and the claim let go; when nothing was delivered, only the claim is let
   go (the alerts stay owed, the next run tries again). A mark that fails (the connection
   lost, the server restarted) is tried once more on a new connection; if that fails too,
   the claim stays until T, so the message is sent again only after T, never twice while
   the claim holds.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sheetq.alerts.telegram import Timeouts
from sheetq.config import Settings
from sheetq.errors import StoreError
from sheetq.policy import alert_order
from sheetq.port import AlertItem, AlertReport
from sheetq.postgres.manage import stamp
from sheetq.postgres.queries import QUERIES
from sheetq.postgres.reports import WS
from sheetq.postgres.session import Transactions
from sheetq.times import format_ts

OWED_LIMIT = 10_000  # failed tasks one digest covers at most (the rest: the next digest)
LEASE_MARGIN = 60.0  # seconds a claim outlives the longest send (a mirror's links, a slow mark)


@dataclass
class Digest:
    """What one digest did. ``owed``: failures the claim covered (``None``: another run's
    claim holds, ``holder`` until ``until``); ``report``: what the notifier said (``None``:
    nothing to send); ``covered``: failures the delivered message reported; ``marked``:
    tasks whose ``alerted_at`` is written; ``mark_error``: why the mark failed (the message
    went out: it is sent again after ``until``)."""

    owed: int | None
    holder: str = ""
    until: datetime | None = None
    report: AlertReport | None = None
    covered: int = 0
    marked: int = 0
    mark_error: str = ""
    notes: list[str] = field(default_factory=list)

    @property
    def locked(self) -> str:
        """The line that says another run is sending ("" when none is)."""
        if self.owed is not None:
            return ""
        until = format_ts(self.until) if self.until else "?"
        return (
            f"another sheetq run ({self.holder}) is sending this queue's failure alerts "
            f"(its claim holds until {until}); nothing sent here"
        )


def sending_lease(settings: Settings) -> float:
    """Seconds a digest's claim holds: twice the longest a send may take (docs/design.md
    §9: ``retry_after`` waits and timeouts, ``SHEETQ_TELEGRAM_TIMEOUT``) plus a margin."""
    return 2 * Timeouts.from_env(settings.telegram).deadline + LEASE_MARGIN


def _item(record: Any) -> AlertItem:
    task_id = str(record["task_id"])
    return AlertItem(
        task_id=task_id,
        type=str(record["type"]),
        error_class=str(record["error_class"]),
        attempts=int(record["retry_count"]),
        error=str(record["last_error"]),
        row=0,
        owner=str(record["owner"]),
        link=f"sheetq show {task_id}",
    )


def send_owed(
    db: Transactions,
    notify: Callable[[list[AlertItem], str], AlertReport],
    *,
    title: str,
    run_id: str,
    now: Callable[[], datetime],
) -> Digest:
    """Claim, send and mark the queue's owed alerts (the module docstring), as ``run_id``.
    ``notify(items, title)`` sends one message and says which task ids it covered; it runs
    with no transaction open. ``now()``: the command's clock, stamped on ``alerted_at``
    and the log rows (the server's clock unless pretended, ``SHEETQ_NOW``). Raises
    ``StoreError`` only when the claim itself cannot be made (nothing sent)."""
    queue = db.queue
    with db.transaction() as conn:
        records = conn.execute(
            QUERIES["alert_claim"],
            {
                "queue": queue,
                "owner": run_id,
                "lease": sending_lease(db.settings),
                "limit": OWED_LIMIT,
                "ws": WS,
            },
        ).fetchall()
        if not records:
            holder = conn.execute(QUERIES["alert_holder"], {"queue": queue}).fetchone()
            if holder is not None:
                return Digest(None, str(holder["owner"]), holder["until"])
            return Digest(0)
    digest = Digest(len(records), run_id, records[0]["until"])
    items = sorted((_item(r) for r in records), key=alert_order)
    report = notify(items, title)  # never raises; if it did, the claim ends at its until
    digest.report = report
    covered = [i.task_id for i in items if i.task_id in set(report.covered)]
    digest.covered = len(covered)
    if not covered:
        _let_go(db, run_id)
        return digest
    params = {
        "queue": queue,
        "owner": run_id,
        "ids": covered,
        "run_id": run_id,
        "ws": WS,
    }
    for attempt in (1, 2):  # the second on a new connection (a lost one is reopened)
        try:
            with db.transaction() as conn:
                moment = stamp(conn, now())
                row = conn.execute(QUERIES["alert_mark"], params | {"now": moment})
                found = row.fetchone()
            digest.marked = int(found["n"]) if found else 0
            digest.mark_error = ""
            break
        except StoreError as exc:
            digest.mark_error = exc.message
            if attempt == 2:
                until = format_ts(digest.until) if digest.until else "its claim ends"
                digest.notes.append(
                    f"alert sent but alerted_at not written ({exc.message}); its failures "
                    f"stay owed and are announced again after {until}"
                )
    return digest


def _let_go(db: Transactions, run_id: str) -> None:
    """Release this run's claim; if that fails, it ends at its ``until`` by itself."""
    try:
        with db.transaction() as conn:
            conn.execute(QUERIES["alert_release"], {"queue": db.queue, "owner": run_id})
    except StoreError:
        pass


def owed_count(db: Transactions) -> int:
    """Failed tasks whose alert is still owed (``alerted_at`` empty)."""
    with db.transaction() as conn:
        found = conn.execute(QUERIES["alert_owed_count"], {"queue": db.queue}).fetchone()
    return int(found["n"]) if found else 0
