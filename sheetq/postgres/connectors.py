"""Connectors on PostgreSQL (docs/design.md §13): ``sheetq connector list|pause|resume``,
the connectors ``status`` names, pauses that end on their own, and the connectors' alerts
(one when a connector opens, one after ``escalate_after``, one when it closes), as named
statements of ``queries/connectors.sql``. The claim that takes tokens and slots and the
outcomes' effects on the breaker are the run path's (``queries/run.sql``, migration 0005).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime, timedelta
from typing import Any

import psycopg

from sheetq.config import ConnectorConfig, Settings
from sheetq.connectors import Breaker, State, alert_text, effective
from sheetq.model import new_run_id
from sheetq.port import ConnectorView
from sheetq.postgres.manage import stamp
from sheetq.postgres.queries import QUERIES
from sheetq.postgres.session import Session, Transactions, pretend
from sheetq.redact import printable, shorten
from sheetq.times import exact_duration, format_ts


def views(session: Session, now: datetime) -> list[ConnectorView]:
    """Every configured connector (and any with a row left from an earlier configuration),
    by name, as of ``now`` (pretended, or the server's clock)."""
    settings = session.settings
    with session.transaction() as conn:
        at = stamp(conn, now)
        rows = {
            str(r["name"]): r
            for r in conn.execute(QUERIES["connector_rows"], {"queue": session.queue})
        }
        types = sorted({t for c in settings.connectors.values() for t in c.types})
        counts = {
            str(r["type"]): (int(r["running"]), int(r["waiting"]))
            for r in conn.execute(
                QUERIES["connector_counts"], {"queue": session.queue, "types": types, "now": at}
            )
        }
    out = []
    for name in sorted(set(settings.connectors) | set(rows)):
        config = settings.connectors.get(name, ConnectorConfig(name))
        out.append(view(config, rows.get(name), counts, at))
    return out


def view(
    config: ConnectorConfig,
    row: Mapping[str, Any] | None,
    counts: Mapping[str, tuple[int, int]],
    now: datetime,
) -> ConnectorView:
    """One connector's view from its row (``None``: never needed one, closed) and its
    types' (running, waiting) counts."""
    running = sum(counts.get(t, (0, 0))[0] for t in config.types)
    waiting = sum(counts.get(t, (0, 0))[1] for t in config.types)
    state = State.CLOSED
    until = None
    reason = ""
    if row is not None:
        breaker = Breaker(
            state=State(str(row["state"])),
            until=row["until"],
            probe=str(row["probe"]),
            probe_until=row["probe_until"],
        )
        state = effective(breaker, now)
        if state is not State.CLOSED:
            until = row["until"] if state is breaker.state else None
            reason = str(row["reason"])
    return ConnectorView(
        name=config.name,
        state=str(state),
        until=until,
        reason=reason,
        failures=int(row["failures"]) if row else 0,
        running=running,
        waiting=waiting,
        types=config.types,
        rate_limit=config.rate_limit.text() if config.rate_limit else "",
        concurrency=config.concurrency,
        last_error=str(row["last_error"]) if row else "",
        updated_at=row["updated_at"] if row else None,
    )


def pause(
    session: Session, name: str, *, seconds: float | None, reason: str, now: datetime
) -> ConnectorView:
    """Pause ``name`` (``seconds`` ``None``: until resumed), logged ``paused``."""
    session.settings.known_connector(name)
    words = "until resumed" if seconds is None else f"for {exact_duration(seconds)}"
    with session.transaction() as conn:
        at = stamp(conn, now)
        until = None if seconds is None else at + timedelta(seconds=seconds)
        if until is not None:
            words += f", until {format_ts(until)}"
        message = f"paused {words}" + (f": {reason}" if reason else "")
        conn.execute(
            QUERIES["connector_pause"],
            {
                "queue": session.queue,
                "name": name,
                "until": until,
                "reason": _clean(reason),
                "now": at,
                "message": _clean(message),
                "run": new_run_id("connector"),
            },
        )
    return _one(session, name, now)


def resume(session: Session, name: str, *, reason: str, now: datetime) -> ConnectorView:
    """Resume ``name``: closed, logged ``resumed`` (nothing to do when it has no row: it
    was never anything but closed)."""
    session.settings.known_connector(name)
    with session.transaction() as conn:
        conn.execute(
            QUERIES["connector_resume"],
            {
                "queue": session.queue,
                "name": name,
                "reason": _clean(reason),
                "now": stamp(conn, now),
                "run": new_run_id("connector"),
            },
        )
    return _one(session, name, now)


def _one(session: Session, name: str, now: datetime) -> ConnectorView:
    return next(v for v in views(session, now) if v.name == name)


def _clean(text: str) -> str:
    return shorten(printable(text), 500)


# --- the run path: pauses that end, alerts -----------------------------------------------


def tick(db: Transactions, run_id: str) -> None:
    """End the pauses whose time ran out (closed, logged ``resumed``)."""
    with db.transaction() as conn:
        conn.execute(QUERIES["connector_tick"], {"queue": db.queue, "run": run_id})


def owed_alerts(db: Transactions, settings: Settings) -> list[dict[str, Any]]:
    """Take the connectors' owed alerts (opened, escalated, closed), each by one sender."""
    configs = list(settings.connectors.values())
    members = [(t, c.name) for c in configs for t in c.types]
    with db.transaction() as conn:
        return list(
            conn.execute(
                QUERIES["connector_alerts"],
                {
                    "queue": db.queue,
                    "names": [c.name for c in configs],
                    "escalate": [c.escalate_after for c in configs],
                    "types": [t for t, _ in members],
                    "members": [c for _, c in members],
                },
            ).fetchall()
        )


def give_back(db: Transactions, alerts: Sequence[Mapping[str, Any]]) -> None:
    """Alerts that could not be sent are owed again."""
    with db.transaction() as conn:
        for alert in alerts:
            conn.execute(
                QUERIES["connector_alerts_back"],
                {"queue": db.queue, "name": alert["name"], "kind": alert["kind"]},
            )


class Pinned:
    """A command's session whose transactions see ``now`` as ``sheetq_now()`` when it is a
    pretended time (``SHEETQ_NOW``), as a run's do (``pin_clock``); the server's clock
    otherwise. For ``sheetq alert``'s connector alerts (``escalate_after`` is measured on
    ``sheetq_now()``)."""

    def __init__(self, session: Session, now: Callable[[], datetime]) -> None:
        self.session = session
        self.queue = session.queue
        self.settings = session.settings
        self._now = now

    @contextmanager
    def transaction(self) -> Iterator[psycopg.Connection[Any]]:
        with self.session.transaction() as conn:
            at = pretend(self._now())
            if at is not None:
                conn.execute(QUERIES["pin_clock"], {"at": at})
            yield conn


def send_owed(
    db: Transactions,
    settings: Settings,
    send: Callable[[str], bool],
    where: str,
) -> int:
    """Send each owed connector alert as one message (``send`` says whether it went); those
    not sent are owed again. Returns how many went."""
    alerts = owed_alerts(db, settings)
    failed = []
    sent = 0
    for alert in alerts:
        if send(alert_text(alert, where)):
            sent += 1
        else:
            failed.append(alert)
    if failed:
        give_back(db, failed)
    return sent
