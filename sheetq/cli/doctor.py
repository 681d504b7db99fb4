"""``sheetq doctor``: check configuration, credentials, access, headers, Telegram."""

from __future__ import annotations

from typing import Annotated

import typer

from sheetq.cli._output import echo, emit_json, out


def doctor(
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON document.")] = False,
) -> None:
    """Check configuration, credentials, spreadsheet access, headers and Telegram.

    One line per check: ok or problem, what was found, and how to fix it. Exit 1 if any
    check found a problem, 0 otherwise. Changes nothing (the write check adds and removes
    a named range in one request).

    Examples:

      sheetq doctor

      sheetq doctor --json | jq '.checks[] | select(.ok | not)'
    """
    from sheetq.cli.app import state
    from sheetq.doctor import diagnose

    checks = diagnose(
        spreadsheet=state.spreadsheet, config=state.config, database_url=state.database_url
    )
    healthy = all(c.ok for c in checks)
    if as_json:
        emit_json({"ok": healthy, "checks": [c.as_json() for c in checks]})
    else:
        console = out()
        width = max((len(c.check) for c in checks), default=0)
        for c in checks:
            line = f"{c.check.ljust(width)}  {c.detail}" + (f"  → {c.fix}" if c.fix else "")
            if console.is_terminal:
                from rich.markup import escape

                word = "[green]ok     [/green]" if c.ok else "[bold red]problem[/bold red]"
                console.print(f"{word} {escape(line)}")
            else:
                echo(f"{'ok' if c.ok else 'problem':<7} {line}")
        problems = sum(1 for c in checks if not c.ok)
        echo("all checks passed" if healthy else f"{problems} problem(s) found")
    if not healthy:
        raise typer.Exit(1)
