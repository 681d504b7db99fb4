"""``sheetq alert``: send owed failure alerts now (docs/design.md §9)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import typer

from sheetq.cli._output import echo, emit_json, warn
from sheetq.errors import EXIT_FAILURE, ConfigError

if TYPE_CHECKING:
    from sheetq.config import Settings


def alert(
    test: Annotated[
        bool, typer.Option("--test", help="Send a short test message (no spreadsheet needed).")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON document.")] = False,
) -> None:
    """Send owed failure alerts to Telegram now: one message, then alerted_at on its rows.

    An alert is owed by every failed row whose alerted_at is empty, and by a connector
    that opened, stayed open past escalate_after or closed again without Telegram being
    told (one message each). Exit 0 when nothing is owed or the alerts were sent; 1 when
    Telegram could not be reached or refused the message (the alerts stay owed, the next
    run tries again); 2 when TELEGRAM_BOT_TOKEN
    or TELEGRAM_CHAT_ID is not set. While a `process` run on this host holds the queue,
    it sends the alerts itself and this command only says so.

    Examples:

      sheetq alert

      sheetq alert --test
    """
    from sheetq.cli.app import state

    settings = state.settings(require_spreadsheet=not test)
    tg = settings.telegram
    if not tg.enabled:
        missing = [
            name
            for name, value in (("TELEGRAM_BOT_TOKEN", tg.token), ("TELEGRAM_CHAT_ID", tg.chat_id))
            if not value
        ]
        raise ConfigError(f"alerts are off: {' and '.join(missing)} not set (see `sheetq doctor`)")
    if test:
        _test(settings, as_json)
        return
    _send_owed(settings, as_json)


def _report(as_json: bool, doc: dict[str, Any], line: str) -> None:
    if as_json:
        emit_json(doc)
    else:
        echo(line)


def _test(settings: Settings, as_json: bool) -> None:
    from sheetq.alerts import send_test

    delivery = send_test(settings)
    for note in delivery.notes:
        warn(note)
    doc = {
        "sent": delivery.sent,
        "message_id": delivery.message_id,
        "plain": delivery.plain,
        "new_chat_id": delivery.new_chat_id,
        "problem": delivery.problem,
        "notes": delivery.notes,
    }
    _report(as_json, doc, "test alert sent" if delivery.sent else "test alert NOT sent")
    if not delivery.sent:
        raise typer.Exit(EXIT_FAILURE)


def _send_owed(settings: Settings, as_json: bool) -> None:
    """The queue's owed alerts, sent and marked through the port (``send_alerts``)."""
    from sheetq.alerts import deliver, send_text
    from sheetq.cli.app import state
    from sheetq.port import AlertItem

    def send(items: list[AlertItem], title: str) -> Any:
        return deliver(items, title, settings)

    def text(message: str) -> bool:
        return send_text(settings, message)

    outcome = state.queue().send_alerts(send, clock=state.clock(), text=text)
    if outcome.connector_sent:
        warn(f"{outcome.connector_sent} connector alert(s) sent")
    if outcome.connector_unsent:
        warn(
            f"{outcome.connector_unsent} connector alert(s) NOT sent (Telegram unreachable or "
            "failing); they stay owed"
        )
    if outcome.owed is None:
        _report(
            as_json, {"owed": None, "sent": False, "alerted": 0, "locked": True}, outcome.locked
        )
        return
    if not outcome.owed:
        _report(
            as_json,
            {"owed": 0, "sent": False, "alerted": 0, "notes": [], "requests": outcome.requests},
            "no failure alerts owed" if outcome.connector_sent else "no alerts owed",
        )
        if outcome.connector_unsent:
            raise typer.Exit(EXIT_FAILURE)
        return
    report, delivery = outcome.report, outcome.delivery
    assert report is not None and delivery is not None
    for note in report.notes:
        warn(note)
    covered = len(report.covered)
    doc: dict[str, Any] = {
        "owed": outcome.owed,
        "sent": delivery.sent,
        "alerted": covered if outcome.marked else 0,
        "message_id": delivery.message_id,
        "plain": delivery.plain,
        "new_chat_id": delivery.new_chat_id,
        "problem": delivery.problem,
        "notes": report.notes,
        "requests": outcome.requests,
    }
    if not delivery.sent:
        _report(
            as_json,
            doc,
            f"{outcome.owed} alert(s) owed; NOT sent (Telegram: "
            f"{delivery.problem}); the next run tries again",
        )
        raise typer.Exit(EXIT_FAILURE)
    if not outcome.marked:
        warn(f"alert sent but alerted_at not written ({outcome.mark_error}); it may be sent again")
        _report(as_json, doc, f"sent 1 message for {covered} failed row(s); not marked")
        raise typer.Exit(EXIT_FAILURE)
    _report(as_json, doc, f"sent 1 message for {covered} failed row(s); alerted_at written")
    if outcome.connector_unsent:
        raise typer.Exit(EXIT_FAILURE)
