"""``sheetq stats``: numbers from QueueLog (docs/design.md §8)."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Annotated

import typer

from sheetq.cli._output import echo, emit_json, out, table, warn
from sheetq.errors import UsageError

if TYPE_CHECKING:
    from sheetq.stats import Stats


def stats(
    since: Annotated[
        str,
        typer.Option(
            "--since", metavar="DURATION|TIME", help="Window: a duration (24h, 7d) or an ISO time."
        ),
    ] = "24h",
    types: Annotated[
        list[str] | None, typer.Option("--type", "-t", metavar="TYPE", help="Only this type.")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON document.")] = False,
) -> None:
    """Throughput and failure numbers from QueueLog.

    Enqueued, duplicates suppressed, conflicts, done, retries, failed (dead-letter rate),
    success rate, p50/p95 time from enqueue to done, oldest waiting age, and failures by
    error class. An ISO time without an offset is UTC.

    Examples:

      sheetq stats --since 7d

      sheetq stats --since 2026-01-01T00:00:00Z --type lead --json
    """
    from sheetq.cli.app import state

    settings = state.settings()
    now = state.clock().now()
    start = parse_since(since, now)
    result = state.queue().stats(since=start, now=now, types=types or ())
    if as_json:
        emit_json(result.as_json())
    else:  # the log as every backend calls it (QueueLog), whatever table holds it
        _render(result, settings.log_sheet, types or [])
    if result.unreadable_ts:
        warn(f"{result.unreadable_ts} {settings.log_sheet} row(s) with an unreadable ts ignored")


def parse_since(text: str, now: datetime) -> datetime:
    """``--since``: a duration back from ``now`` (``24h``, ``7d``) or an ISO time (UTC when
    it has no offset) not after ``now``. ``UsageError`` (exit 2) otherwise."""
    from datetime import UTC, timedelta

    from sheetq.times import parse_duration, parse_ts

    try:
        return now - timedelta(seconds=parse_duration(text, what="--since", require_unit=True))
    except (ValueError, OverflowError):
        pass
    when = parse_ts(text.strip(), UTC)
    if isinstance(when, datetime):
        if when > now:  # an empty window with a negative length: most likely a typo
            from sheetq.times import format_ts

            raise UsageError(
                f"--since {text.strip()}: in the future (now is {format_ts(now)}); give an "
                "earlier time or a duration like '24h'"
            )
        return when
    raise UsageError(
        f"--since: expected a duration like '24h' or '7d', or an ISO time like "
        f"'2026-01-05T00:00:00Z', got {text!r}"
    )


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:.1f}%"


def _age(value: float | None) -> list[str]:
    from sheetq.times import format_duration

    if value is None:
        return ["-", ""]
    human = format_duration(value)
    return [human, f"{round(value)} s" if human != f"{round(value)}s" else ""]


def _render(result: Stats, log_sheet: str, types: list[str]) -> None:
    from sheetq.stats import sparkline, timeline
    from sheetq.times import format_duration, format_ts

    window = format_duration((result.now - result.since).total_seconds())
    which = f", type {', '.join(types)}" if types else ""
    rows: list[list[object]] = [
        ["enqueued", result.enqueued, ""],
        ["duplicates suppressed", result.duplicate, ""],
        ["conflicts", result.conflict, ""],
        ["attempts", result.claimed, ""],
        ["done", result.done, f"success rate {_percent(result.success_rate)}"],
        ["retries", result.retry, f"retry rate {_percent(result.retry_rate)}"],
        ["failed", result.failed, f"dead-letter rate {_percent(result.dead_letter_rate)}"],
        ["skipped", result.skipped, ""],
        ["enqueue to done p50", *_age(result.to_done.p50)],
        ["enqueue to done p95", *_age(result.to_done.p95)],
        ["oldest waiting", *_age(result.oldest_waiting)],
    ]
    table(
        f"{log_sheet} since {format_ts(result.since)} ({window}{which})",
        ["", "value", ""],
        rows,
        justify_right=(1,),
    )
    if result.failed_by_error_class:
        table(
            "failed by error class",
            ["error_class", "failed"],
            sorted(result.failed_by_error_class.items(), key=lambda kv: (-kv[1], kv[0])),
            justify_right=(1,),
        )
    console = out()
    if console.is_terminal and (result.done or result.failed):
        seconds, done, failed = timeline(result)
        echo(f"per {format_duration(seconds)}, oldest first (each line scaled to its peak)")
        echo(f"  done   │{sparkline(done)}│ peak {max(done)}")
        echo(f"  failed │{sparkline(failed)}│ peak {max(failed)}")
