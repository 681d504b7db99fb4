"""Sending one alert message with python-telegram-bot 22 (docs/design.md §9).

One ``asyncio.run`` per call, our own ``HTTPXRequest`` opened with ``async with`` (no
``bot.initialize()``, so no ``getMe`` and none of PTB's token-bearing error texts), and
a hard total deadline. What each Telegram answer means (reference §4):

===============================  =================================================
delivered                         ``Delivery.sent``; the caller marks the rows
429 ``retry_after``               waited while the run's total wait stays under
                                  ``MAX_FLOOD_WAIT`` seconds, else left owed
network error, timeout, 5xx,      left owed for the next run (no retry in the run:
an answer that is not JSON        a read timeout may have delivered the message)
400 (can't parse entities, too    reported once, re-sent at once as plain text
long, anything else)              (shortened); a second refusal leaves it owed
400 message thread not found      re-sent without ``message_thread_id``, reported
``ChatMigrated``                  re-sent once to the new chat id, which is reported
                                  (update TELEGRAM_CHAT_ID)
401/404 ``InvalidToken``,         left owed; a note says what to fix
403 ``Forbidden``
anything else                     left owed; a note names the exception type
===============================  =================================================

``telegram`` is imported inside the coroutines only. Every string this module returns
has the token masked; the token also never reaches a log record (PTB and httpx loggers
get a masking filter while a send runs).
"""

from __future__ import annotations

import ipaddress
import logging
import os
import re
import urllib.parse
import warnings
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

from sheetq.config import TelegramSettings
from sheetq.port import Delivery
from sheetq.redact import redact, shorten

log = logging.getLogger("sheetq.alerts")

MAX_FLOOD_WAIT = 30.0  # seconds of 429 waiting allowed in one run (docs/design.md §9)
DEFAULT_TIMEOUT = 10.0  # seconds; SHEETQ_TELEGRAM_TIMEOUT
TIMEOUT_ENV = "SHEETQ_TELEGRAM_TIMEOUT"
_LEAKY_LOGGERS = (
    "httpx",
    "httpcore",
    "telegram",
    "telegram.Bot",
    "telegram.request.BaseRequest",
    "telegram.request.HTTPXRequest",
)
_BODY_DUMP = re.compile(r"\. Parsing the server response .* failed$", re.S)
T = TypeVar("T")


@dataclass(frozen=True)
class Timeouts:
    """Seconds. ``read`` also bounds write; ``deadline`` caps the whole send."""

    connect: float
    read: float
    deadline: float

    @classmethod
    def from_env(cls, settings: TelegramSettings | None = None) -> Timeouts:
        """From ``SHEETQ_TELEGRAM_TIMEOUT`` (seconds, default 10), or a ``timeout`` setting.

        A value that is not a positive number falls back to the default.
        """
        raw = getattr(settings, "timeout", None) or os.environ.get(TIMEOUT_ENV, "")
        try:
            seconds = float(raw) if raw not in ("", None) else DEFAULT_TIMEOUT
        except (TypeError, ValueError):
            seconds = DEFAULT_TIMEOUT
        if not seconds > 0:
            seconds = DEFAULT_TIMEOUT
        return cls(connect=min(5.0, seconds), read=seconds, deadline=MAX_FLOOD_WAIT + 3 * seconds)


def secret_list(settings: TelegramSettings) -> list[str]:
    return [settings.token] if settings.token else []


def clean(text: str, settings: TelegramSettings, limit: int = 300) -> str:
    """``text`` on one line, at most ``limit`` characters, the token (and anything that
    looks like a secret) masked."""
    return shorten(" ".join(redact(str(text), secrets=secret_list(settings)).split()), limit)


def _seconds(value: Any) -> float:
    """``RetryAfter.retry_after``: an int today, a timedelta with ``PTB_TIMEDELTA``."""
    return float(value.total_seconds()) if hasattr(value, "total_seconds") else float(value)


def _retry_after(exc: Any) -> float:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return _seconds(exc.retry_after)


def _is_loopback(api_url: str) -> bool:
    host = urllib.parse.urlsplit(api_url).hostname or ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class _MaskToken(logging.Filter):
    def __init__(self, secrets: list[str]) -> None:
        super().__init__()
        self.secrets = secrets

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a broken record must not break the send
            message = str(record.msg)
        record.msg, record.args = redact(message, secrets=self.secrets), None
        if record.exc_info:
            import traceback

            record.exc_text = redact(
                "".join(traceback.format_exception(*record.exc_info)), secrets=self.secrets
            )
            record.exc_info = None
        return True


