"""``sheetq enqueue``: accept a task, once (docs/design.md §4)."""

from __future__ import annotations

import re
import sys
from datetime import datetime, timedelta
from pathlib import Path
from typing import Annotated

import typer

from sheetq.cli._flags import duration_flag
from sheetq.cli._output import echo, emit_json, warn
from sheetq.errors import ConflictError, InputError, UsageError

MAX_BAD_LINES_SHOWN = 10


def _read_stdin() -> tuple[str, str]:
    """Standard input as UTF-8 text (a byte-order mark dropped), or an ``InputError`` that
    names the first byte that is not UTF-8."""
    buffer = getattr(sys.stdin, "buffer", None)
    if buffer is None:  # a text-only stream put in its place (an embedding program, a test)
        return sys.stdin.read(), "stdin"
    data = buffer.read()
    try:
        return data.decode("utf-8-sig"), "stdin"
    except UnicodeDecodeError as exc:
        raise InputError(f"stdin: not UTF-8 text (byte {exc.start})") from None


def _read_source(payload: str | None, file: str | None) -> tuple[str, str]:
    """The input text and a name for messages."""
    if payload is not None and file is not None:
        raise UsageError("give the payload inline or with --file, not both")
    if payload == "-" or file == "-":
        return _read_stdin()
    if file is not None:
        path = Path(file)
        try:
            return path.read_text(encoding="utf-8-sig"), str(path)
        except FileNotFoundError:
            raise InputError(f"--file {file}: no such file") from None
        except UnicodeDecodeError as exc:
            raise InputError(f"--file {file}: not UTF-8 text (byte {exc.start})") from None
        except OSError as exc:
            raise InputError(f"--file {file}: cannot read: {exc.strerror}") from None
    if payload is not None:
        return payload, "payload"
    if sys.stdin.isatty():
        raise UsageError("no payload: give it inline, with --file F, or on stdin with '-'")
    return _read_stdin()


def _when(delay: str | None, at: str | None, tz_name: str) -> datetime | None:
    from sheetq.times import Unparseable, parse_ts, zone

    if delay and at:
        raise UsageError("give --delay or --at, not both")
    if delay:
        seconds = duration_flag(delay, "--delay")
        from sheetq.cli.app import state

        return state.clock().now() + timedelta(seconds=seconds)
    if at:
        try:
            parsed = parse_ts(at, zone(tz_name))
        except (OverflowError, ValueError):
            parsed = None
        if parsed is None or isinstance(parsed, Unparseable) or not 1970 <= parsed.year <= 9999:
            raise UsageError(
                f"--at: expected an ISO 8601 time after 1970 like 2026-12-01T09:00:00Z, got {at!r}"
            )
        from sheetq.cli.app import state
        from sheetq.times import MAX_DURATION

        if (parsed - state.clock().now()).total_seconds() > MAX_DURATION:  # as --delay's limit
            raise UsageError(f"--at {at}: more than 100 years from now; the task would never run")
        return parsed
    return None


