"""``sheetq process``: claim batches and run them (docs/design.md §5). Called from cron."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Annotated

import typer

from sheetq.cli._flags import duration_flag
from sheetq.cli._output import echo, emit_json, err, stdout_kept_for_sheetq, warn
from sheetq.errors import Interrupted, UsageError
from sheetq.summary import interrupted_json

if TYPE_CHECKING:
    from sheetq.config import Settings


def process(
    batch_size: Annotated[
        int | None,
        typer.Option(
            "--batch-size",
            "-n",
            min=1,
            max=1000,
            help="Tasks claimed per batch (default 10, or [queue].batch_size).",
        ),
    ] = None,
    max_batches: Annotated[
        int | None,
        typer.Option("--max-batches", min=1, help="Stop after this many batches (default 1)."),
    ] = None,
    until_empty: Annotated[
        bool, typer.Option("--until-empty", help="Keep claiming batches until nothing is due.")
    ] = False,
    max_runtime: Annotated[
        str | None,
        typer.Option(
            "--max-runtime",
            metavar="DURATION",
            help="Claim no new batch after this long (e.g. 50s for a per-minute "
            "cron); unstarted tasks are released.",
        ),
    ] = None,
    types: Annotated[
        list[str] | None,
        typer.Option("--type", "-t", metavar="TYPE", help="Only these task types (repeatable)."),
    ] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Show what would be claimed; change nothing.")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON document.")] = False,
    quiet: Annotated[
        bool, typer.Option("--quiet", "-q", help="Print nothing unless the run itself breaks.")
    ] = False,
) -> None:
    """Claim due tasks oldest-first, run their handlers, record results and alert failures.

    Exit 0 when the run completed, even if tasks failed (a failed task is data, visible in
    the sheet and alerted); exit 1 when the run itself broke. Another run holding the queue:
    one line, exit 0. Stopped by SIGINT/SIGTERM: exit 130/143, and --json still prints
    what was done, with "interrupted".

    Examples:

      sheetq process

      sheetq process --until-empty --max-runtime 50s -q

      sheetq process --type lead --batch-size 50 --json
    """
    from sheetq.cli.app import state
    from sheetq.summary import RunOptions, summary_line

    if until_empty and max_batches is not None:
        raise UsageError("give --max-batches or --until-empty, not both")
    runtime = None
    if max_runtime is not None:
        runtime = duration_flag(max_runtime, "--max-runtime")
    quiet = quiet or state.quiet
    settings = state.settings()
    _check_types(types or (), settings)
    options = RunOptions(
        batch_size=batch_size or settings.batch_size,
        max_batches=None if until_empty else (max_batches or 1),
        max_runtime=runtime,
        types=tuple(types or ()),
        dry_run=dry_run,
    )
    notifier = None
    if not dry_run and settings.telegram.enabled:
        from sheetq.alerts import make_notifier

        notifier = make_notifier(settings, verbose=state.verbose)
    queue = state.queue()
    show_progress = not (as_json or quiet) and err().is_terminal
    try:
        with stdout_kept_for_sheetq():
            summary = queue.run(
                options,
                clock=state.clock(),
                rng=state.rng(),
                notifier=notifier,
                on_progress=(lambda msg: err().print(f"[dim]running {msg}[/dim]"))
                if show_progress
                else None,
            )
    except Interrupted as exc:  # SIGINT/SIGTERM: --json still says what was done
        if as_json and exc.summary is not None:
            emit_json(interrupted_json(exc))
        raise
    undelivered = notifier is not None and summary.alerts_owed > 0
    if not quiet or undelivered:  # -q still reports alerts Telegram did not take
        for note in summary.notes:
            warn(note)
    if not quiet and not dry_run and not settings.telegram.enabled and not summary.locked:
        missing = "TELEGRAM_BOT_TOKEN" if not settings.telegram.token else "TELEGRAM_CHAT_ID"
        from sheetq.wording import places

        owed_in = places(settings).store
        warn(f"alerts are off: {missing} is not set; failed rows stay owed in {owed_in}")
    if as_json:
        emit_json(summary.as_json())
        return
    if quiet:
        return
    if dry_run:
        from sheetq.cli._output import table

        if summary.locked:
            echo(summary_line(summary))
            return
        rows = [
            (w["task_id"], w["type"], w["status"], w["attempt"], w["row"] or "")
            for w in summary.would_claim
        ]
        table(
            "would claim (dry run, nothing changed)",
            ["task_id", "type", "status", "attempt", "row"],
            rows,
            justify_right=(3, 4),
        )
        extra = [
            f"{n} {k}"
            for k, n in (
                ("recovered", summary.recovered),
                ("expired", summary.expired),
                ("requeued", summary.requeued),
                ("skipped as duplicates", summary.skipped),
            )
            if n
        ]
        waiting = sum(summary.without_handler.values())
        if waiting:
            extra.append(f"{waiting} waiting without handler")
        echo(f"{len(rows)} would be claimed" + (f"; also {', '.join(extra)}" if extra else ""))
        return
    echo(summary_line(summary))


def _check_types(types: Sequence[str], settings: Settings) -> None:
    """``--type`` names that have no handler: a warning each; exit 2 if none of them has one
    (a typo would otherwise make a silent run that does nothing)."""
    import difflib

    configured = sorted(t for t, c in settings.types.items() if c.handler is not None)
    missing = [t for t in dict.fromkeys(types) if t not in configured]
    where = settings.config_path or "sheetq.toml (none found)"
    lines = []
    for name in missing:
        close = difflib.get_close_matches(name, configured, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        lines.append(f"--type {name!r}: no handler is configured for this type in {where}{hint}")
    if types and len(missing) == len(set(types)):  # nothing to run: one error, no warnings
        known = ", ".join(configured) or "none"
        if len(lines) == 1:
            raise UsageError(f"{lines[0]}; configured types: {known}")
        raise UsageError(f"no given --type has a handler (configured types: {known})")
    for line in lines:
        warn(line)