class _DropBodyDump(logging.Filter):
    """PTB logs an answer that is not JSON (a proxy's 502 page) at ERROR with its traceback,
    then raises ``NetworkError``; the ``Delivery`` note already says it in one line."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("Can not load invalid JSON data")


@contextmanager
def _guarded(settings: TelegramSettings) -> Iterator[None]:
    """While sending: PTB's int/timedelta deprecation silenced, token masked in PTB/httpx
    logs, PTB's dump of an answer that is not JSON dropped."""
    os.environ.setdefault("PTB_TIMEDELTA", "true")  # before telegram is imported
    mask = _MaskToken(secret_list(settings))
    loggers = [logging.getLogger(name) for name in _LEAKY_LOGGERS]
    for logger in loggers:
        logger.addFilter(mask)
    dump, drop = logging.getLogger("telegram.request.BaseRequest"), _DropBodyDump()
    dump.addFilter(drop)
    try:
        with warnings.catch_warnings():
            # PTBDeprecationWarning (a DeprecationWarning) for the int form of retry_after
            warnings.simplefilter("ignore", DeprecationWarning)
            yield
    finally:
        dump.removeFilter(drop)
        for logger in loggers:
            logger.removeFilter(mask)


def run_with_bot(
    settings: TelegramSettings, timeouts: Timeouts, body: Callable[[Any, Any], Awaitable[T]]
) -> T:
    """Run ``body(bot, telegram_error_module)`` in a fresh event loop with an open client.

    Raises ``TimeoutError`` past ``timeouts.deadline``, ``ImportError`` without PTB, and
    whatever ``body`` raises.
    """

    import asyncio

    async def main() -> T:
        from telegram import Bot
        from telegram import error as tg
        from telegram.request import HTTPXRequest

        kwargs: dict[str, Any] = {}
        if _is_loopback(settings.api_url):  # a local Bot API server or a test fake:
            kwargs["httpx_kwargs"] = {"trust_env": False}  # never through a proxy
        req = HTTPXRequest(
            connection_pool_size=2,
            connect_timeout=timeouts.connect,
            read_timeout=timeouts.read,
            write_timeout=timeouts.read,
            pool_timeout=timeouts.connect,
            **kwargs,
        )
        bot = Bot(
            settings.token,
            base_url=f"{settings.api_url}/bot",
            base_file_url=f"{settings.api_url}/file/bot",
            request=req,
            get_updates_request=req,
        )
        async with req:
            return await asyncio.wait_for(body(bot, tg), timeouts.deadline)

    with _guarded(settings):
        return asyncio.run(main())


def send_message(
    settings: TelegramSettings, html_text: str, plain_text: str, *, timeouts: Timeouts | None = None
) -> Delivery:
    """Send one message (HTML, falling back to ``plain_text``) following the module policy.

    Never raises: every failure is a ``Delivery`` with ``sent=False`` and a note.
    Blocks at most ``timeouts.deadline`` seconds (default: ``MAX_FLOOD_WAIT`` + 3 × the
    ``SHEETQ_TELEGRAM_TIMEOUT``).
    """
    timeouts = timeouts or Timeouts.from_env(settings)
    result = Delivery()

    async def body(bot: Any, tg: Any) -> Delivery:
        return await _send(bot, tg, settings, html_text, plain_text, timeouts, result)

    try:
        return run_with_bot(settings, timeouts, body)
    except TimeoutError:
        result.problem = "network"
        result.notes.append(
            f"Telegram did not answer within {timeouts.deadline:g}s; the "
            "alerts stay owed for the next run"
        )
    except ImportError as exc:
        result.problem = "error"
        result.notes.append(
            f"cannot send alerts: python-telegram-bot is not installed ({exc.name})"
        )
    except Exception as exc:  # an alert failure must never break the run
        result.problem = "error"
        result.notes.append(
            clean(
                f"alert not sent ({type(exc).__name__}: {exc}); the alerts "
                "stay owed for the next run",
                settings,
            )
        )
    return result


def _thread_id(settings: TelegramSettings, result: Delivery) -> int | None:
    raw = settings.thread_id.strip()
    if not raw:
        return None
    try:
        value = int(raw)
    except ValueError:
        result.notes.append(
            f"TELEGRAM_THREAD_ID {raw!r} is not a number; sent to the chat without a topic"
        )
        return None
    return None if value == 1 else value  # 1 is the General topic: addressed by omitting it