def enqueue(
    task_type: Annotated[
        str, typer.Argument(metavar="TYPE", help="Task type; selects the handler.")
    ],
    payload: Annotated[
        str | None, typer.Argument(help="JSON object, or '-' to read stdin.", show_default=False)
    ] = None,
    key: Annotated[
        str | None,
        typer.Option(
            "--key",
            help="Idempotency key (stored as TYPE:K); default: key_fields, "
            "lead_id/order_id/event_id, or the payload hash.",
        ),
    ] = None,
    file: Annotated[
        str | None,
        typer.Option("--file", "-f", help="Read the payload from a file ('-' for stdin)."),
    ] = None,
    jsonl: Annotated[
        bool,
        typer.Option(
            "--jsonl",
            help="One JSON object per line. A bad line rejects them all (nothing written); "
            "the others go in one write (on Google one per ~9 MB: if a later write fails, the "
            "earlier lines stay enqueued and running the command again completes the batch).",
        ),
    ] = False,
    delay: Annotated[
        str | None, typer.Option("--delay", help="Not before now + this (e.g. 10m, 2h).")
    ] = None,
    at: Annotated[
        str | None,
        typer.Option(
            "--at",
            help="Not before this time (ISO 8601; no offset = the spreadsheet's zone, UTC on "
            "PostgreSQL).",
        ),
    ] = None,
    priority: Annotated[
        str | None,
        typer.Option(
            "--priority",
            help="Higher runs first (an integer; default: the type's priority, else 0).",
            show_default=False,
        ),
    ] = None,
    group: Annotated[
        str | None,
        typer.Option(
            "--group",
            help="Run one task of this group at a time, in enqueue order (default: the "
            "type's group_fields).",
            show_default=False,
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON document.")] = False,
) -> None:
    """Add a task to the Queue, once: a repeated payload is a duplicate (exit 0), the same key
    with another payload a conflict (exit 3).

    Examples:

      sheetq enqueue lead '{"lead_id": "L-1", "phone": "+380501234567"}'

      curl -s "$HOOK_URL" | sheetq enqueue order - --key "$DELIVERY_ID"

      sheetq enqueue lead --jsonl --file leads.jsonl --json

      sheetq enqueue order_confirmation '{"order_id": "A-1"}' --priority 10

      sheetq enqueue deal_update '{"deal_id": 42, "stage": "won"}' --group deal-42
    """
    from sheetq.accept import NewTask, check_priority, prepare
    from sheetq.cli.app import state
    from sheetq.config import TYPE_PATTERN, TYPE_RULE  # one rule for the CLI and sheetq.toml
    from sheetq.idempotency import parse_payload
    from sheetq.order import clean_group
    from sheetq.times import format_not_before

    if not TYPE_PATTERN.match(task_type):
        raise UsageError(f"TYPE {task_type!r}: {TYPE_RULE}")
    level = None if priority is None else check_priority(priority)
    group = None if group is None else clean_group(group)
    if jsonl and key is not None:
        raise UsageError("--key cannot be used with --jsonl: every line would share one key")
    text, source = _read_source(payload, file)
    text = text.removeprefix("\ufeff")  # a UTF-8 BOM (Windows tools, some webhook relays)
    settings = state.settings()
    config = settings.type_config(task_type)

    # Parse everything before touching the spreadsheet: bad input writes nothing.
    if jsonl:
        # every bad line is reported, whether its JSON or its payload is wrong
        errors: list[str] = []
        tasks: list[NewTask] = []
        for number, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            where = f"{source} line {number}"
            try:
                body = parse_payload(line, where=where)
                tasks += prepare(
                    task_type,
                    [(number, body)],
                    settings,
                    source=source,
                    priority=level,
                    group=group,
                )
            except InputError as exc:  # canonical_json's errors say "payload:"
                errors.append(re.sub(r"^payload: ", f"{where}: ", exc.message))
        if errors:
            shown = errors[:MAX_BAD_LINES_SHOWN]
            more = len(errors) - len(shown)
            raise InputError(
                "; ".join(shown)
                + (f"; and {more} more bad lines" if more else "")
                + " — nothing was enqueued"
            )
    else:
        body = parse_payload(text, where=source)
        tasks = prepare(
            task_type, [(None, body)], settings, key=key, source=source, priority=level, group=group
        )
    if jsonl and not tasks:
        if as_json:
            emit_json({"enqueued": 0, "duplicate": 0, "conflict": 0, "results": []})
        else:
            echo("nothing to enqueue: the input has no lines")
        return

    # Everything from here on ends within SHEETQ_ENQUEUE_TIMEOUT, retries included (§4).
    queue = state.queue(
        time_limit=settings.enqueue_timeout,
        time_limit_name="SHEETQ_ENQUEUE_TIMEOUT",
    )
    results = queue.enqueue(
        tasks, clock=state.clock(), not_before=lambda tz_name: _when(delay, at, tz_name)
    )
    not_before = tasks[0].not_before

    if (
        settings.config_path is not None
        and config.handler is None
        and any(r.outcome == "enqueued" for r in results)
    ):
        warn(
            f"no handler is configured for type {task_type!r} in {settings.config_path}; "
            "its tasks wait until one is"
        )
    conflicts = [r for r in results if r.outcome == "conflict"]
    if jsonl:
        counts = {
            k: sum(1 for r in results if r.outcome == k)
            for k in ("enqueued", "duplicate", "conflict")
        }
        if as_json:
            emit_json(
                {
                    **counts,
                    "results": [
                        {
                            "line": r.line,
                            "outcome": r.outcome,
                            "task_id": r.task_id,
                            "idempotency_key": r.key,
                            "status": r.status,
                        }
                        for r in results
                    ],
                }
            )
        else:
            from sheetq.redact import plural

            echo(
                f"enqueued {counts['enqueued']}, duplicate {counts['duplicate']}, "
                f"conflict {counts['conflict']} ({plural(len(results), 'line')})"
            )
            for r in conflicts:
                warn(
                    f"line {r.line}: conflict: key {r.key!r} is task {r.task_id} "
                    "with a different payload; not enqueued"
                )
        if conflicts:
            raise typer.Exit(ConflictError.exit_code)
        return
    (result,) = results
    if as_json:
        emit_json(
            {
                "outcome": result.outcome,
                "task_id": result.task_id,
                "idempotency_key": result.key,
                "status": result.status,
            }
        )
    elif result.outcome == "enqueued":
        when = f", not before {format_not_before(not_before)}" if not_before else ""
        if not_before and config.policy.max_age is not None:
            # max_age counts from when the task is due: its creation or its not-before time,
            # whichever is later (sheetq.sheet.plan, step 3)
            due = max(not_before, state.clock().now())
            expires = due + timedelta(seconds=config.policy.max_age)
            when += f"; expires unrun after {expires:%Y-%m-%dT%H:%M:%SZ}"
        echo(f"enqueued {result.task_id} (key {result.key}{when})")
    elif result.outcome == "duplicate":
        echo(f"duplicate: already task {result.task_id} (status {result.status}); nothing added")
    if result.outcome == "conflict":
        if not as_json:
            warn(
                f"conflict: key {result.key!r} already belongs to task {result.task_id} "
                f"(status {result.status}) with a different payload; nothing added. Use another "
                "--key if this is a new operation."
            )
        raise typer.Exit(ConflictError.exit_code)
