"""Logging to stderr with secrets removed.

httpx logs every request URL at INFO, and a Telegram URL carries the bot
token (``/bot<token>/sendMessage``); httpx, httpcore and telegram are kept at
WARNING, and a filter masks the token and other secrets in every record.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

from sheetq.redact import own_secrets, redact

_QUIET = ("httpx", "httpcore", "telegram", "telegram.ext", "urllib3", "gspread")
_SILENT = ("google", "google.auth", "stamina")  # sheetq says the same in its own words


class RedactingFilter(logging.Filter):
    """Rewrite each record's message with secrets masked (never drops a record)."""

    def filter(self, record: logging.LogRecord) -> bool:
        secrets = own_secrets()
        try:
            message = record.getMessage()
        except Exception:
            return True
        cleaned = redact(message, secrets=secrets)
        if record.exc_info and record.exc_info[1] is not None:
            import traceback

            text = "".join(traceback.format_exception(*record.exc_info))
            record.exc_text = redact(text, secrets=secrets)
            record.exc_info = None
        record.msg, record.args = cleaned, None
        return True


class _Stderr(logging.StreamHandler):  # type: ignore[type-arg]
    """A handler writing to whatever ``sys.stderr`` is now (not the one at start-up)."""

    @property
    def stream(self) -> Any:
        return sys.stderr

    @stream.setter
    def stream(self, _value: Any) -> None:
        pass


def configure(verbose: int) -> None:
    """``verbose``: -1 errors only (``-q``), 0 warnings, 1 info, 2+ debug (sheetq's own
    loggers, and at 2+ each HTTP request to the Sheets API as urllib3 logs it)."""
    root = logging.getLogger()
    if not any(isinstance(f, RedactingFilter) for h in root.handlers for f in h.filters):
        handler = _Stderr()
        handler.setFormatter(logging.Formatter("sheetq: %(levelname)s %(name)s: %(message)s"))
        handler.addFilter(RedactingFilter())
        root.addHandler(handler)
    root.setLevel(logging.WARNING)
    level = (
        logging.ERROR
        if verbose < 0
        else logging.WARNING
        if verbose == 0
        else logging.INFO
        if verbose == 1
        else logging.DEBUG
    )
    logging.getLogger("sheetq").setLevel(level)
    for name in _QUIET:
        logging.getLogger(name).setLevel(logging.WARNING)
    if verbose >= 2:  # the Sheets requests (gspread → requests → urllib3); never httpx/Telegram
        logging.getLogger("urllib3").setLevel(logging.DEBUG)
    for name in _SILENT:
        logging.getLogger(name).setLevel(logging.ERROR if verbose < 2 else logging.DEBUG)
