"""``sheetq init``, ``requeue`` and ``skip``: setting up and steering the queue."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Annotated

import typer

from sheetq.cli._output import echo, emit_json, table, warn
from sheetq.errors import UsageError
from sheetq.wording import places

if TYPE_CHECKING:
    from sheetq.config import Settings
    from sheetq.model import Status
    from sheetq.port import ChangeReport, TaskState


def init(
    fmt: Annotated[
        bool,
        typer.Option(
            "--format/--no-format",
            help="Freeze the header, add the status drop-down, colours and "
            "protection (Google only).",
        ),
    ] = True,
    dashboard: Annotated[
        bool,
        typer.Option(
            "--dashboard", help="Also build a Dashboard worksheet of live formulas (Google)."
        ),
    ] = False,
) -> None:
    """Create or adopt the Queue, QueueLog and QueueArchive worksheets. Never destroys data.

    Missing columns are added at the end; a sheet in the original nine-column layout is
    adopted (payload_hash, and where empty idempotency_key, created_at and task_id, are
    filled so old rows deduplicate like new ones). A manager's own columns are kept.

    Examples:

      SHEETQ_SPREADSHEET=local:sheetq.db sheetq init

      sheetq init --dashboard
    """
    from sheetq.cli.app import state

    state.queue(create=True).init(fmt=fmt, dashboard=dashboard, clock=state.clock(), say=echo)


def requeue(
    task_ids: Annotated[
        list[str] | None, typer.Option("--task", metavar="ID", help="This task (repeatable).")
    ] = None,
    statuses: Annotated[
        list[str] | None,
        typer.Option(
            "--status", metavar="STATUS", help="Rows with this status (repeatable; default failed)."
        ),
    ] = None,
    types: Annotated[
        list[str] | None,
        typer.Option("--type", "-t", metavar="TYPE", help="Only this type (repeatable)."),
    ] = None,
    error_classes: Annotated[
        list[str] | None,
        typer.Option("--error-class", metavar="CLASS", help="Only this error class (repeatable)."),
    ] = None,
    reset_attempts: Annotated[
        bool, typer.Option("--reset-attempts", help="Start counting attempts from zero again.")
    ] = False,
    priority: Annotated[
        str | None,
        typer.Option(
            "--priority",
            help="Give them this priority (an integer, higher runs first).",
            show_default=False,
        ),
    ] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="List; change nothing.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON document.")] = False,
) -> None:
    """Send rows back to pending: the dead-letter redrive. Each is logged as requeued.

    Examples:

      sheetq requeue --type lead --error-class auth

      sheetq requeue --task t_01JDF3K4Z8Q9W2E5R7T1Y3U6I0 --reset-attempts

      sheetq requeue --task t_01JDF3K4Z8Q9W2E5R7T1Y3U6I0 --priority 10
    """
    from sheetq.accept import check_priority
    from sheetq.cli.app import state
    from sheetq.model import ErrorClass, Status

    level = None if priority is None else check_priority(priority)

    wanted: list[Status] = _statuses(statuses) if statuses else [Status.FAILED]
    for value in error_classes or ():
        if value not in {e.value for e in ErrorClass}:
            raise UsageError(
                f"--error-class {value!r}: expected one of {', '.join(e.value for e in ErrorClass)}"
            )
    report = state.queue().requeue(
        task_ids=task_ids or (),
        statuses=wanted,
        types=types or (),
        error_classes=error_classes or (),
        reset_attempts=reset_attempts,
        dry_run=dry_run,
        clock=state.clock(),
        priority=level,
    )
    _report(
        "requeue",
        report,
        task_ids=task_ids or (),
        dry_run=dry_run,
        as_json=as_json,
        why=lambda row: _why_not_requeued(row, wanted, types or (), error_classes or ()),
    )


def skip(
    task_ids: Annotated[
        list[str], typer.Option("--task", metavar="ID", help="This task (repeatable).")
    ],
    reason: Annotated[str, typer.Option("--reason", help="Why, for the log.")] = "",
    dry_run: Annotated[bool, typer.Option("--dry-run", help="List; change nothing.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON document.")] = False,
) -> None:
    """Mark tasks skipped: they will not run. Logged with the reason.

    Example:

      sheetq skip --task t_01JDF3K4Z8Q9W2E5R7T1Y3U6I0 --reason "customer called, done by hand"
    """
    from sheetq.cli.app import state

    report = state.queue().skip(
        task_ids=task_ids, reason=reason, dry_run=dry_run, clock=state.clock()
    )
    _report(
        "skip",
        report,
        task_ids=task_ids,
        dry_run=dry_run,
        as_json=as_json,
        why=_why_not_skipped,
    )


def _held(row: TaskState) -> str:
    if row.held:
        return row.held
    until = row.lease_until or "unknown"
    return (
        f"a run is working on it (lease_owner {row.lease_owner or '?'}, lease until {until}); "
        "a task is never taken from its runner: wait, or after a crash let the next "
        "`sheetq process` recover it"
    )


def _status_words(row: TaskState) -> str:
    text = row.status_text.strip()
    if row.status is None:
        return f"its status {text!r} is not one sheetq knows" if text else "its status is empty"
    return f"it is {row.status}"


def _why_not_requeued(
    row: TaskState, statuses: list[Status], types: Sequence[str], error_classes: Sequence[str]
) -> str:
    """Why ``requeue`` left this named task alone, in words a person can act on."""
    from sheetq.model import Status

    if row.status is Status.PROCESSING:
        return _held(row)
    if row.status not in statuses:
        asked = ", ".join(str(s) for s in statuses)
        hint = f"; add --status {row.status} to requeue it anyway" if row.status else ""
        return f"{_status_words(row)}, and requeue takes {asked} rows{hint}"
    if types and row.type not in types:
        return f"its type is {row.type!r}, not {', '.join(types)} (--type)"
    if error_classes and row.error_class not in error_classes:
        return (
            f"its error class is {row.error_class or 'empty'!r}, not "
            f"{', '.join(error_classes)} (--error-class)"
        )
    return "it did not match the filters"


ARCHIVE_LOOKUPS = 3  # unknown task ids looked up in the archive (a read each on Google)


def _missing(task_id: str, settings: Settings, *, look: bool) -> str:
    """Why a named task is not in the queue: archived (``sheetq show`` finds it in the
    archive; only ``look``ed up for the first few), or no such task."""
    from sheetq.cli.app import state

    where = places(settings)
    if look:
        found = state.queue().show(task_id).found
        if found and all(sheet != settings.queue_sheet for sheet, _ in found):
            return (
                f"archived (in {where.archive}); requeue and skip change tasks in "
                f"{where.queue} only (`sheetq show {task_id}` shows it)"
            )
    return f"no such task in {where.queue}"


def _why_not_skipped(row: TaskState) -> str:
    """Why ``skip`` left this named task alone."""
    from sheetq.model import Status

    if row.status is Status.PROCESSING:
        return _held(row)
    if row.status in (Status.DONE, Status.SKIPPED):
        return f"it is already {row.status}; only pending, retry or failed tasks can be skipped"
    return f"{_status_words(row)}; only pending, retry or failed tasks can be skipped"


def _statuses(values: list[str]) -> list[Status]:
    from sheetq.model import Status

    out = []
    for value in values:
        parsed = Status.parse(value)
        if parsed is None:
            raise UsageError(
                f"--status {value!r}: expected one of {', '.join(s.value for s in Status)}"
            )
        out.append(parsed)
    return out


def _report(
    verb: str,
    report: ChangeReport,
    *,
    task_ids: Sequence[str],
    dry_run: bool,
    as_json: bool,
    why: Callable[[TaskState], str],
) -> None:
    """Report a change to named or filtered rows. Named tasks that were not changed are
    reported one by one with the reason; if none of them was, exit 2."""
    from sheetq.cli.app import state

    settings = state.settings()
    picked, unknown, refused = report.picked, report.unknown, report.refused
    done_word = {"requeue": "requeued", "skip": "skipped"}[verb]
    if as_json:
        emit_json(
            {
                done_word: len(picked),
                "dry_run": dry_run,
                "task_ids": [r.task_id for r in picked],
                "not_found": unknown,
                "refused": refused,
            }
        )
    else:
        if picked:
            table(
                "",
                ["task_id", "type", "was", "retry_count", "error_class"],  # status before
                [[r.task_id, r.type, r.status_text, r.retry_count, r.error_class] for r in picked],
            )
        if picked or not task_ids:  # a refusal of every named task is said on stderr alone
            echo(f"{'would be ' if dry_run else ''}{done_word}: {len(picked)}")
    for index, task_id in enumerate(unknown):
        warn(f"{task_id}: {_missing(task_id, settings, look=index < ARCHIVE_LOOKUPS)}")
    for task_id in refused:
        warn(f"{task_id}: not {done_word}: {why(report.by_id[task_id])}")
    if task_ids and not picked:  # asked to act on named tasks, acted on none: a refusal
        raise typer.Exit(2)
