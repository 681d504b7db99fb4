"""``sheetq connector list|pause|resume``: see and switch a downstream's traffic
(docs/design.md §13)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from sheetq.cli._flags import duration_flag
from sheetq.cli._output import echo, emit_json, table

if TYPE_CHECKING:
    from sheetq.port import ConnectorView

connector_app = typer.Typer(
    name="connector",
    help="Connectors: one rate limit, concurrency and breaker per downstream, shared by "
    "every worker. List them, pause one, resume one.",
    no_args_is_help=True,
    rich_markup_mode=None,
)


def line(view: ConnectorView) -> str:
    """One connector in a sentence: its state, until when, why, what runs and waits."""
    from sheetq.times import format_ts

    state = view.state
    if view.state in ("open", "paused"):
        state += f" until {format_ts(view.until)}" if view.until else " until resumed"
    elif view.saturated:
        state = "saturated"
    parts = [f"connector {view.name}: {state}"]
    if view.reason:
        parts.append(view.reason)
    parts.append(f"{view.running} running, {view.waiting} waiting")
    return "; ".join(parts)


@connector_app.command(name="list")
def list_connectors(
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON document.")] = False,
) -> None:
    """Every connector: state (closed, open, half-open, paused), until when, why, its
    transient-failure streak, tasks running and waiting, its types and limits.

    Examples:

      sheetq connector list

      sheetq connector list --json | jq '.connectors[] | select(.state != "closed")'
    """
    from sheetq.cli.app import state
    from sheetq.times import format_ts

    views = state.queue().connectors(clock=state.clock())
    if as_json:
        emit_json({"connectors": [v.as_json() for v in views]})
        return
    table(
        "Connectors",
        ["name", "state", "until", "reason", "failures", "running", "waiting", "limits", "types"],
        [
            [
                v.name,
                "saturated" if v.state == "closed" and v.saturated else v.state,
                format_ts(v.until) if v.until else "",
                v.reason,
                v.failures,
                v.running,
                v.waiting,
                ", ".join(
                    x
                    for x in (
                        v.rate_limit,
                        f"{v.concurrency} at once" if v.concurrency else "",
                    )
                    if x
                ),
                ", ".join(v.types),
            ]
            for v in views
        ],
        justify_right=(4, 5, 6),
    )


def _one_line_reason(reason: str) -> None:
    """``--reason`` is one line of text (it goes into a cell and a QueueLog row): a
    newline or another control character is refused (``UsageError``, exit 2)."""
    import unicodedata

    from sheetq.errors import UsageError

    bad = next((c for c in reason if unicodedata.category(c) == "Cc"), None)
    if bad is not None:
        raise UsageError(
            f"--reason: contains the control character {bad!r} at {reason.index(bad) + 1}; "
            "a reason is one line of text"
        )


@connector_app.command()
def pause(
    name: Annotated[str, typer.Argument(help="The connector (or a type without one).")],
    for_: Annotated[
        str | None,
        typer.Option(
            "--for", metavar="DURATION", help="For this long (e.g. 2h); default: until resumed."
        ),
    ] = None,
    reason: Annotated[str, typer.Option("--reason", help="Why, for the log.")] = "",
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON document.")] = False,
) -> None:
    """Stop starting tasks of a connector's types on every worker and host (a maintenance
    window). Tasks keep their status and attempts; running ones finish. Logged `paused`.

    Examples:

      sheetq connector pause crm --for 2h --reason "CRM maintenance"
    """
    from sheetq.cli.app import state
    from sheetq.errors import UsageError

    _one_line_reason(reason)
    seconds = None
    if for_ is not None:
        seconds = duration_flag(for_, "--for")
        if seconds <= 0:
            raise UsageError(f"--for: expected a duration above 0, got {for_!r}")
    view = state.queue().connector_pause(name, seconds=seconds, reason=reason, clock=state.clock())
    if as_json:
        emit_json(view.as_json())
    else:
        echo(line(view))


@connector_app.command()
def resume(
    name: Annotated[str, typer.Argument(help="The connector (or a type without one).")],
    reason: Annotated[str, typer.Option("--reason", help="Why, for the log.")] = "",
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON document.")] = False,
) -> None:
    """Close a connector again, whatever its state (paused, or open after an auth failure):
    its tasks start on the next claim. Logged `resumed`; one already closed is left as it is
    (said so, nothing logged).

    Examples:

      sheetq connector resume crm
    """
    from sheetq.cli.app import state

    _one_line_reason(reason)
    queue, clock = state.queue(), state.clock()
    before = next((v for v in queue.connectors(clock=clock) if v.name == name), None)
    if before is not None and before.state == "closed":  # nothing to resume: nothing logged
        if as_json:
            emit_json(before.as_json())
        else:
            echo(f"connector {name} was already closed: nothing to resume, nothing logged")
        return
    view = queue.connector_resume(name, reason=reason, clock=clock)
    if as_json:
        emit_json(view.as_json())
    else:
        echo(line(view))
