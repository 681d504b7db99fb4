"""``sheetq mirror``: one pass of the mirror of a PostgreSQL queue (docs/design.md §12)."""

from __future__ import annotations

from typing import Annotated

import typer

from sheetq.cli._output import echo, emit_json, warn
from sheetq.errors import StoreError


def mirror(
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON document.")] = False,
) -> None:
    """Project the PostgreSQL queue into the spreadsheet, and take managers' edits back.

    Needs both SHEETQ_DATABASE_URL (the queue) and SHEETQ_SPREADSHEET (its mirror). Writes
    every open task and the finished ones of the last `[mirror] keep_finished` (default 7d)
    into the Queue worksheet, appends new log rows to QueueLog and removes rows that left
    the window: 1 Sheets request when nothing changed, 2 otherwise. `pending`/`retry` typed
    over a failed or skipped row requeues the task; a changed owner is saved (its
    updated_at changes, no QueueLog row; one stderr line each with -v); anything else
    typed into sheetq's columns is put back (one line on stderr per row). Exit 1 when
    Google fails or does not answer within `[mirror] interval` (at most 60s): one line,
    the queue untouched; the next pass catches up.

    Examples:

      sheetq mirror

      * * * * * sheetq mirror -q        # from cron, when no `sheetq worker` mirrors
    """
    from sheetq.cli.app import state
    from sheetq.mirror_run import mirror_pass, require_mirror

    settings = state.settings()
    require_mirror(settings)
    try:
        report = mirror_pass(settings, state.clock(), rng=state.rng())
    except StoreError as exc:  # one line: what, why, when it retries (docs/design.md §12)
        raise StoreError(f"mirror: {exc.message}; the next pass retries") from None
    for line in report.initialised:
        warn(line)
    for line in report.warnings:
        warn(line)
    if state.verbose:
        for line in report.owner_lines:
            warn(line)
    if report.conflict:
        warn(report.conflict)
    if as_json:
        emit_json(report.as_json())
    elif not state.quiet:
        echo(report.line())