async def _send(
    bot: Any,
    tg: Any,
    settings: TelegramSettings,
    html_text: str,
    plain_text: str,
    timeouts: Timeouts,
    result: Delivery,
) -> Delivery:
    from telegram import LinkPreviewOptions

    chat_id: int | str = settings.chat_id
    thread = _thread_id(settings, result)
    text: str = html_text
    mode: str | None = "HTML"
    owed = "the alerts stay owed for the next run"
    for _attempt in range(8):
        try:
            message = await bot.send_message(
                chat_id=chat_id,
                text=text,
                parse_mode=mode,
                message_thread_id=thread,
                link_preview_options=LinkPreviewOptions(is_disabled=True),
            )
        except tg.RetryAfter as exc:
            wait = _retry_after(exc)
            if result.waited + wait >= MAX_FLOOD_WAIT or wait >= timeouts.deadline:
                result.problem = "flood"
                result.notes.append(
                    f"Telegram flood control: retry after {wait:g}s, more than "
                    f"the {MAX_FLOOD_WAIT:g}s a run may wait; {owed}"
                )
                return result
            log.info("Telegram flood control: waiting %gs", wait)
            result.waited += wait
            import asyncio

            await asyncio.sleep(wait)
            continue
        except tg.ChatMigrated as exc:
            if result.new_chat_id is not None:
                result.problem = "rejected"
                result.notes.append(f"Telegram chat migrated twice; {owed}")
                return result
            result.new_chat_id = int(exc.new_chat_id)
            result.notes.append(
                f"the Telegram group {settings.chat_id} was upgraded to a supergroup with id "
                f"{exc.new_chat_id}: set TELEGRAM_CHAT_ID={exc.new_chat_id} (the alert is sent "
                "there meanwhile)"
            )
            chat_id = int(exc.new_chat_id)
            continue
        except tg.TimedOut:
            result.problem = "network"
            result.notes.append(
                f"Telegram did not answer within {timeouts.read:g}s; {owed} "
                "(the message may have arrived; then it comes twice)"
            )
            return result
        except tg.BadRequest as exc:
            reason = clean(exc.message, settings)
            if "thread not found" in reason.lower() and thread is not None:
                result.notes.append(
                    f"Telegram topic {thread} not found: sent to the chat "
                    "without a topic; check TELEGRAM_THREAD_ID"
                )
                thread = None
                continue
            if mode is not None:
                result.notes.append(
                    f"Telegram refused the alert message ({reason}); re-sent as plain text"
                )
                text, mode, result.plain = plain_text, None, True
                continue
            result.problem = "rejected"
            result.notes.append(
                f"Telegram refused the alert message ({reason}); "
                f"check TELEGRAM_CHAT_ID={settings.chat_id}; {owed}"
            )
            return result
        except tg.Forbidden as exc:
            result.problem = "forbidden"
            result.notes.append(
                f"Telegram refused to post to chat {chat_id} ({clean(exc.message, settings)}): "
                f"add the bot to the chat (or unblock it / press Start in a private chat) and "
                f"check TELEGRAM_CHAT_ID; {owed}"
            )
            return result
        except tg.InvalidToken as exc:
            result.problem = "token"
            result.notes.append(
                f"Telegram rejected the bot token ({clean(exc.message, settings)}): set "
                "TELEGRAM_BOT_TOKEN to the token @BotFather gave (and check "
                f"SHEETQ_TELEGRAM_API_URL={settings.api_url}); {owed}"
            )
            return result
        except tg.NetworkError as exc:  # after its subclasses BadRequest and TimedOut
            result.problem = "network"
            reason = _BODY_DUMP.sub("", str(exc.message))  # "Bad Gateway (502)"
            result.notes.append(
                f"Telegram unreachable or failing ({clean(reason, settings)}); {owed}"
            )
            return result
        except tg.TelegramError as exc:  # a 2xx answer that is not JSON: not the Bot API
            if "Invalid server response" not in str(exc.message):
                raise
            result.problem = "network"
            result.notes.append(
                clean(
                    f"{settings.api_url} answered with something that is not the Bot API (not "
                    f"JSON: a proxy or a login page in between?); {owed}",
                    settings,
                )
            )
            return result
        result.sent, result.problem = True, ""
        result.message_id = int(message.message_id)
        return result
    result.problem = "error"
    result.notes.append(f"Telegram kept refusing the alert; {owed}")
    return result
