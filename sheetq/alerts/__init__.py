"""Telegram failure alerts (docs/design.md §9): owed rows → one digest message → rows to mark.

Public API (the CLI and the runner use only these)::

    make_notifier(settings, verbose=0) -> Notifier       # for Runner(notifier=...)
    deliver(items, title, settings) -> (AlertReport, Delivery)
    send_test(settings) -> Delivery                       # sheetq alert --test
    check_telegram(settings) -> [(ok, what, how_to_fix)]  # sheetq doctor

Importing this package is cheap: python-telegram-bot is imported only inside the
functions that talk to Telegram, and only when there is something to send.
"""

from __future__ import annotations

import html
import logging
import re
import socket
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from sheetq.alerts.telegram import Timeouts, clean, run_with_bot, secret_list
from sheetq.port import Delivery

if TYPE_CHECKING:
    from sheetq.config import Settings
    from sheetq.port import AlertItem, AlertReport, Notifier

__all__ = ["Delivery", "check_telegram", "deliver", "make_notifier", "send_test"]

log = logging.getLogger("sheetq.alerts")
_TOKEN_SHAPE = re.compile(r"^\d{5,}:[A-Za-z0-9_-]{30,}$")


def _template(settings: Settings, notes: list[str]) -> Any:
    from sheetq.alerts.message import TemplateError, default_template, load_template

    try:
        return load_template(settings.telegram.template)  # relative to sheetq.toml's folder
    except TemplateError as exc:
        notes.append(f"{exc.message}; the default template was used")
        return default_template()


def deliver(
    items: Sequence[AlertItem], title: str, settings: Settings
) -> tuple[AlertReport, Delivery]:
    """Send one message reporting ``items``; the report's ``covered`` ids are to be marked.

    ``covered`` is every item (listed or summarised as "and N more") when Telegram took
    the message, else empty: the alerts stay owed. Never raises; problems are notes
    (token-free lines for stderr). An unusable custom template falls back to the default
    one, with a note. A queue in PostgreSQL with a mirror links each task to its mirror
    row (``mirror_links``), else to ``sheetq show ID``.
    """
    from sheetq.alerts.message import build_message
    from sheetq.alerts.mirror_links import link_mirror_rows
    from sheetq.alerts.telegram import send_message
    from sheetq.port import AlertReport

    notes: list[str] = []
    if not items:
        return AlertReport([], notes), Delivery(sent=True)
    items = link_mirror_rows(items, settings)
    tg = settings.telegram
    message = build_message(
        items,
        queue=settings.queue_sheet,
        spreadsheet=title,
        template=_template(settings, notes),
        secrets=secret_list(tg),
        sheet_edits=not settings.database_url or bool(settings.spreadsheet),
    )
    delivery = send_message(tg, message.html, message.plain)
    notes.extend(delivery.notes)
    if not delivery.sent:
        return AlertReport([], notes), delivery
    log.info(
        "alert message %s sent to Telegram: %d failed rows (%d listed)",
        delivery.message_id,
        len(message.covered),
        message.listed,
    )
    return AlertReport(list(message.covered), notes), delivery


def make_notifier(settings: Settings, *, verbose: int = 0) -> Notifier:
    """A ``Runner`` notifier that sends owed alerts as one Telegram message per run.

    The returned callable never raises (a failed send leaves every alert owed and says
    why in ``AlertReport.notes``). ``verbose`` ≥ 2 also logs the message text at DEBUG.
    """
    from sheetq.port import AlertReport

    def notify(items: list[AlertItem], title: str) -> AlertReport:
        try:
            report, delivery = deliver(items, title, settings)
        except Exception as exc:  # alerts must never break a process run
            text = clean(f"{type(exc).__name__}: {exc}", settings.telegram)
            return AlertReport([], [f"alerts not sent ({text}); they stay owed"])
        if verbose >= 2 and delivery.sent:
            log.debug("alert covered %s", ", ".join(report.covered))
        return report

    return _Notifier(notify, settings)


class _Notifier:
    """The run's notifier: called with owed failure alerts (one digest); ``text`` sends one
    plain message (a connector opened, is still open, closed: docs/design.md §13)."""

    def __init__(self, notify: Notifier, settings: Settings) -> None:
        self._notify = notify
        self._settings = settings

    def __call__(self, items: list[AlertItem], title: str) -> AlertReport:
        return self._notify(items, title)

    def text(self, message: str) -> bool:
        """Send ``message`` (plain text, escaped for HTML); whether Telegram took it. Never
        raises."""
        return send_text(self._settings, message)


def send_text(settings: Settings, message: str) -> bool:
    """Send one plain message (escaped for HTML, at most 3,500 characters): a connector's
    alert (docs/design.md §13). Whether Telegram took it; never raises."""
    from sheetq.alerts.telegram import send_message

    tg = settings.telegram
    plain = clean(message, tg, limit=3500)
    try:
        delivery = send_message(tg, html.escape(plain), plain)
    except Exception:  # an alert must never break the run; it stays owed
        return False
    for note in delivery.notes:
        log.info("%s", note)
    return delivery.sent


