"""``sheetq alert``: send owed failure alerts now (DESIGN.md §9)."""

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

    An alert is owed by every failed row whose alerted_at is empty. Exit 0 when nothing
    is owed or the alerts were sent; 1 when Telegram could not be reached or refused the
    message (the alerts stay owed, the next run tries again); 2 when TELEGRAM_BOT_TOKEN
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
    from filelock import Timeout

    from sheetq.runner import host_lock as host_lock_for

    host_lock = host_lock_for(settings)
    try:
        host_lock.acquire()
    except Timeout:
        _report(
            as_json,
            {"owed": None, "sent": False, "alerted": 0, "locked": True},
            "a sheetq process run on this host holds this queue; it sends the owed "
            "alerts when it finishes",
        )
        return
    try:
        _send_owed(settings, as_json)
    finally:
        host_lock.release()


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
    """Open 1 + scan 1 + mark 1 request: the DESIGN.md §6 budget for sending owed alerts."""
    from sheetq.alerts import deliver, owed_items
    from sheetq.alerts.owed import FRESH_POSITIONS, mark_alerted
    from sheetq.cli.app import state
    from sheetq.errors import StoreError
    from sheetq.model import new_run_id
    from sheetq.queue import SCAN_COLUMNS, parse_rows
    from sheetq.schema import check_schema
    from sheetq.store.base import Read
    from sheetq.times import zone

    store = state.store()
    info = store.open()
    check_schema(info, settings)
    clock = state.clock()
    (snap,) = store.read([Read(settings.queue_sheet, SCAN_COLUMNS)])
    scanned_at = clock.monotonic()
    items = owed_items(
        parse_rows(snap.rows, zone(info.time_zone), info.locale),
        store=store,
        info=info,
        settings=settings,
    )
    if not items:
        _report(
            as_json,
            {"owed": 0, "sent": False, "alerted": 0, "notes": [], "requests": store.requests_made},
            "no alerts owed",
        )
        return
    report, delivery = deliver(items, info, settings)
    for note in report.notes:
        warn(note)
    doc: dict[str, Any] = {
        "owed": len(items),
        "sent": delivery.sent,
        "alerted": len(report.covered),
        "message_id": delivery.message_id,
        "plain": delivery.plain,
        "new_chat_id": delivery.new_chat_id,
        "problem": delivery.problem,
        "notes": report.notes,
        "requests": store.requests_made,
    }
    if not delivery.sent:
        _report(
            as_json,
            doc,
            f"{len(items)} alert(s) owed; NOT sent (Telegram: "
            f"{delivery.problem}); the next run tries again",
        )
        raise typer.Exit(EXIT_FAILURE)
    covered = set(report.covered)
    changes = mark_alerted(
        [i for i in items if i.task_id in covered],
        settings=settings,
        now=clock.now(),
        run_id=new_run_id("alert"),
    )
    # Located with the scan if it was read moments ago, else afresh; verified after.
    fresh = clock.monotonic() - scanned_at <= FRESH_POSITIONS
    try:
        store.apply(changes, baseline=(snap,) if fresh else ())
    except StoreError as exc:
        warn(f"alert sent but alerted_at not written ({exc.message}); it may be sent again")
        doc["alerted"], doc["requests"] = 0, store.requests_made
        _report(as_json, doc, f"sent 1 message for {len(covered)} failed row(s); not marked")
        raise typer.Exit(EXIT_FAILURE) from None
    doc["requests"] = store.requests_made
    _report(as_json, doc, f"sent 1 message for {len(covered)} failed row(s); alerted_at written")
