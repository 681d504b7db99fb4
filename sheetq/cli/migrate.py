"""``sheetq migrate --to postgresql://…``: copy a sheet or local queue into PostgreSQL
(docs/design.md §11 "Moving a queue")."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from sheetq.cli._output import echo, emit_json, warn
from sheetq.errors import EXIT_USAGE, ConfigError

if TYPE_CHECKING:
    from sheetq.migrate import Source, Written

REFUSALS_SHOWN = 20  # refused rows listed in the human summary (all of them in --json)


def migrate(
    to: Annotated[
        str,
        typer.Option(
            "--to",
            help="The PostgreSQL database to copy the queue into (postgresql://USER@HOST/DB).",
            show_default=False,
        ),
    ],
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON document.")] = False,
) -> None:
    """Copy the queue in the spreadsheet (or local: workbook) into PostgreSQL, history kept.

    Reads Queue, QueueLog, QueueArchive (and QueueLogArchive, if present) whole and copies
    every task with its id, key, status, attempts, lease, result, owner and alerted_at,
    and every log row, in one transaction; the schema is created first if needed. Running
    it again copies only what is not there yet. Refuses while a `sheetq process` run holds
    the sheet. A row with a cell that cannot be converted (unknown status, a time that is
    not a time, a payload that is not JSON) is not copied and is named; the rest is, and
    the exit code is 2. Then point SHEETQ_DATABASE_URL at the database.

    Examples:

      sheetq migrate --to postgresql://sheetq@db.example.com/sheetq

      SHEETQ_SPREADSHEET=local:sheetq.db sheetq migrate --to postgresql:///sheetq --json
    """
    from dataclasses import replace

    from sheetq.backends import open_queue, open_sheet
    from sheetq.cli.app import state
    from sheetq.config import check_database_url
    from sheetq.model import new_run_id

    to = to.strip()
    check_database_url(to, source="--to")
    settings = state.settings()
    if not settings.spreadsheet:
        raise ConfigError(
            "sheetq migrate copies from a spreadsheet: set SHEETQ_SPREADSHEET (or pass "
            "--spreadsheet) to the Google Sheets URL or key, or local:PATH, of the queue to move"
        )
    destination = state.keep(open_queue(replace(settings, database_url=to)))
    if settings.database_url and settings.database_url != to:
        named = open_queue(settings).where
        warn(
            f"SHEETQ_DATABASE_URL / --database-url names {named}; "
            f"migrate writes to --to, {destination.where}"
        )
    clock = state.clock()
    source = state.keep(open_sheet(settings)).export(clock=clock)
    written = destination.absorb(source, now=clock.now(), run_id=new_run_id("migrate"))
    if as_json:
        emit_json(document(source, written))
    else:
        _summary(source, written, destination.where, settings.queue_sheet)
    if source.refused:
        raise typer.Exit(EXIT_USAGE)


def document(source: Source, written: Written) -> dict[str, object]:
    """The ``--json`` document (docs/postgresql.md "Moving a queue to PostgreSQL")."""
    return {
        "copied": written.copied.as_json(),
        "already_present": written.already_present.as_json(),
        "refused": [r.as_json() for r in source.refused],
        "duplicates": [d.as_json() for d in written.keys.duplicates],
    }


def _summary(source: Source, written: Written, where: str, queue: str) -> None:
    for line in written.schema_lines:
        warn(line)
    c, p = written.copied, written.already_present
    echo(f"migrated queue {queue!r} into PostgreSQL {where}:")
    echo(f"  tasks:            {c.tasks} copied, {p.tasks} already present")
    echo(f"  archived tasks:   {c.archive} copied, {p.archive} already present")
    echo(f"  log rows:         {c.log} copied, {p.log} already present")
    echo(f"  archived log:     {c.log_archive} copied, {p.log_archive} already present")
    for d in written.keys.duplicates:
        change = f"{d.was} → {d.now}" if d.was != d.now else f"kept {d.now}"
        echo(f"  duplicate key {d.key!r}: {d.task_id} loses to {d.winner} ({change})")
    if source.refused:
        echo(f"  refused: {len(source.refused)} row(s) not copied; fix them and run again:")
        for r in source.refused[:REFUSALS_SHOWN]:
            who = f"{r.task_id} " if r.task_id else ""
            echo(f"    {r.worksheet} row {r.row}: {who}{r.column} {r.value!r}: {r.reason}")
        if len(source.refused) > REFUSALS_SHOWN:
            echo(f"    … and {len(source.refused) - REFUSALS_SHOWN} more (see --json)")
