"""``requeue``, ``skip`` and ``archive`` on PostgreSQL, as set-based statements
(``queries/manage.sql``; docs/design.md §8, §11).

Each change is one statement in one transaction: it selects and locks the matching rows,
changes them and writes their log rows together, so a task is changed with its log row or
not at all, and a task a worker claimed meanwhile is re-checked under its row lock and left
alone. Nothing here reads a whole table or numbers rows: the filters are the statements'
``WHERE``, the same rules as the sheet engine's planning (``sheetq.sheet.operations``,
``sheetq.sheet.archive``) applied to typed columns (a type or an error class compared as
Python strips it, ``reports.WS``).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

import psycopg

from sheetq.model import MAX_ERROR_CHARS, Status, new_run_id
from sheetq.port import (
    ArchiveReport,
    ChangeReport,
    LogArchiveReport,
    TaskState,
)
from sheetq.postgres import presence
from sheetq.postgres.codec import from_db
from sheetq.postgres.queries import QUERIES
from sheetq.postgres.reports import WS
from sheetq.postgres.session import Session, pretend
from sheetq.redact import printable, shorten

FINISHED = ("done", "skipped")  # archived by `sheetq archive`; failed too with --include-failed


def stamp(conn: psycopg.Connection[Any], now: datetime) -> datetime:
    """The moment this command stamps, read in the caller's transaction: ``now`` when
    pretended (``SHEETQ_NOW``), else the server's clock (``session.pretend``), to the
    second."""
    row = conn.execute(QUERIES["clock"], {"at": pretend(now)}).fetchone()
    assert row is not None
    moment: datetime = row["now"]
    return moment


def whole_second_after(moment: datetime) -> datetime:
    """The first whole second not before ``moment``: ``t < result`` exactly when ``t`` read
    to the second (as a time cell is) is before ``moment``."""
    whole = moment.replace(microsecond=0)
    return whole if whole == moment else whole + timedelta(seconds=1)


def _state(record: Any) -> TaskState:
    status = str(record["status"])
    return TaskState(
        task_id=str(record["task_id"]),
        type=str(record["type"]),
        status=Status.parse(status),
        status_text=status,
        retry_count=int(record["retry_count"]),
        error_class=str(record["error_class"]),
        lease_owner=str(record.get("lease_owner") or ""),
        lease_until=str(from_db("lease_until", record.get("lease_until"))),
    )


def _change(
    session: Session, query: str, params: dict[str, Any], task_ids: Sequence[str], now: datetime
) -> ChangeReport:
    """Run one change statement (``requeue``/``skip``) and read the named tasks it left
    alone, in one transaction."""
    named = sorted(set(task_ids))
    with session.transaction() as conn:
        params = params | {"queue": session.queue, "now": stamp(conn, now), "ws": WS}
        picked = [_state(r) for r in conn.execute(QUERIES[query], params).fetchall()]
        states = (
            [_state(r) for r in conn.execute(
                QUERIES["task_states"], {"queue": session.queue, "ids": named, "ws": WS}
            ).fetchall()]
            if named
            else []
        )  # fmt: skip
        holders = presence.gone_holders(
            conn, session.queue, [s.task_id for s in states if s.status is Status.PROCESSING]
        )
        moment = params["now"]
    for state in states:
        holder = holders.get(state.task_id)
        if holder is not None:
            state.held = presence.requeue_line(holder, state.type, session.settings, moment)
    by_id = {s.task_id: s for s in states}
    chosen = {s.task_id for s in picked}
    unknown = [i for i in named if i not in by_id and i not in chosen]
    refused = [i for i in named if i in by_id and i not in chosen]
    return ChangeReport(picked, unknown, refused, by_id)


def requeue(
    session: Session,
    *,
    now: datetime,
    task_ids: Sequence[str],
    statuses: Sequence[Status],
    types: Sequence[str],
    error_classes: Sequence[str],
    reset_attempts: bool,
    dry_run: bool,
    priority: int | None = None,
) -> ChangeReport:
    """Matching tasks back to ``pending`` (the dead-letter redrive), each logged
    ``requeued``; with ``task_ids`` the filters apply to those tasks only; a
    ``processing`` task is never taken from its run. ``dry_run``: change nothing;
    ``priority``: their new priority (``None``: kept)."""
    params = {
        "ids": list(task_ids),
        "statuses": [str(s) for s in statuses],
        "types": list(types),
        "classes": list(error_classes),
        "reset": reset_attempts,
        "priority": priority,
        "dry": dry_run,
        "run_id": new_run_id("requeue"),
    }
    return _change(session, "requeue", params, task_ids, now)


def skip(
    session: Session, *, now: datetime, task_ids: Sequence[str], reason: str, dry_run: bool
) -> ChangeReport:
    """The named waiting or failed tasks to ``skipped``, each logged with ``reason``."""
    message = f"skipped with `sheetq skip`{': ' + reason if reason else ''}"
    params = {
        "ids": list(task_ids),
        "dry": dry_run,
        "run_id": new_run_id("skip"),
        "message": shorten(printable(message), MAX_ERROR_CHARS),
        "error": shorten(message, 500),
    }
    return _change(session, "skip", params, task_ids, now)


def archive(
    session: Session,
    *,
    now: datetime,
    older_than: float,
    include_failed: bool,
    dry_run: bool,
) -> ArchiveReport:
    """Move the finished tasks (done, skipped; failed with ``include_failed``) last
    changed more than ``older_than`` seconds ago to the archive, in one transaction."""
    statuses = [*FINISHED, "failed"] if include_failed else list(FINISHED)
    with session.transaction() as conn:
        moment = stamp(conn, now)
        report = ArchiveReport(dry_run, moment - timedelta(seconds=older_than))
        found = conn.execute(
            QUERIES["archive_tasks"],
            {
                "queue": session.queue,
                "now": moment,
                "before": whole_second_after(report.cutoff),
                "statuses": statuses,
                "dry": dry_run,
                "run_id": new_run_id("archive"),
                "message": f"moved to {session.settings.archive_sheet}",
            },
        ).fetchall()
    for record in found:
        if record["already"]:
            report.already_archived.append(str(record["task_id"]))
            continue
        if record["owed"]:
            report.unalerted.append(str(record["task_id"]))
        report.by_status[str(record["status"])] += 1
        report.task_ids.append(str(record["task_id"]))
    if report.task_ids and not dry_run:
        report.writes = 1
    return report


def archive_log(
    session: Session, *, now: datetime, older_than: float, dry_run: bool
) -> LogArchiveReport:
    """Move the log rows stamped more than ``older_than`` seconds ago to the log archive,
    in one transaction (a table has no order a person could break: every old row moves)."""
    with session.transaction() as conn:
        moment = stamp(conn, now)
        report = LogArchiveReport(moment - timedelta(seconds=older_than), dry_run)
        row = conn.execute(
            QUERIES["archive_log"],
            {"queue": session.queue, "before": whole_second_after(report.cutoff), "dry": dry_run},
        ).fetchone()
    report.archived = int(row["n"]) if row else 0
    if report.archived and not dry_run:
        report.writes = 1
    return report
