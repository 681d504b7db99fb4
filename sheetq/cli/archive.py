"""``sheetq archive``: move finished rows to QueueArchive (docs/design.md §8)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from sheetq.cli._flags import duration_flag
from sheetq.cli._output import echo, emit_json, warn

TASK_IDS_SHOWN = 1000  # at most this many task ids in the --json document

if TYPE_CHECKING:
    from sheetq.port import ArchiveReport

LOCK_WAIT = 30.0  # seconds to wait for a `process` run on this host to finish


def archive(
    older_than: Annotated[
        str | None,
        typer.Option(
            "--older-than",
            metavar="DURATION",
            help="Finished before this long ago (e.g. 30d; the default without --log-older-than).",
        ),
    ] = None,
    log_older_than: Annotated[
        str | None,
        typer.Option(
            "--log-older-than",
            metavar="DURATION",
            help="Also (or only) move QueueLog rows older than this to QueueLogArchive.",
        ),
    ] = None,
    include_failed: Annotated[
        bool, typer.Option("--include-failed", help="Also move failed rows.")
    ] = False,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Count; change nothing.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON document.")] = False,
) -> None:
    """Move finished rows to QueueArchive, atomically; their keys still deduplicate.

    Rows that are done or skipped (and failed, with --include-failed) and were last
    updated before the cutoff are moved whole, by column name, each with an `archived`
    QueueLog row. Very large archives go in several writes, each atomic; if one fails,
    run the command again to move the rest.

    Examples:

      sheetq archive --older-than 30d

      sheetq archive --older-than 7d --include-failed --dry-run

      sheetq archive --log-older-than 90d
    """
    from sheetq.cli.app import state
    from sheetq.times import format_ts

    if older_than is None and log_older_than is None:
        older_than = "30d"  # `sheetq archive` alone keeps its documented meaning
    seconds = None if older_than is None else duration_flag(older_than, "--older-than")
    log_seconds = (
        None if log_older_than is None else duration_flag(log_older_than, "--log-older-than")
    )
    from sheetq.wording import places

    where = places(state.settings())
    queue = state.queue()
    outcome = queue.archive(
        clock=state.clock(),
        older_than=seconds,
        log_older_than=log_seconds,
        include_failed=include_failed,
        dry_run=dry_run,
        lock_wait=LOCK_WAIT,
        on_wait=warn,
    )
    report, logs = outcome.report, outcome.logs
    if report is None:  # a `process` run on this host held the queue past LOCK_WAIT
        warn(
            f"a sheetq process run on this host holds this queue ({outcome.held_by}); "
            "nothing archived"
        )
        if as_json:
            emit_json({"archived": 0, "dry_run": False, "locked": True})
        return
    by_status = {s: report.by_status.get(s, 0) for s in ("done", "skipped", "failed")}
    if as_json:
        doc: dict[str, object] = {
            "archived": report.archived,
            "dry_run": dry_run,
            "by_status": by_status,
            "task_ids": report.task_ids[:TASK_IDS_SHOWN],
            "truncated": len(report.task_ids) > TASK_IDS_SHOWN,
            "cutoff": format_ts(report.cutoff),
            "writes": report.writes,
            "dropped_columns": sorted(report.dropped_columns),
            "left_in_queue": {
                "already_archived": report.already_archived,
                "ambiguous": report.ambiguous,
                "undated": report.undated,
            },
            "unalerted": report.unalerted,
            "vanished": report.vanished,
            "put_back": report.put_back,
            "locked": bool(report.locked),
        }
        if logs:
            doc["log_archived"] = logs[0].archived
            doc["log_writes"] = logs[0].writes
            doc["log_cutoff"] = format_ts(logs[0].cutoff)
            doc["log_stray"] = logs[0].stray
            doc["log_put_back"] = logs[0].put_back
        emit_json(doc)
    else:
        counts = ", ".join(f"{s}: {n}" for s, n in by_status.items())
        verb = "would archive" if dry_run else "archived"
        if seconds is not None:
            echo(f"{verb} {report.archived} rows ({counts})")
        if logs:
            verb = "would move" if dry_run else "moved"
            echo(f"{verb} {logs[0].archived} {where.log} row(s) to {where.log_archive}")
    if logs and logs[0].stray:
        kept = logs[0].stray - logs[0].put_back
        warn(
            f"{logs[0].stray} newer {where.log} row(s) were carried to {where.log_archive} "
            "too (rows moved while archive wrote); "
            + (
                f"put back at the end of {where.log}"
                if not kept
                else f"{logs[0].put_back} put back, {kept} kept there"
            )
        )
    _warnings(report, where.archive, where.queue)


def _warnings(report: ArchiveReport, archive_sheet: str, queue_sheet: str) -> None:
    if report.locked:
        warn(f"{report.locked}; nothing more archived, try again when it has finished")
    if report.dropped_columns:
        names = ", ".join(sorted(report.dropped_columns))
        verb = "would be" if report.dry_run else "were"
        warn(
            f"{archive_sheet} has no column(s) {names}: those cells of the archived rows "
            f"{verb} dropped (add the columns to {archive_sheet} to keep them)"
        )
    if report.already_archived:
        warn(
            f"{len(report.already_archived)} finished row(s) left in {queue_sheet}: their task "
            f"id is already in {archive_sheet} (e.g. {report.already_archived[0]}); remove "
            "one copy by hand"
        )
    if report.ambiguous:
        warn(
            f"{len(report.ambiguous)} task id(s) appear on more than one {queue_sheet} row "
            f"(e.g. {report.ambiguous[0]}); those rows were left alone"
        )
    if report.undated:
        warn(
            f"{len(report.undated)} finished row(s) have no readable updated_at or created_at "
            f"(e.g. {report.undated[0]}); left in {queue_sheet}"
        )
    if report.unalerted:
        verb = "would be" if report.dry_run else "were"
        warn(
            f"{len(report.unalerted)} failed row(s) {verb} archived before their alert was "
            f"sent (e.g. {report.unalerted[0]}): no alert follows them from {archive_sheet}; "
            "run `sheetq alert` before archiving to send it"
        )
    if report.vanished:
        warn(
            f"{len(report.vanished)} row(s) left {queue_sheet} while they were being archived "
            f"(deleted by a person or another archive run) and were not archived "
            f"(e.g. {report.vanished[0]})"
        )
    if report.put_back:
        warn(
            f"rows moved in {queue_sheet} while archive wrote: {len(report.put_back)} row(s) "
            f"it carried to {archive_sheet} by mistake were put back into {queue_sheet} "
            f"(e.g. {report.put_back[0]}), logged"
        )
