"""Which runs live, from PostgreSQL itself (docs/design.md §11 "A gone worker is named").

Each ``sheetq worker`` and each ``sheetq process`` run takes, on the connection it works
on, the session-level advisory lock derived from its run id (its tasks' ``lease_owner``),
and records its host and pid in ``sheetq_runs`` (``announce``). The server lets the lock go
the moment that session ends: a killed worker, a crashed host, a cut connection. So a
``processing`` task whose run's lock no session holds belongs to a run that is gone, and
``status``, ``show`` and ``requeue`` say so, with when it will be recovered: recovery itself
still waits for the lease, since a worker cut off by the network may still be running the
handler. A run that never announced itself (an older sheetq) is judged by its lease alone.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg
from psycopg.rows import dict_row

from sheetq.config import Settings
from sheetq.policy import will_do
from sheetq.port import HeldGroup
from sheetq.postgres.queries import QUERIES
from sheetq.postgres.reports import WS
from sheetq.postgres.session import Session, Transactions
from sheetq.times import format_ts


def announce(db: Transactions, *, run_id: str, kind: str) -> bool:
    """Say on ``db``'s connection that run ``run_id`` (``worker``/``process``) of its queue
    lives, for as long as this session does (call again on each new connection), in one
    transaction of its own. Returns whether this session holds the run's lock now."""
    params = {
        "run_id": run_id,
        "queue": db.queue,
        "kind": kind,
        "host": socket.gethostname(),
        "pid": os.getpid(),
    }
    with db.transaction() as conn, conn.cursor(row_factory=dict_row) as cur:
        row = cur.execute(QUERIES["run_announce"], params).fetchone()
    return bool(row and row["got"])


def held_groups(session: Session, settings: Settings, now: datetime) -> list[HeldGroup]:
    """The queue's ``processing`` tasks held by runs that are gone (their session ended)
    or whose lease has ended at ``now``, one group per run, for ``sheetq status``."""
    with session.transaction() as conn:
        records = conn.execute(
            QUERIES["held_by_runs"], {"queue": session.queue, "now": now, "ws": WS}
        ).fetchall()
    by_run: dict[str, list[Any]] = {}
    for record in records:
        by_run.setdefault(str(record["run_id"]), []).append(record)
    groups: list[HeldGroup] = []
    for run_id, rows in by_run.items():
        unreadable = any(r["unreadable"] for r in rows)
        until = None if unreadable else max(r["lease_until"] for r in rows)
        expired = until is None or until <= now
        gone = rows[0]["gone"] is True
        if not (gone or expired):
            continue
        types = {str(r["type"]) or "(empty)": int(r["n"]) for r in rows}
        groups.append(
            HeldGroup(
                run_id=run_id,
                count=sum(types.values()),
                lease_until=until,
                expired=expired,
                on_unknown={t: will_do(settings, t) for t in sorted(types)},
                by_type=dict(sorted(types.items())),
                host=str(rows[0]["host"] or "") if gone else "",
                pid=int(rows[0]["pid"]) if gone and rows[0]["pid"] is not None else None,
                unknown_types=[t for t in sorted(types) if settings.type_config(t).handler is None],
                kind=str(rows[0]["kind"] or "") if gone else "",
            )
        )
    return groups


@dataclass(frozen=True)
class Holder:
    """The gone run that holds a processing task: its id, kind, host, pid, the task's lease."""

    run_id: str
    kind: str
    host: str
    pid: int | None
    lease_until: datetime | None

    def who(self) -> str:
        """``worker worker_01… on host H (pid P)``."""
        pid = f" (pid {self.pid})" if self.pid is not None else ""
        return f"{self.kind or 'run'} {self.run_id} on host {self.host}{pid}"


def gone_holders(
    conn: psycopg.Connection[Any], queue: str, task_ids: list[str]
) -> dict[str, Holder]:
    """Of the named tasks, those ``processing`` under a run whose session is gone."""
    found: dict[str, Holder] = {}
    if not task_ids:
        return found
    for r in conn.execute(QUERIES["task_holder"], {"queue": queue, "ids": task_ids}):
        if r["gone"]:
            found[str(r["task_id"])] = Holder(
                str(r["lease_owner"]),
                str(r["kind"]),
                str(r["host"]),
                None if r["pid"] is None else int(r["pid"]),
                r["lease_until"],
            )
    return found


def show_line(holder: Holder, task_type: str, settings: Settings, now: datetime) -> str:
    """What ``sheetq show`` says of a task held by a gone run."""
    plan = will_do(settings, task_type)
    head = f"processing under {holder.who()}, whose session is gone"
    if holder.lease_until is None or holder.lease_until <= now:
        return f"{head}; its lease has ended: the next run recovers it per on_unknown ({plan})"
    return f"{head}; recovered per on_unknown ({plan}) at {format_ts(holder.lease_until)}"


def requeue_line(holder: Holder, task_type: str, settings: Settings, now: datetime) -> str:
    """Why ``requeue``/``skip`` leaves a task held by a gone run alone, and when it may."""
    plan = will_do(settings, task_type)
    head = f"its {holder.who()} is gone (its database session ended)"
    if holder.lease_until is None or holder.lease_until <= now:
        return (
            f"{head} and its lease has ended: the next `sheetq process` or worker recovers it "
            f"per on_unknown ({plan}); requeue it after that"
        )
    return (
        f"{head}, but its lease holds until {format_ts(holder.lease_until)} (it may still be "
        f"running the handler if only its connection was cut): then a run recovers it per "
        f"on_unknown ({plan}), and it can be requeued"
    )
