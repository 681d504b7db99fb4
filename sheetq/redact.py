"""Redaction of secrets and shortening of texts written to the sheet, logs and alerts.

What is removed: values of the configured ``redact_fields`` of the payload
wherever they appear in the text; bearer / basic credentials; Telegram bot
tokens (``123456:ABC…``, see core.telegram.org/bots/api#authorizing-your-bot);
``key=…``-style secrets in URLs and messages; private-key blocks.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

MASK = "[redacted]"
_PATTERNS = [
    re.compile(r"(?i)\b(bearer|basic|token|bot)\s+[A-Za-z0-9._~+/=-]{8,}"),
    re.compile(r"\b\d{6,12}:[A-Za-z0-9_-]{30,}\b"),  # Telegram bot token
    re.compile(r"(?i)\bbot\d{6,12}:[A-Za-z0-9_-]{20,}"),
    re.compile(
        r"(?i)\b(api[_-]?key|apikey|access[_-]?token|auth[_-]?token|secret|password|passwd|pwd"
        r"|client[_-]?secret|refresh[_-]?token|private[_-]?key|authorization)"
        r"(\"?\s*[:=]\s*\"?)([^\s\"&,;]{3,})"
    ),
    re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----.*?-----END [A-Z ]*PRIVATE KEY-----", re.S),
    re.compile(r"\bya29\.[A-Za-z0-9._-]{20,}"),  # Google OAuth access token
]


def _field_values(payload: Any, fields: Iterable[str]) -> list[str]:
    wanted = set(fields)
    found: list[str] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if key in wanted and value not in (None, "", True, False):
                    found.append(value if isinstance(value, str) else str(value))
                walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    walk(payload)
    return sorted({v for v in found if len(v) >= 3}, key=len, reverse=True)


def url_passwords(url: str) -> list[str]:
    """The password in a URL's user-info (``scheme://user:PASSWORD@host/…``) as written and
    percent-decoded; read by hand, so that a URL no parser accepts still has it masked."""
    from urllib.parse import unquote

    authority = url.split("://", 1)[-1].split("/", 1)[0].split("?", 1)[0]
    userinfo = authority.rsplit("@", 1)[0] if "@" in authority else ""
    if ":" not in userinfo:
        return []
    raw = userinfo.split(":", 1)[1]
    return [s for s in dict.fromkeys((raw, unquote(raw))) if s]


def own_secrets(telegram_token: str = "", database_url: str = "") -> list[str]:
    """sheetq's own secrets, as literal values to mask: the bot token, the password of the
    queue's database URL (``url_passwords``) and ``PGPASSWORD``. ``database_url`` defaults
    to ``SHEETQ_DATABASE_URL``."""
    import os

    found = [telegram_token or os.environ.get("TELEGRAM_BOT_TOKEN", "")]
    found += url_passwords(database_url or os.environ.get("SHEETQ_DATABASE_URL", ""))
    found.append(os.environ.get("PGPASSWORD", ""))
    return [s for s in found if s]


def redact(
    text: str,
    *,
    payload: Mapping[str, Any] | None = None,
    fields: Iterable[str] = (),
    secrets: Iterable[str] = (),
) -> str:
    """``text`` with secrets masked as ``[redacted]``. ``secrets`` are literal values to hide."""
    if not text:
        return text
    for secret in sorted({s for s in secrets if s and len(s) >= 4}, key=len, reverse=True):
        text = text.replace(secret, MASK)
    if payload is not None and fields:
        for value in _field_values(payload, fields):
            text = text.replace(value, MASK)
    for pattern in _PATTERNS:
        if pattern.groups >= 3:
            text = pattern.sub(lambda m: m.group(1) + m.group(2) + MASK, text)
        elif pattern.groups == 1:
            text = pattern.sub(lambda m: m.group(1) + " " + MASK, text)
        else:
            text = pattern.sub(MASK, text)
    return text


_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def printable(text: str) -> str:
    """``text`` with control characters written as escapes (``\\x1b``, ``\\x00``), so that a
    handler's output can neither corrupt a terminal nor put raw bytes in a cell.

    Escaped: C0 (U+0000–U+001F) except tab and newline, DEL and C1 (U+007F–U+009F), the
    Unicode ``Cc`` category. A Windows line end (CR LF) becomes a newline first.
    """
    if not text:
        return text
    text = text.replace("\r\n", "\n")
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


# Bidirectional controls (Unicode "Cf", UAX #9: ALM, LRM, RLM, LRE…RLO, LRI…PDI) and the
# line/paragraph separators: they reorder or break what a terminal shows around them.
_BIDI = re.compile("[\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def terminal_safe(text: str) -> str:
    """``printable(text)`` with bidirectional controls and line/paragraph separators also
    written as escapes (``\\u202e``), for human output on a terminal: a payload cannot
    make what is printed read differently from what is stored (``--json`` documents keep
    the characters as stored)."""
    return _BIDI.sub(lambda m: f"\\u{ord(m.group()):04x}", printable(text))


def shorten(text: str, limit: int) -> str:
    """At most ``limit`` characters; the cut is marked with ``…``."""
    text = text.strip()
    if len(text) <= limit:
        return text
    return text[: max(0, limit - 1)].rstrip() + "…"


def tail(text: str, limit: int) -> str:
    """The last ``limit`` characters (stderr tails carry the error), cut marked with ``…``."""
    text = text.strip()
    if len(text) <= limit:
        return text
    return "…" + text[-(limit - 1) :].lstrip()


def plural(count: int, word: str) -> str:
    """``1 alert``, ``2 alerts``."""
    return f"{count} {word}" if count == 1 else f"{count} {word}s"
