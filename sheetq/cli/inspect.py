"""``sheetq status``, ``list`` and ``show``: read-only views of the queue."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from sheetq.cli._output import echo, emit_json, table, warn
from sheetq.errors import UsageError
from sheetq.redact import terminal_safe
from sheetq.wording import places

STATUS_ORDER = ("pending", "processing", "retry", "done", "failed", "skipped")


def status(
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON document.")] = False,
) -> None:
    """Counts by status × type, oldest waiting age, due retries, owed alerts, and rows held
    by a run that is gone (crashed or killed): when and how the next run recovers them.

    Examples:

      sheetq status

      sheetq status --json | jq .counts.failed
    """
    from sheetq.cli.app import state
    from sheetq.times import format_duration, format_ts, zone

    settings = state.settings()
    clock = state.clock()
    report = state.queue().status(clock=clock)
    tally, gone, now, cells = report.tally, report.gone, report.now, report.cells
    counts, by_type, strange, oldest = tally.counts, tally.by_type, tally.strange, tally.oldest
    due, owed, without_handler = tally.due, tally.owed, tally.without_handler
    unrecognised, unparseable = tally.unrecognised, tally.unparseable
    if unparseable:
        warn(
            f"{len(unparseable)} waiting row(s) have an unparseable next_retry_at, counted as "
            f"due (docs/design.md §2): {', '.join(unparseable[:5])}"
            + (" …" if len(unparseable) > 5 else "")
        )
    for note in report.notes:  # a state typed into the Connectors worksheet sheetq ignores
        warn(terminal_safe(note))
    tz = zone(report.time_zone)
    if cells is not None and cells.warn:
        full_when = (
            f"at the rate of the last 7 days it is full around {format_ts(cells.full_at)}"
            if cells.full_at is not None
            else "no tasks were enqueued in the last 7 days"
        )
        warn(
            f"the spreadsheet uses {cells.used:,} of Google's {cells.limit:,} cells "
            f"({cells.percent}%); {full_when}. Run `sheetq archive` (and `--log-older-than`), "
            "then move QueueArchive/QueueLogArchive to another spreadsheet"
        )
    from sheetq.mirror_run import mirror_status, mirror_status_line

    mirror = mirror_status(settings, now)  # None without a mirror (docs/design.md §12)
    if as_json:
        emit_json(
            {
                **({"mirror": mirror} if mirror is not None else {}),
                "counts": {s: counts.get(s, 0) for s in STATUS_ORDER},
                "by_type": {
                    t: {s: c.get(s, 0) for s in STATUS_ORDER}
                    | ({"unrecognised": strange[t]} if strange.get(t) else {})
                    for t, c in sorted(by_type.items())
                },
                "oldest_waiting_seconds": None if oldest is None else round(oldest),
                "due_retries": due,
                "owed_alerts": owed,
                "unrecognised": unrecognised,
                "without_handler": without_handler,
                "total": tally.total,
                "unparseable_next_retry_at": [u.split(" ", 1)[0] for u in unparseable],
                "blocked_groups": [b.as_json() for b in tally.blocked],
                "oldest_due_by_priority": [
                    {
                        "priority": p.priority,
                        "due": p.due,
                        "task_id": p.task_id,
                        "oldest_due_seconds": round(p.oldest),
                    }
                    for p in tally.by_priority
                ],
                "unreadable_priorities": [
                    {"task_id": i, "priority": text, "runs_at": level}
                    for i, text, level in tally.bad_priorities
                ],
                "held_by_gone_runs": [g.as_json(tz) for g in gone],
                "connectors": [v.as_json() for v in report.connectors],
                "cells": None
                if cells is None
                else {
                    "used": cells.used,
                    "limit": cells.limit,
                    "percent": cells.percent,
                    "full_at": None if cells.full_at is None else format_ts(cells.full_at),
                },
            }
        )
        return
    # Every row is counted, so the total is the JSON "total": a status a person typed that
    # sheetq does not know gets its own column.
    extra = ["unrecognised"] if unrecognised else []
    body = [
        [t]
        + [c.get(s, 0) or "" for s in STATUS_ORDER]
        + ([strange.get(t, 0) or ""] if extra else [])
        + [sum(c.values()) + strange.get(t, 0)]
        for t, c in sorted(by_type.items())
    ]
    body.append(
        ["all"]
        + [counts.get(s, 0) for s in STATUS_ORDER]
        + ([unrecognised] if extra else [])
        + [tally.total]
    )
    table(
        f"{settings.queue_sheet} in {report.title}",
        ["type", *STATUS_ORDER, *extra, "total"],
        body,
        justify_right=tuple(range(1, len(STATUS_ORDER) + len(extra) + 2)),
    )
    facts = [
        f"oldest waiting: {format_duration(oldest) if oldest is not None else '-'}",
        f"due retries: {due}",
        f"failed not yet alerted: {owed}",
    ]
    if unrecognised:
        facts.append(f"unrecognised statuses: {unrecognised}")
    if without_handler:
        facts.append(f"waiting without a handler: {without_handler}")
    echo("; ".join(facts))
    if len(tally.by_priority) > 1 or (tally.by_priority and tally.by_priority[0].priority):
        echo(
            "due by priority: "
            + "; ".join(
                f"{p.priority}: {p.due}, oldest {p.task_id} due {format_duration(p.oldest)}"
                for p in tally.by_priority
            )
        )
    for b in tally.blocked:
        since = f", the oldest due {format_duration(b.oldest)}" if b.oldest is not None else ""
        echo(
            f"group {terminal_safe(b.group)!r} blocked by {b.task_id} ({b.type}, {b.status}"
            + (f", {b.error_class}" if b.error_class else "")
            + f"): {b.waiting} waiting{since}; `sheetq requeue --task {b.task_id}` or "
            f"`sheetq skip --task {b.task_id}` lets it go on"
        )
    if tally.bad_priorities:
        shown = ", ".join(
            f"{i} ({terminal_safe(repr(text))}: runs at {level})"
            for i, text, level in tally.bad_priorities[:5]
        )
        more = len(tally.bad_priorities) - 5
        echo(
            f"priority cells that are not integers, run at their type's priority: {shown}"
            + (f" and {more} more" if more > 0 else "")
        )
    for group in gone:
        echo(group.line(tz))
    if report.connectors:
        from sheetq.cli.connector import line

        for view in report.connectors:
            echo(line(view))
    if mirror is not None:
        echo(mirror_status_line(mirror))


def _row_doc(row: Any, positions: bool = True) -> dict[str, Any]:
    """A row as ``list``/``show`` print it: ``row`` is its sheet row, ``None`` on PostgreSQL
    (a database row has no sheet position, docs/design.md §11); then its cells by column."""
    doc: dict[str, Any] = {"row": row.number if positions else None}
    doc.update(
        {k: ("" if v is None else v) for k, v in row.values.items() if not k.startswith("_")}
    )
    return doc


def list_rows(
    status_filter: Annotated[
        list[str] | None,
        typer.Option(
            "--status", "-s", metavar="STATUS", help="Only rows with this status (repeatable)."
        ),
    ] = None,
    types: Annotated[
        list[str] | None,
        typer.Option("--type", "-t", metavar="TYPE", help="Only rows of this type (repeatable)."),
    ] = None,
    limit: Annotated[
        int, typer.Option("--limit", min=0, help="At most this many rows (0: all).")
    ] = 50,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON document.")] = False,
) -> None:
    """The matching Queue rows, in sheet order.

    Examples:

      sheetq list --status failed

      sheetq list --type lead --status retry --json
    """
    from sheetq.cli.app import state
    from sheetq.model import Status

    wanted = set()
    for value in status_filter or ():
        parsed = Status.parse(value)
        if parsed is None:
            raise UsageError(f"--status {value!r}: expected one of {', '.join(STATUS_ORDER)}")
        wanted.add(parsed)
    queue = state.queue()
    picked = queue.list_rows(statuses=wanted, types=types or [], limit=limit)
    positions = queue.positions
    if as_json:
        emit_json({"rows": [_row_doc(r, positions) for r in picked]})
        return
    columns = [
        "task_id",
        "type",
        "status",
        "retry_count",
        "next_retry_at",
        "error_class",
        "last_error",
        "created_at",
    ]
    if positions:
        table(
            "",
            ["row", *columns],
            [[r.number] + [_short(r.text(c), 60) for c in columns] for r in picked],
            justify_right=(0, 4),
        )
    else:  # PostgreSQL: no sheet rows to point at
        table(
            "",
            columns,
            [[_short(r.text(c), 60) for c in columns] for r in picked],
            justify_right=(3,),
        )
    echo(f"{len(picked)} row(s)")


def _short(text: str, width: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


def show(
    task_id: Annotated[str, typer.Argument(help="The task id (t_…).")],
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON document.")] = False,
) -> None:
    """One task's row (in Queue or QueueArchive) and its QueueLog history.

    Example:

      sheetq show t_01JDF3K4Z8Q9W2E5R7T1Y3U6I0
    """
    from sheetq.cli.app import state

    settings = state.settings()
    queue = state.queue()
    report = queue.show(task_id)
    positions = queue.positions
    found, history = report.found, report.history
    where = places(settings)
    if not found and not history:
        logs = f"{where.log} or {where.log_archive}" if where.on_postgres else where.log
        raise UsageError(f"no task {task_id!r} in {where.queue}, {where.archive} or {logs}")
    if as_json:
        rows = []
        for sheet, row in found:
            doc = _row_doc(row, positions)
            if sheet != settings.queue_sheet:
                doc["worksheet"] = sheet
            rows.append(doc)
        log = [_row_doc(r, positions) for r in history]
        for doc in log[: report.log_archived]:
            doc["worksheet"] = settings.log_archive_sheet
        shown: dict[str, object] = {"rows": rows, "log": log}
        if report.held:
            shown["held"] = report.held
        emit_json(shown)
        return
    for sheet, row in found:
        table(
            f"{task_id} — {sheet} row {row.number}"
            if positions
            else f"{task_id} — {where.name(sheet, settings)}",
            ["column", "value"],
            [[k, "" if v is None else v] for k, v in row.values.items() if not k.startswith("_")],
        )
    if report.held:
        warn(terminal_safe(f"{task_id}: {report.held}"))
    if not found:
        gone = (
            "only its history is left" if where.on_postgres else "a person may have deleted the row"
        )
        echo(terminal_safe(f"{task_id}: not in {where.queue} ({gone})"))
    table(
        "history",
        ["ts", "event", "status", "retry_count", "duration_ms", "message"],
        [
            [
                r.text("ts"),
                r.text("event"),
                r.text("status"),
                r.text("retry_count"),
                r.text("duration_ms"),
                r.text("message"),
            ]
            for r in history
        ],
    )