def send_test(settings: Settings) -> Delivery:
    """Send a short test message to the configured chat. Never raises (see ``Delivery``)."""
    from sheetq.alerts.message import probe_message
    from sheetq.alerts.telegram import send_message

    tg = settings.telegram
    message = probe_message(
        host=socket.gethostname(), queue=settings.queue_sheet, secrets=secret_list(tg)
    )
    return send_message(tg, message.html, message.plain)


def check_telegram(settings: Settings) -> list[tuple[bool, str, str]]:
    """Lines for ``sheetq doctor``: ``(ok, what was checked, how to fix it)``.

    Checks the configuration, then asks Telegram ``getMe`` (the token) and ``getChat``
    (the chat). Never raises and never shows the token. Blocks at most the deadline of
    ``Timeouts.from_env``.
    """
    tg = settings.telegram
    lines: list[tuple[bool, str, str]] = []
    if not tg.token:
        return [
            (
                False,
                "Telegram alerts are off: TELEGRAM_BOT_TOKEN is not set",
                "create a bot with @BotFather and set TELEGRAM_BOT_TOKEN",
            )
        ]
    if not _TOKEN_SHAPE.match(tg.token):
        lines.append(
            (
                False,
                "TELEGRAM_BOT_TOKEN does not look like a bot token "
                "(digits, a colon, then 30+ letters, digits, - or _)",
                "copy the token from @BotFather again, without quotes or spaces",
            )
        )
    if not tg.chat_id:
        lines.append(
            (
                False,
                "Telegram alerts are off: TELEGRAM_CHAT_ID is not set",
                "set TELEGRAM_CHAT_ID to the chat's id (groups start with -, "
                "supergroups with -100)",
            )
        )
    thread = tg.thread_id.strip()
    if thread and (not thread.lstrip("-").isdigit() or int(thread) <= 0):
        lines.append(
            (
                False,
                f"TELEGRAM_THREAD_ID {thread!r} is not a topic id",
                "set it to the forum topic's number, or leave it empty",
            )
        )
    elif thread == "1":
        lines.append((True, "TELEGRAM_THREAD_ID=1 is the General topic: alerts go to General", ""))
    timeouts = Timeouts.from_env(tg)
    try:
        lines.extend(run_with_bot(tg, timeouts, lambda bot, err: _ask(bot, err, settings)))
    except Exception as exc:  # doctor reports, it does not crash
        lines.append(
            (
                False,
                clean(f"Telegram at {tg.api_url} not reachable ({type(exc).__name__}: {exc})", tg),
                "check the network, proxy settings and SHEETQ_TELEGRAM_API_URL",
            )
        )
    return lines


async def _ask(bot: Any, tg: Any, settings: Settings) -> list[tuple[bool, str, str]]:
    conf = settings.telegram
    out: list[tuple[bool, str, str]] = []
    try:
        me = await bot.get_me()
    except tg.InvalidToken as exc:
        return [
            (
                False,
                clean(f"Telegram rejected TELEGRAM_BOT_TOKEN ({exc.message})", conf),
                "set TELEGRAM_BOT_TOKEN to the token @BotFather gave (and check "
                "SHEETQ_TELEGRAM_API_URL)",
            )
        ]
    except tg.TelegramError as exc:
        return [
            (
                False,
                clean(f"Telegram at {conf.api_url} not reachable ({exc.message})", conf),
                "check the network, proxy settings and SHEETQ_TELEGRAM_API_URL",
            )
        ]
    out.append((True, f"Telegram bot @{me.username} answers", ""))
    if not conf.chat_id:
        return out
    try:
        chat = await bot.get_chat(conf.chat_id)
    except tg.ChatMigrated as exc:
        out.append(
            (
                False,
                f"Telegram chat {conf.chat_id} was upgraded to a supergroup",
                f"set TELEGRAM_CHAT_ID={exc.new_chat_id}",
            )
        )
    except (tg.BadRequest, tg.Forbidden) as exc:
        out.append(
            (
                False,
                clean(f"Telegram chat {conf.chat_id}: {exc.message}", conf),
                "add the bot to the chat (a private chat: press Start) and check TELEGRAM_CHAT_ID",
            )
        )
    except tg.TelegramError as exc:
        out.append(
            (
                False,
                clean(f"Telegram chat {conf.chat_id} not checked ({exc.message})", conf),
                "try again; check the network",
            )
        )
    else:
        name = chat.title or chat.username or chat.first_name or str(chat.id)
        out.append((True, f"Telegram chat {conf.chat_id} found: {name} ({chat.type})", ""))
        thread = conf.thread_id.strip()
        if thread and not chat.is_forum and chat.type != "private":
            out.append(
                (
                    False,
                    f"TELEGRAM_THREAD_ID is set but chat {name} has no topics",
                    "leave TELEGRAM_THREAD_ID empty",
                )
            )
    return out
