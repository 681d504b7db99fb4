"""Redaction of secrets and shortening of texts written to the sheet, logs and alerts.

What is removed: values of the configured ``redact_fields`` of the payload
wherever they appear in the text; bearer / basic credentials; Telegram bot
tokens (``123456:ABC…``, see core.telegram.org/bots/api#authorizing-your-bot);
``key=…``-style secrets in URLs and messages; private-key blocks; the password part of a
URL (``scheme://user:PASSWORD@host``) and of a libpq conninfo (``password=…``).

What is never done: replacing a known password wherever its letters occur. A password
such as ``postgres`` or ``a`` is also an ordinary word or letter in what a handler or
the server wrote, and rewriting it there would alter data (docs/design.md §7, §11).
Secrets are kept out of output by not handing them to handlers (``sheetq.handlers``)
and by masking them where a URL or conninfo carries them.
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
# scheme://user:PASSWORD@host — the user-info's password, any length (RFC 3986 §3.2.1)
_URL_PASSWORD = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://[^\s:/@?#\"'<>]*:)([^\s/?#\"'<>]+)(@)")
# password=VALUE in a libpq conninfo or a URL's query, VALUE plain or single-quoted
_CONNINFO_PASSWORD = re.compile(r"(?i)\b(password\s*=\s*)('(?:[^'\\]|\\.)*'|[^\s&'\"]+)")


def mask_credentials(text: str) -> str:
    """``text`` with the password part of every URL (``postgresql://bob:[redacted]@db/x``)
    and libpq conninfo (``password=[redacted]``) masked; nothing else changes."""
    if not text or ("://" not in text and "=" not in text):
        return text
    text = _URL_PASSWORD.sub(lambda m: m.group(1) + MASK + m.group(3), text)
    return _CONNINFO_PASSWORD.sub(lambda m: m.group(1) + MASK, text)


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
    """The passwords a libpq URL or conninfo carries, as written and percent-decoded: the
    user-info's (``scheme://user:PASSWORD@host/…``) and any ``password=`` parameter; read by
    hand, so that a URL no parser accepts still has them found."""
    from urllib.parse import unquote

    found: list[str] = []
    if "://" in url:
        authority = url.split("://", 1)[1].split("/", 1)[0].split("?", 1)[0]
        userinfo = authority.rsplit("@", 1)[0] if "@" in authority else ""
        if ":" in userinfo:
            found.append(userinfo.split(":", 1)[1])
    found += [m.group(2).strip("'") for m in _CONNINFO_PASSWORD.finditer(url)]
    return [s for s in dict.fromkeys(x for raw in found for x in (raw, unquote(raw))) if s]


def own_secrets(telegram_token: str = "") -> list[str]:
    """sheetq's own secrets as literal values to mask: the bot token (``telegram_token``,
    default ``TELEGRAM_BOT_TOKEN``) and those given to ``register_secret``. Long and
    distinctive, so replacing them alters nothing else. The database password is not here:
    it is masked by position (``mask_credentials``), never by its letters."""
    import os

    token = telegram_token or os.environ.get("TELEGRAM_BOT_TOKEN", "")
    return ([token] if token else []) + sorted(_REGISTERED)


_REGISTERED: set[str] = set()


def register_secret(value: str) -> None:
    """Mask ``value`` too wherever sheetq's own secrets are masked (every log record, the
    unexpected-error line): ``sheetq serve``'s webhook secrets, once expanded."""
    if value and len(value) >= 4:
        _REGISTERED.add(value)


def redact(
    text: str,
    *,
    payload: Mapping[str, Any] | None = None,
    fields: Iterable[str] = (),
    secrets: Iterable[str] = (),
) -> str:
    """``text`` with secrets masked as ``[redacted]``: ``secrets`` (literal values of at
    least 4 characters, e.g. a bot token), the ``fields`` of ``payload``, URL and conninfo
    passwords (``mask_credentials``) and what looks like a token or key."""
    if not text:
        return text
    text = mask_credentials(text)
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
