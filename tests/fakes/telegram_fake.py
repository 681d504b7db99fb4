"""A faithful local fake of the Telegram Bot API for sheetq's alert tests (standard library only).

It is a real HTTP/1.1 server on 127.0.0.1 (``ThreadingHTTPServer`` in a daemon thread, ephemeral
port), so python-telegram-bot talks to it exactly as it talks to api.telegram.org::

    with FakeBotAPI() as fake:
        env["SHEETQ_TELEGRAM_API_URL"] = fake.base_url        # ROOT url, e.g. http://127.0.0.1:PORT
        fake.retry_after_next(3)                               # next sendMessage -> 429
        ...run the product...
        assert fake.messages[0]["plain_text"] == "2 rows failed"

Behaviour follows the official server (tdlib/telegram-bot-api ``Client.cpp``, version 10.0) and
TDLib (``MessageEntity.cpp`` ``parse_html``/``parse_markdown_v2``, ``MessageContent.cpp``):

* Routing: ``GET``/``POST`` ``/bot<token>/<method>``, method names case-insensitive. Other paths ->
  404 ``Not Found``; unknown token -> 401 ``Unauthorized``; unknown method -> 404
  ``Not Found: method not found``. Parameters come from the query string plus a
  form-urlencoded, JSON-object or multipart body (first occurrence wins, non-string JSON values
  are kept as JSON text, as the real server does).
* ``sendMessage`` checks, in the real server's order: ``link_preview_options`` JSON ->
  ``message text is empty`` -> ``text is too long`` (> 32768 UTF-8 bytes) ->
  ``unsupported parse_mode`` -> ``can't parse entities: ...`` (real HTML / MarkdownV2 / Markdown
  parsers, byte offsets included) -> ``chat_id is empty`` -> ``chat not found`` (or the migration
  error for a chat that was migrated) -> ``message thread not found`` (``message_thread_id=1``, or
  a topic missing from a chat's ``_topics`` list, in a forum chat) -> ``text must be non-empty``
  (only spaces/newlines left after markup) -> ``message is too long`` (> 4096 code points after
  markup removal, entity decoding and trimming of spaces/newlines).
* ``getMe`` and ``getChat`` (known chats -> ChatFullInfo, unknown -> ``chat not found``).
* Every request is appended to :attr:`FakeBotAPI.requests`; delivered messages to
  :attr:`FakeBotAPI.messages`. Nothing is printed: the request line (which contains the token)
  is never logged, and the token is never written into the request log.

Fault injection is queued: each fault is consumed by the next request of its method (default
``sendmessage``), in the order the faults were queued, before any validation. What PTB 22.8 raises
(see tests/contract/test_telegram_fake.py):

=============================  =================================================================
``retry_after_next(n)``        ``RetryAfter`` (``.retry_after`` = n; a timedelta with
                               ``PTB_TIMEDELTA=true``, else int + PTBDeprecationWarning)
``migrate_next(id)``           ``ChatMigrated`` (``.new_chat_id``); the chat id it hit stays
                               migrated for later sends, ``id`` is a known chat from now on
``fail_next(400, ...)``        ``BadRequest`` (PTB strips "Bad Request: ", capitalizes the rest)
``fail_next(429, ...)``        ``NetworkError`` when no ``parameters.retry_after`` is given
``block_next()``               ``Forbidden('Forbidden: bot was blocked by the user')``
unknown token / bad path       ``InvalidToken('Unauthorized')`` / ``InvalidToken('Not Found')``
``server_error_next(502)``     ``NetworkError("Bad Gateway (502). Parsing the server response
                               b'<html>...' failed")`` (PTB also logs an ERROR); 500 ->
                               ``NetworkError('Internal Server Error')``
``drop_next()``                ``NetworkError('httpx.RemoteProtocolError: ...')``; not delivered
``down()``                     ``NetworkError('httpx.ReadError: ...')`` or RemoteProtocolError
``slow_next(s)``               ``TimedOut`` if s > read_timeout, but the message IS delivered
``force_parse_error_next()``   ``BadRequest("Can't parse entities: ...")``; only consumed by a
                               request with a ``parse_mode`` (so a plain-text fallback passes)
=============================  =================================================================
"""

from __future__ import annotations

import contextlib
import email.parser
import email.policy
import json
import socket
import sys
import threading
import time
import traceback
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass, field
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = [
    "DEFAULT_CHATS",
    "DEFAULT_TOKEN",
    "FORUM_CHAT_ID",
    "PRIVATE_CHAT_ID",
    "FakeBotAPI",
    "MarkupError",
    "parse_entities",
]

DEFAULT_TOKEN = "123456:TEST-token_abcdefghijklmnopqrstuvwxyz012345"
FORUM_CHAT_ID = -1001234567890
PRIVATE_CHAT_ID = 111

# Chat objects as the Bot API returns them. Keys starting with "_" are fake-only settings and are
# never sent to the client: "_topics" (optional list of existing forum topic ids; without it every
# id except 1, the General topic, is accepted).
DEFAULT_CHATS: dict[int | str, dict[str, Any]] = {
    FORUM_CHAT_ID: {"id": FORUM_CHAT_ID, "type": "supergroup", "title": "Ops", "is_forum": True},
    PRIVATE_CHAT_ID: {
        "id": PRIVATE_CHAT_ID,
        "type": "private",
        "first_name": "Olga",
        "username": "olga_ops",
    },
}

MAX_TEXT_BYTES = 1 << 15  # raw text limit checked by the Bot API server
MAX_MESSAGE_LENGTH = 4096  # TDLib message_text_length_max for bots, in code points
GENERAL_FORUM_TOPIC_ID = 1

_CHAT_FIELDS = (
    "id",
    "type",
    "title",
    "username",
    "first_name",
    "last_name",
    "is_forum",
    "is_direct_messages",
)

_NGINX_PAGE = (
    "<html>\r\n<head><title>{code} {phrase}</title></head>\r\n<body>\r\n"
    "<center><h1>{code} {phrase}</h1></center>\r\n<hr><center>nginx/1.18.0</center>\r\n"
    "</body>\r\n</html>\r\n"
)


# --------------------------------------------------------------------------------------------
# Markup parsers (ports of TDLib's parse_html / parse_markdown_v2 / parse_markdown)
# --------------------------------------------------------------------------------------------


class MarkupError(ValueError):
    """Entity parsing failed; ``str(exc)`` is TDLib's detail (after "can't parse entities: ")."""


_HTML_TAGS = frozenset(
    {
        "a",
        "b",
        "strong",
        "i",
        "em",
        "s",
        "strike",
        "del",
        "u",
        "ins",
        "tg-spoiler",
        "tg-emoji",
        "tg-time",
        "span",
        "pre",
        "code",
        "blockquote",
    }
)
_HTML_ENTITY_TYPES = {
    "b": "bold",
    "strong": "bold",
    "i": "italic",
    "em": "italic",
    "u": "underline",
    "ins": "underline",
    "s": "strikethrough",
    "strike": "strikethrough",
    "del": "strikethrough",
    "tg-spoiler": "spoiler",
}


def _is_space(c: int) -> bool:
    return c in (0x20, 0x09, 0x0D, 0x0A, 0x00, 0x0B)


def _is_alpha(c: int) -> bool:
    return 0x61 <= (c | 0x20) <= 0x7A


def _is_digit(c: int) -> bool:
    return 0x30 <= c <= 0x39


def _utf16_units(c: int) -> int:
    """UTF-16 units contributed by UTF-8 byte ``c`` (0 for continuation bytes)."""
    if c & 0xC0 == 0x80:
        return 0
    return 2 if c >= 0xF0 else 1


def _utf16_len(s: str) -> int:
    return sum(2 if ord(ch) > 0xFFFF else 1 for ch in s)


class _Bytes:
    """UTF-8 bytes with C-style access: reading past the end yields 0 (the NUL terminator)."""

    def __init__(self, text: str) -> None:
        self.data = text.encode("utf-8", "surrogatepass")
        self.n = len(self.data)

    def __getitem__(self, i: int) -> int:
        return self.data[i] if i < self.n else 0

    def text(self, begin: int, end: int) -> str:
        return self.data[begin:end].decode("utf-8", "replace")


def _decode_html_entity(b: _Bytes, pos: int) -> tuple[int, int]:
    """Return (code point or 0, position after the entity) like TDLib's decode_html_entity."""
    end = pos + 1
    res = 0
    if b[pos + 1] == ord("#"):
        end += 1
        if b[pos + 2] == ord("x"):
            end += 1
            while b[end] and chr(b[end]) in "0123456789abcdefABCDEF":
                res = res * 16 + int(chr(b[end]), 16)
                end += 1
        else:
            while _is_digit(b[end]):
                res = res * 10 + b[end] - 0x30
                end += 1
        if res == 0 or res >= 0x10FFFF or end - pos >= 10:
            return 0, pos
    else:
        while _is_alpha(b[end]):
            end += 1
        name = b.data[pos + 1 : end]
        named = {b"lt": "<", b"gt": ">", b"amp": "&", b"quot": '"'}.get(name)
        if named is None:
            return 0, pos  # unsupported literal entity: kept as text, not an error
        res = ord(named)
    return res, (end + 1 if b[end] == ord(";") else end)


def _finish(out: bytearray, need_recheck: bool) -> str:
    text = out.decode("utf-8", "surrogatepass")
    if need_recheck:
        try:  # recombine surrogate pairs; an unmatched half is an error
            text = text.encode("utf-16-le", "surrogatepass").decode("utf-16-le")
        except UnicodeDecodeError:
            raise MarkupError(
                "Text contains invalid Unicode characters after decoding HTML entities, check for "
                "unmatched surrogate code units"
            ) from None
    return text


def _sort_entities(entities: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(entities, key=lambda e: (e["offset"], -e["length"]))


def _parse_html(text: str) -> tuple[str, list[dict[str, Any]]]:
    b = _Bytes(text)
    out = bytearray()
    entities: list[dict[str, Any]] = []
    nested: list[dict[str, Any]] = []
    utf16 = 0
    need_recheck = False
    i = 0
    while i < b.n:
        c = b[i]
        if c == ord("&"):
            code, after = _decode_html_entity(b, i)
            if code:
                utf16 += 2 if code > 0xFFFF else 1
                if 0xD800 <= code <= 0xDFFF:
                    need_recheck = True
                out += chr(code).encode("utf-8", "surrogatepass")
                i = after
                continue
        if c != ord("<"):
            utf16 += _utf16_units(c)
            out.append(c)
            i += 1
            continue

        begin_pos = i
        i += 1
        if b[i] != ord("/"):  # start tag
            while not _is_space(b[i]) and b[i] != ord(">"):
                i += 1
            if b[i] == 0:
                raise MarkupError(f"Unclosed start tag at byte offset {begin_pos}")
            tag = b.data[begin_pos + 1 : i].lower().decode("utf-8", "replace")
            if tag not in _HTML_TAGS:
                raise MarkupError(f'Unsupported start tag "{tag}" at byte offset {begin_pos}')
            argument = ""
            while b[i] != ord(">"):
                while b[i] != 0 and _is_space(b[i]):
                    i += 1
                if b[i] == ord(">"):
                    break
                attr_begin = i
                while not _is_space(b[i]) and b[i] not in b"=>/\"'":
                    i += 1
                attr = b.data[attr_begin:i]
                if not attr:
                    raise MarkupError(
                        f'Empty attribute name in the tag "{tag}" at byte offset {begin_pos}'
                    )
                while b[i] != 0 and _is_space(b[i]):
                    i += 1
                if b[i] != ord("="):
                    if b[i] == 0:
                        raise MarkupError(f'Unclosed start tag "{tag}" at byte offset {begin_pos}')
                    if tag == "blockquote" and attr == b"expandable":
                        argument = "1"
                    continue
                i += 1
                while b[i] != 0 and _is_space(b[i]):
                    i += 1
                if b[i] == 0:
                    raise MarkupError(f'Unclosed start tag "{tag}" at byte offset {begin_pos}')
                if b[i] not in (ord("'"), ord('"')):  # a name token
                    token_begin = i
                    while b[i] and (_is_alpha(b[i]) or _is_digit(b[i]) or b[i] in b".-"):
                        i += 1
                    value = b.text(token_begin, i).lower()
                    if not _is_space(b[i]) and b[i] != ord(">"):
                        raise MarkupError(
                            f"Unexpected end of name token at byte offset {token_begin}"
                        )
                else:  # a string literal
                    quote = b[i]
                    i += 1
                    raw = bytearray()
                    while b[i] != quote and b[i] != 0:
                        if b[i] == ord("&"):
                            code, after = _decode_html_entity(b, i)
                            if code:
                                raw += chr(code).encode("utf-8", "surrogatepass")
                                i = after
                                continue
                        raw.append(b[i])
                        i += 1
                    if b[i] == quote:
                        i += 1
                    value = raw.decode("utf-8", "replace")
                if b[i] == 0:
                    raise MarkupError(f"Unclosed start tag at byte offset {begin_pos}")
                if (
                    (tag == "a" and attr == b"href")
                    or (tag == "tg-emoji" and attr == b"emoji-id")
                    or (tag == "tg-time" and attr == b"format")
                ):
                    argument = value
                elif tag == "code" and attr == b"class" and value.startswith("language-"):
                    argument = value[9:]
                elif tag == "span" and attr == b"class" and value.startswith("tg-"):
                    argument = value[3:]
                elif tag == "blockquote" and attr == b"expandable":
                    argument = "1"
            if tag == "span" and argument != "spoiler":
                raise MarkupError(
                    f'Tag "span" must have class "tg-spoiler" at byte offset {begin_pos}'
                )
            nested.append({"tag": tag, "argument": argument, "offset": utf16, "begin": len(out)})
            i += 1
            continue

        # end tag
        if not nested:
            raise MarkupError(f"Unexpected end tag at byte offset {begin_pos}")
        while not _is_space(b[i]) and b[i] != ord(">"):
            i += 1
        end_tag = b.data[begin_pos + 2 : i].lower().decode("utf-8", "replace")
        while _is_space(b[i]) and b[i] != 0:
            i += 1
        if b[i] != ord(">"):
            raise MarkupError(f"Unclosed end tag at byte offset {begin_pos}")
        top = nested[-1]
        tag = top["tag"]
        if end_tag and end_tag != tag:
            raise MarkupError(
                f'Unmatched end tag at byte offset {begin_pos}, expected "</{tag}>", '
                f'found "</{end_tag}>"'
            )
        if utf16 > top["offset"]:
            _html_entity(entities, top, utf16 - top["offset"], out)
        nested.pop()
        i += 1

    if nested:
        raise MarkupError(f'Can\'t find end tag corresponding to start tag "{nested[-1]["tag"]}"')
    for entity in entities:
        if entity["type"] == "code":
            entity.pop("language", None)
    return _finish(out, need_recheck), _sort_entities(entities)


def _html_entity(
    entities: list[dict[str, Any]], top: dict[str, Any], length: int, out: bytearray
) -> None:
    tag, arg, offset = top["tag"], top["argument"], top["offset"]
    entity: dict[str, Any] = {"offset": offset, "length": length}
    if tag in _HTML_ENTITY_TYPES:
        entity["type"] = _HTML_ENTITY_TYPES[tag]
    elif tag == "span":
        entity["type"] = "spoiler"
    elif tag == "tg-emoji":
        if not arg.isdigit() or int(arg) == 0:
            raise MarkupError("Invalid custom emoji identifier specified")
        entity.update(type="custom_emoji", custom_emoji_id=arg)
    elif tag == "tg-time":
        return  # accepted; the date entity is not modelled
    elif tag == "a":
        url = arg or out[top["begin"] :].decode("utf-8", "replace")
        if not url:
            return
        entity.update(type="text_link", url=url)
    elif tag == "pre":
        last = entities[-1] if entities else None
        if (
            last
            and last["type"] == "code"
            and last["offset"] == offset
            and last["length"] == length
            and last.get("language")
        ):
            last["type"] = "pre"
            return
        entity["type"] = "pre"
    elif tag == "code":
        last = entities[-1] if entities else None
        if (
            last
            and last["type"] == "pre"
            and last["offset"] == offset
            and last["length"] == length
            and arg
        ):
            last["language"] = arg
            return
        entity["type"] = "code"
        if arg:
            entity["language"] = arg
    elif tag == "blockquote":
        entity["type"] = "expandable_blockquote" if arg else "blockquote"
    entities.append(entity)


_MDV2_NAMES = {
    "bold": "Bold",
    "italic": "Italic",
    "underline": "Underline",
    "strikethrough": "Strikethrough",
    "spoiler": "Spoiler",
    "code": "Code",
    "pre": "Pre",
    "pre_code": "PreCode",
    "text_link": "TextUrl",
    "custom_emoji": "CustomEmoji",
    "blockquote": "BlockQuote",
}


def _reserved(c: int) -> MarkupError:
    return MarkupError(
        f"Character '{chr(c)}' is reserved and must be escaped with the preceding '\\'"
    )


def _parse_markdown_v2(text: str) -> tuple[str, list[dict[str, Any]]]:
    b = _Bytes(text)
    out = bytearray()
    entities: list[dict[str, Any]] = []
    nested: list[dict[str, Any]] = []
    utf16 = 0
    have_bq = False
    can_start_bq = True
    i = -1
    while True:
        i += 1
        if i >= b.n:
            break
        c = b[i]
        if c == ord("\\") and 0 < b[i + 1] <= 126:
            i += 1
            utf16 += 1
            out.append(b[i])
            if b[i] != ord("\r"):
                can_start_bq = b[i] == ord("\n")
            continue
        reserved = b"_*[]()~`>#+-=|{}.!\n"
        if nested and nested[-1]["type"] in ("code", "pre", "pre_code"):
            reserved = b"`"
        if c not in reserved:
            if c & 0xC0 != 0x80:
                utf16 += _utf16_units(c)
                if c != ord("\r"):
                    can_start_bq = False
            out.append(c)
            continue

        top_type = nested[-1]["type"] if nested else None
        if top_type is None:
            is_end = False
        elif have_bq and c == ord("\n") and (i + 1 == b.n or b[i + 1] != ord(">")):
            is_end = True
        else:
            is_end = {
                "bold": c == ord("*"),
                "italic": c == ord("_") and b[i + 1] != ord("_"),
                "code": c == ord("`"),
                "pre": c == ord("`") and b[i + 1] == ord("`") and b[i + 2] == ord("`"),
                "pre_code": c == ord("`") and b[i + 1] == ord("`") and b[i + 2] == ord("`"),
                "text_link": c == ord("]"),
                "underline": c == ord("_") and b[i + 1] == ord("_"),
                "strikethrough": c == ord("~"),
                "spoiler": c == ord("|") and b[i + 1] == ord("|"),
                "custom_emoji": c == ord("]"),
                "blockquote": False,
            }[top_type]

        if not is_end:
            argument = ""
            byte_offset = i
            etype: str | None
            if c == ord("_"):
                if b[i + 1] == ord("_"):
                    etype = "underline"
                    i += 1
                else:
                    etype = "italic"
            elif c == ord("*"):
                etype = "bold"
            elif c == ord("~"):
                etype = "strikethrough"
            elif c == ord("|"):
                if b[i + 1] != ord("|"):
                    raise _reserved(c)
                i += 1
                etype = "spoiler"
            elif c == ord("["):
                etype = "text_link"
            elif c == ord("`"):
                if b[i + 1] == ord("`") and b[i + 2] == ord("`"):
                    i += 3
                    etype = "pre"
                    lang_end = i
                    while not _is_space(b[lang_end]) and b[lang_end] != ord("`"):
                        lang_end += 1
                    if i != lang_end and lang_end < b.n and b[lang_end] != ord("`"):
                        etype = "pre_code"
                        argument = b.text(i, lang_end)
                        i = lang_end
                    if b[i] in (ord("\n"), ord("\r")):
                        if b[i + 1] in (ord("\n"), ord("\r")) and b[i] != b[i + 1]:
                            i += 2
                        else:
                            i += 1
                    i -= 1
                else:
                    etype = "code"
            elif c == ord("!"):
                if b[i + 1] != ord("["):
                    raise _reserved(c)
                i += 1
                etype = "custom_emoji"
            elif c == ord("\n"):
                utf16 += 1
                out.append(c)
                can_start_bq = True
                etype = None
            elif c == ord(">"):
                if not can_start_bq:
                    raise _reserved(c)
                if have_bq:
                    etype = None
                else:
                    etype = "blockquote"
                    have_bq = True
            else:
                raise _reserved(c)
            if etype is not None:
                nested.append(
                    {
                        "type": etype,
                        "argument": argument,
                        "offset": utf16,
                        "byte_offset": byte_offset,
                        "begin": len(out),
                    }
                )
            continue

        # end of an entity
        top = nested[-1]
        etype = top["type"]
        if c == ord("\n") and etype != "blockquote":
            if etype != "spoiler" or not (
                top["byte_offset"] == i - 2
                or (top["byte_offset"] == i - 3 and out and out[-1] == ord("\r"))
            ):
                raise MarkupError(
                    f"Can't find end of {_MDV2_NAMES[etype]} entity at byte offset "
                    f"{top['byte_offset']}"
                )
            nested.pop()
            top = nested[-1]
            etype = top["type"]
            if etype != "blockquote":
                raise MarkupError(
                    f"Can't find end of {_MDV2_NAMES[etype]} entity at byte offset "
                    f"{top['byte_offset']}"
                )
            etype = "expandable_blockquote"
        argument = top["argument"]
        skip = utf16 == top["offset"]
        extra: dict[str, Any] = {}
        if etype in ("underline", "spoiler"):
            i += 1
        elif etype in ("pre", "pre_code"):
            i += 2
        elif etype in ("text_link", "custom_emoji"):
            url = ""
            if b[i + 1] != ord("("):
                if etype == "custom_emoji":
                    raise MarkupError("The entity must contain a tg://emoji or tg://time URL")
                url = out[top["begin"] :].decode("utf-8", "replace")
            else:
                i += 2
                url_begin = i
                raw = bytearray()
                while i < b.n and b[i] != ord(")"):
                    if b[i] == ord("\\") and 0 < b[i + 1] <= 126:
                        raw.append(b[i + 1])
                        i += 2
                        continue
                    raw.append(b[i])
                    i += 1
                if b[i] != ord(")"):
                    raise MarkupError(f"Can't find end of a URL at byte offset {url_begin}")
                url = raw.decode("utf-8", "replace")
            if etype == "text_link":
                if url:
                    extra["url"] = url
                else:
                    skip = True
            elif url.startswith("tg://emoji?id="):
                extra["custom_emoji_id"] = url.split("=", 1)[1]
            elif url.startswith("tg://time?"):
                skip = True  # accepted; the date entity is not modelled
            else:
                raise MarkupError("Invalid tg://emoji or tg://time URL specified")
        elif etype in ("blockquote", "expandable_blockquote"):
            have_bq = False
            out.append(b[i])
            can_start_bq = True
            utf16 += 1
            skip = False
        if not skip:
            entity: dict[str, Any] = {
                "type": "pre" if etype == "pre_code" else etype,
                "offset": top["offset"],
                "length": utf16 - top["offset"],
            }
            if etype == "pre_code":
                entity["language"] = argument
            entity.update(extra)
            entities.append(entity)
        nested.pop()

    if have_bq:
        etype = "blockquote"
        if nested[-1]["type"] == "spoiler" and nested[-1]["byte_offset"] == b.n - 2:
            nested.pop()
            etype = "expandable_blockquote"
        if nested[-1]["type"] == "blockquote":
            length = utf16 - nested[-1]["offset"]
            if length:
                entities.append({"type": etype, "offset": nested[-1]["offset"], "length": length})
            nested.pop()
    if nested:
        top = nested[-1]
        raise MarkupError(
            f"Can't find end of {_MDV2_NAMES[top['type']]} entity at byte offset "
            f"{top['byte_offset']}"
        )
    return _finish(out, False), _sort_entities(entities)


def _parse_markdown_v1(text: str) -> tuple[str, list[dict[str, Any]]]:
    b = _Bytes(text)
    out = bytearray()
    entities: list[dict[str, Any]] = []
    utf16 = 0
    i = -1
    while True:
        i += 1
        if i >= b.n:
            break
        c = b[i]
        if c == ord("\\") and b[i + 1] in b"_*`[" and b[i + 1]:
            i += 1
            out.append(b[i])
            utf16 += 1
            continue
        if c not in b"_*`[":
            utf16 += _utf16_units(c)
            out.append(c)
            continue
        begin_pos = i
        end_char = ord("]") if c == ord("[") else c
        is_pre = False
        language = ""
        i += 1
        if c == ord("`") and b[i] == ord("`") and b[i + 1] == ord("`"):
            i += 2
            is_pre = True
            lang_end = i
            while not _is_space(b[lang_end]) and b[lang_end] != ord("`"):
                lang_end += 1
            if i != lang_end and lang_end < b.n and b[lang_end] != ord("`"):
                language = b.text(i, lang_end)
                i = lang_end
            if b[i] in (ord("\n"), ord("\r")):
                if b[i + 1] in (ord("\n"), ord("\r")) and b[i] != b[i + 1]:
                    i += 2
                else:
                    i += 1
        offset = utf16
        while i < b.n and (
            b[i] != end_char or (is_pre and not (b[i + 1] == ord("`") and b[i + 2] == ord("`")))
        ):
            utf16 += _utf16_units(b[i])
            out.append(b[i])
            i += 1
        if i == b.n:
            raise MarkupError(f"Can't find end of the entity starting at byte offset {begin_pos}")
        if offset != utf16:
            entity: dict[str, Any] = {"offset": offset, "length": utf16 - offset}
            if c == ord("_"):
                entity["type"] = "italic"
            elif c == ord("*"):
                entity["type"] = "bold"
            elif c == ord("["):
                if b[i + 1] != ord("("):
                    url = b.text(begin_pos + 1, i)
                else:
                    i += 2
                    url_begin = i
                    while i < b.n and b[i] != ord(")"):
                        i += 1
                    url = b.text(url_begin, i)
                entity.update(type="text_link", url=url)
            else:
                entity["type"] = "pre" if is_pre else "code"
                if is_pre and language:
                    entity["language"] = language
            if entity.get("type") != "text_link" or entity["url"]:
                entities.append(entity)
        if is_pre:
            i += 2
    return _finish(out, False), _sort_entities(entities)


def parse_entities(text: str, parse_mode: str | None) -> tuple[str, list[dict[str, Any]]]:
    """Turn ``text`` into (plain text, Bot API MessageEntity dicts) like the real server.

    ``parse_mode`` is matched case-insensitively; ``None``/``""``/``"none"`` means plain text.
    Raises :class:`MarkupError` with TDLib's detail text, or ``ValueError`` for an unsupported
    parse mode. The plain text is not trimmed yet (the server trims spaces/newlines later).
    """
    mode = (parse_mode or "").lower()
    if mode in ("", "none"):
        return text, []
    if mode == "html":
        return _parse_html(text)
    if mode == "markdownv2":
        return _parse_markdown_v2(text)
    if mode == "markdown":
        return _parse_markdown_v1(text)
    raise ValueError("Unsupported parse_mode")


def _trim(text: str, entities: list[dict[str, Any]]) -> tuple[str, list[dict[str, Any]]]:
    """TDLib's fix_formatted_text trimming: only ' ' and '\\n' count as whitespace."""
    right = text.rstrip(" \n")
    limit = _utf16_len(right)
    kept = []
    for entity in entities:
        if entity["offset"] >= limit:
            continue
        entity = dict(entity, length=min(entity["length"], limit - entity["offset"]))
        if entity["length"] > 0:
            kept.append(entity)
    first_entity = min((e["offset"] for e in kept), default=len(right))
    skip = 0
    while skip < min(first_entity, len(right)) and right[skip] in " \n":
        skip += 1
    for entity in kept:
        entity["offset"] -= skip
    return right[skip:], kept


# --------------------------------------------------------------------------------------------
# The server
# --------------------------------------------------------------------------------------------


@dataclass
class _Fault:
    kind: str  # "reply" | "slow" | "drop" | "parse"
    method: str
    status: int = 0
    body: bytes = b""
    content_type: str = "application/json"
    seconds: float = 0.0
    migrate: tuple[int, ...] = field(default_factory=tuple)  # (new_chat_id,) for migrations


class _Reply(Exception):
    """Internal: abort processing with this HTTP answer."""

    def __init__(self, status: int, description: str, parameters: dict[str, Any] | None = None):
        super().__init__(description)
        self.status = status
        self.description = description
        self.parameters = parameters


#: how long ``FakeBotAPI.stop()`` waits, at most, for its threads to end (seconds)
STOP_JOIN_SECONDS = 5.0


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256  # the default backlog of 5 drops bursts of parallel connections
    fake: FakeBotAPI

    def process_request(self, request: Any, client_address: Any) -> None:
        """ThreadingMixIn's, keeping every handler thread for ``stop()`` to join (it tracks
        none when ``daemon_threads`` is set)."""
        thread = threading.Thread(
            target=self.process_request_thread, args=(request, client_address), daemon=True
        )
        self.fake._track(thread)
        thread.start()

    def handle_error(self, request: Any, client_address: Any) -> None:
        exc = sys.exc_info()[1]
        if isinstance(exc, OSError):
            return  # client went away (timeouts, drops, stop()): expected
        self.fake.server_errors.append(traceback.format_exc())


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "FakeBotAPI/1.0"
    sys_version = ""
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        """Silence http.server: its log lines contain the request line and thus the token."""

    def setup(self) -> None:
        super().setup()
        self.server.fake._register(self.connection)

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            self.server.fake._unregister(self.connection)

    def handle(self) -> None:
        if self.server.fake._is_down:
            self.server.fake._note_refused()
            self.close_connection = True
            return
        super().handle()

    def do_GET(self) -> None:
        self.server.fake._handle(self)

    do_POST = do_GET


class FakeBotAPI:
    """Local Telegram Bot API: see the module docstring. Thread-safe; a context manager."""

    def __init__(
        self,
        token: str = DEFAULT_TOKEN,
        *,
        chats: dict[int | str, dict[str, Any]] | None = None,
    ) -> None:
        self.token = token
        self.bot_user: dict[str, Any] = {
            "id": int(token.split(":", 1)[0]) if token.split(":", 1)[0].isdigit() else 123456,
            "is_bot": True,
            "first_name": "sheetq alerts",
            "username": "sheetq_test_bot",
        }
        source = DEFAULT_CHATS if chats is None else chats
        self.chats: dict[str, dict[str, Any]] = {}
        for key, chat in source.items():
            chat = json.loads(json.dumps(chat))  # deep copy
            if "id" not in chat and isinstance(key, int):
                chat["id"] = key
            self.chats[str(key)] = chat
        self.requests: list[dict[str, Any]] = []
        self.messages: list[dict[str, Any]] = []
        self.server_errors: list[str] = []  # tracebacks of bugs in the fake itself
        self.refused_connections = 0  # connections closed unanswered while down()
        self.migrated: dict[str, int] = {}  # old chat_id (as sent) -> new chat id
        self._faults: list[_Fault] = []
        self._lock = threading.RLock()
        self._next_message_id = 1
        self._down = False
        self._stopping = threading.Event()
        self._conns: dict[socket.socket, threading.Thread] = {}
        self._threads: list[threading.Thread] = []  # every handler thread not yet joined
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    # ---------------------------------------------------------------- lifecycle

    def start(self) -> FakeBotAPI:
        if self._server is not None:
            raise RuntimeError("FakeBotAPI already started")
        self._stopping.clear()
        server = _Server(("127.0.0.1", 0), _Handler)
        server.fake = self
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever,
            kwargs={"poll_interval": 0.05},
            name="FakeBotAPI",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        server, self._server = self._server, None
        if server is None:
            return
        self._stopping.set()  # wakes slow_next sleepers
        server.shutdown()
        server.server_close()
        with self._lock:
            conns = list(self._conns.items())
        for sock, _ in conns:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        with self._lock:
            threads, self._threads = self._threads, []
        if self._thread is not None:
            threads.append(self._thread)
        deadline = time.monotonic() + STOP_JOIN_SECONDS  # ample on a loaded machine
        for thread in threads:
            if thread is not threading.current_thread():
                thread.join(timeout=max(0.0, deadline - time.monotonic()))

    def __enter__(self) -> FakeBotAPI:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        if self._server is None:
            raise RuntimeError("FakeBotAPI is not running; call start() first")
        return int(self._server.server_address[1])

    @property
    def base_url(self) -> str:
        """ROOT url (``http://127.0.0.1:PORT``), the value for SHEETQ_TELEGRAM_API_URL."""
        return f"http://127.0.0.1:{self.port}"

    # ---------------------------------------------------------------- fault injection

    def _queue(self, fault: _Fault, times: int) -> None:
        with self._lock:
            self._faults.extend(_Fault(**vars(fault)) for _ in range(times))

    @staticmethod
    def _json(status: int, description: str, parameters: dict[str, Any] | None) -> bytes:
        payload: dict[str, Any] = {"ok": False, "error_code": status, "description": description}
        if parameters:
            payload["parameters"] = parameters
        return json.dumps(payload).encode()

    def fail_next(
        self,
        status: int,
        description: str,
        *,
        parameters: dict[str, Any] | None = None,
        method: str = "sendmessage",
        times: int = 1,
    ) -> None:
        """Answer the next ``times`` requests of ``method`` with this Bot API error."""
        self._queue(
            _Fault("reply", method.lower(), status, self._json(status, description, parameters)),
            times,
        )

    def retry_after_next(
        self, seconds: int, *, times: int = 1, method: str = "sendmessage"
    ) -> None:
        """429 ``Too Many Requests: retry after N`` with ``parameters.retry_after`` (RetryAfter)."""
        self.fail_next(
            429,
            f"Too Many Requests: retry after {seconds}",
            parameters={"retry_after": seconds},
            method=method,
            times=times,
        )

    def migrate_next(self, new_chat_id: int) -> None:
        """Next sendMessage: the target group 'was upgraded' to supergroup ``new_chat_id``.

        The new chat is registered now (sending to it works); the old chat id stays migrated,
        so later sends to it fail the same way, as on the real server.
        """
        with self._lock:
            self.chats.setdefault(
                str(new_chat_id),
                {
                    "id": new_chat_id,
                    "type": "supergroup",
                    "title": "Migrated group",
                },
            )
            self._faults.append(_Fault("reply", "sendmessage", 400, migrate=(new_chat_id,)))

    def block_next(
        self,
        description: str = "Forbidden: bot was blocked by the user",
        *,
        times: int = 1,
        method: str = "sendmessage",
    ) -> None:
        """403 Forbidden (PTB ``Forbidden``)."""
        self.fail_next(403, description, method=method, times=times)

    def slow_next(self, seconds: float, *, times: int = 1, method: str = "sendmessage") -> None:
        """Process the request normally (a message IS delivered), but answer after ``seconds``."""
        self._queue(_Fault("slow", method.lower(), seconds=seconds), times)

    def drop_next(self, *, times: int = 1, method: str = "sendmessage") -> None:
        """Read the request, then close the connection without answering (nothing delivered)."""
        self._queue(_Fault("drop", method.lower()), times)

    def server_error_next(
        self, status: int = 502, *, times: int = 1, method: str = "sendmessage"
    ) -> None:
        """5xx: JSON body for 500 (as the Bot API), nginx HTML page for anything else."""
        if status == 500:
            self._queue(
                _Fault(
                    "reply", method.lower(), 500, self._json(500, "Internal Server Error", None)
                ),
                times,
            )
            return
        try:
            phrase = HTTPStatus(status).phrase
        except ValueError:
            phrase = "Error"
        page = _NGINX_PAGE.format(code=status, phrase=phrase).encode()
        self._queue(_Fault("reply", method.lower(), status, page, "text/html"), times)

    def force_parse_error_next(self, *, times: int = 1) -> None:
        """400 ``can't parse entities`` for the next sendMessage that has a parse_mode."""
        self._queue(_Fault("parse", "sendmessage"), times)

    def pending_faults(self) -> list[str]:
        """Kinds of faults still queued, e.g. ``["reply:429:sendmessage"]``."""
        with self._lock:
            return [
                f"{f.kind}:{f.status}:{f.method}" if f.status else f"{f.kind}:{f.method}"
                for f in self._faults
            ]

    def clear_faults(self) -> None:
        with self._lock:
            self._faults.clear()

    def down(self) -> None:
        """Telegram unreachable: every connection is accepted and closed without an answer."""
        with self._lock:
            self._down = True
            conns = list(self._conns)
        for sock in conns:  # pooled keep-alive connections break too
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def up(self) -> None:
        with self._lock:
            self._down = False

    # ---------------------------------------------------------------- inspection helpers

    def calls(self, method: str = "sendmessage") -> list[dict[str, Any]]:
        """Recorded requests of one method (lower-case name)."""
        with self._lock:
            return [r for r in self.requests if r["method"] == method.lower()]

    # ---------------------------------------------------------------- internals

    @property
    def _is_down(self) -> bool:
        return self._down

    def _note_refused(self) -> None:
        with self._lock:
            self.refused_connections += 1

    def _track(self, thread: threading.Thread) -> None:
        with self._lock:
            self._threads = [t for t in self._threads if t.is_alive()] + [thread]

    def _register(self, sock: socket.socket) -> None:
        with self._lock:
            self._conns[sock] = threading.current_thread()
            if self._stopping.is_set():  # accepted as stop() ran: end it as stop() does
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)

    def _unregister(self, sock: socket.socket) -> None:
        with self._lock:
            self._conns.pop(sock, None)

    def _take_fault(self, method: str, params: dict[str, str]) -> _Fault | None:
        has_parse_mode = params.get("parse_mode", "").lower() not in ("", "none")
        with self._lock:
            for index, fault in enumerate(self._faults):
                if fault.method != method:
                    continue
                if fault.kind == "parse" and not has_parse_mode:
                    continue
                return self._faults.pop(index)
        return None

    def _record(
        self, h: _Handler, method: str, params: dict[str, str], ctype: str, status: int
    ) -> None:
        with self._lock:
            self.requests.append(
                {
                    "method": method,
                    "params": params,
                    "content_type": ctype,
                    "status": status,
                    "http_method": h.command,
                    "received_at": time.monotonic(),
                }
            )

    def _handle(self, h: _Handler) -> None:
        try:
            self._handle_inner(h)
        except Exception:
            self.server_errors.append(traceback.format_exc())
            with contextlib.suppress(OSError):
                self._write(h, 500, self._json(500, "Internal Server Error: fake crashed", None))

    def _handle_inner(self, h: _Handler) -> None:
        body = self._read_body(h)
        if self._down:
            self._note_refused()
            self._drop(h)
            return
        url = urllib.parse.urlsplit(h.path)
        ctype = (h.headers.get("Content-Type") or "").split(";")[0].strip().lower()
        parts = url.path.split("/")
        method = parts[2].lower() if len(parts) == 3 else ""
        try:
            params = self._parse_params(url.query, body, ctype, h.headers.get("Content-Type", ""))
        except _Reply as reply:
            self._record(h, method, {}, ctype, reply.status)
            self._error(h, reply)
            return
        if len(parts) != 3 or not parts[1].startswith("bot") or not parts[2]:
            self._record(h, method, params, ctype, 404)
            self._error(h, _Reply(404, "Not Found"))
            return
        if parts[1][3:] != self.token:
            self._record(h, method, params, ctype, 401)
            self._error(h, _Reply(401, "Unauthorized"))
            return

        fault = self._take_fault(method, params)
        if fault is not None and fault.kind == "drop":
            self._record(h, method, params, ctype, 0)
            self._drop(h)
            return
        if fault is not None and fault.kind == "reply" and not fault.migrate:
            self._record(h, method, params, ctype, fault.status)
            self._write(h, fault.status, fault.body, fault.content_type)
            return
        if fault is not None and fault.migrate:
            chat_id = params.get("chat_id", "")
            with self._lock:
                if chat_id:
                    self.migrated[chat_id] = fault.migrate[0]
            migration = self._migration_reply(fault.migrate[0])
            self._record(h, method, params, ctype, migration.status)
            self._error(h, migration)
            return

        try:
            if fault is not None and fault.kind == "parse":
                raise _Reply(
                    400,
                    "Bad Request: can't parse entities: Unsupported start tag "
                    '"forced-by-test" at byte offset 0',
                )
            result = self._dispatch(method, params)
        except _Reply as reply:
            self._record(h, method, params, ctype, reply.status)
            if fault is not None and fault.kind == "slow":
                self._sleep(fault.seconds)
            self._error(h, reply)
            return
        self._record(h, method, params, ctype, 200)
        if fault is not None and fault.kind == "slow":
            self._sleep(fault.seconds)
        self._write(h, 200, json.dumps({"ok": True, "result": result}).encode())

    def _sleep(self, seconds: float) -> None:
        self._stopping.wait(seconds)

    # -- HTTP plumbing

    @staticmethod
    def _read_body(h: _Handler) -> bytes:
        if "chunked" in (h.headers.get("Transfer-Encoding") or "").lower():
            chunks = []
            while True:
                size = int(h.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while h.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    break
                chunks.append(h.rfile.read(size))
                h.rfile.readline()
            return b"".join(chunks)
        length = int(h.headers.get("Content-Length") or 0)
        return h.rfile.read(length) if length else b""

    @staticmethod
    def _parse_params(query: str, body: bytes, ctype: str, raw_ctype: str) -> dict[str, str]:
        pairs: list[tuple[str, str]] = urllib.parse.parse_qsl(
            query, keep_blank_values=True, encoding="utf-8", errors="replace"
        )
        if body and ctype == "application/x-www-form-urlencoded":
            pairs += urllib.parse.parse_qsl(body.decode("utf-8", "replace"), keep_blank_values=True)
        elif body and ctype == "application/json":
            try:
                obj = json.loads(body.decode("utf-8", "replace"))
            except ValueError:
                raise _Reply(400, "Bad Request: can't parse JSON object") from None
            if isinstance(obj, str):
                pairs.append(("content", obj))
            elif not isinstance(obj, dict):
                raise _Reply(400, "Bad Request: JSON object expected")
            else:
                pairs += [(k, v if isinstance(v, str) else json.dumps(v)) for k, v in obj.items()]
        elif body and ctype == "multipart/form-data":
            message = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(
                b"Content-Type: " + raw_ctype.encode("latin-1") + b"\r\n\r\n" + body
            )
            if not message.is_multipart():
                raise _Reply(400, "Bad Request: boundary not found")
            for part in message.iter_parts():
                name = part.get_param("name", header="content-disposition")
                if not name:
                    raise _Reply(400, "Bad Request: field name in multipart/form-data not found")
                filename = part.get_filename()
                payload = part.get_payload(decode=True)
                if not isinstance(payload, bytes):
                    payload = b""
                pairs.append(
                    (
                        str(name),
                        f"<file {filename}: {len(payload)} bytes>"
                        if filename
                        else payload.decode("utf-8", "replace"),
                    )
                )
        params: dict[str, str] = {}
        for key, value in pairs:
            params.setdefault(key, value)
        return params

    @staticmethod
    def _write(h: _Handler, status: int, body: bytes, ctype: str = "application/json") -> None:
        try:
            h.send_response(status)
            h.send_header("Content-Type", ctype)
            h.send_header("Content-Length", str(len(body)))
            h.end_headers()
            h.wfile.write(body)
            h.wfile.flush()
        except OSError:
            h.close_connection = True  # the client gave up (e.g. read timeout)

    def _error(self, h: _Handler, reply: _Reply) -> None:
        self._write(h, reply.status, self._json(reply.status, reply.description, reply.parameters))

    @staticmethod
    def _drop(h: _Handler) -> None:
        h.close_connection = True
        with contextlib.suppress(OSError):
            h.connection.shutdown(socket.SHUT_RDWR)

    # -- Bot API methods

    def _dispatch(self, method: str, params: dict[str, str]) -> Any:
        if method == "getme":
            return dict(
                self.bot_user,
                can_join_groups=True,
                can_read_all_group_messages=False,
                supports_inline_queries=False,
                can_connect_to_business=False,
                has_main_web_app=False,
            )
        if method == "sendmessage":
            return self._send_message(params)
        if method == "getchat":
            chat = self._check_chat(params.get("chat_id", ""), write=False)
            full = {k: v for k, v in chat.items() if not k.startswith("_")}
            full.setdefault("accent_color_id", 0)
            full.setdefault("max_reaction_count", 11)
            full.setdefault(
                "accepted_gift_types",
                {
                    "unlimited_gifts": False,
                    "limited_gifts": False,
                    "unique_gifts": False,
                    "premium_subscription": False,
                    "gifts_from_channels": False,
                },
            )
            return full
        raise _Reply(404, "Not Found: method not found")

    def _migration_reply(self, new_chat_id: int) -> _Reply:
        return _Reply(
            400,
            "Bad Request: group chat was upgraded to a supergroup chat",
            {"migrate_to_chat_id": new_chat_id},
        )

    def _check_chat(self, chat_id: str, *, write: bool) -> dict[str, Any]:
        if not chat_id:
            raise _Reply(400, "Bad Request: chat_id is empty")
        with self._lock:
            if write and chat_id in self.migrated:
                raise self._migration_reply(self.migrated[chat_id])
            if chat_id.startswith("@"):
                wanted = chat_id[1:].lower()
                for key, chat in self.chats.items():
                    if (
                        key.lower() == chat_id.lower()
                        or str(chat.get("username", "")).lower() == wanted
                    ):
                        return chat
                raise _Reply(400, "Bad Request: chat not found")
            try:
                numeric = str(int(chat_id))
            except ValueError:
                raise _Reply(400, "Bad Request: chat not found") from None
            found = self.chats.get(numeric)
            if found is None:
                raise _Reply(400, "Bad Request: chat not found")
            return found

    def _send_message(self, p: dict[str, str]) -> dict[str, Any]:
        link_preview: dict[str, Any] | None = None
        if p.get("link_preview_options"):
            try:
                link_preview = json.loads(p["link_preview_options"])
            except ValueError:
                raise _Reply(
                    400, "Bad Request: can't parse link preview options JSON object"
                ) from None
            if not isinstance(link_preview, dict):
                raise _Reply(400, "Bad Request: object expected as link preview options")
        elif p.get("disable_web_page_preview", "").lower() in ("true", "yes", "1"):
            link_preview = {"is_disabled": True}

        text = p.get("text", "")
        if not text:
            raise _Reply(400, "Bad Request: message text is empty")
        if len(text.encode("utf-8", "surrogatepass")) > MAX_TEXT_BYTES:
            raise _Reply(400, "Bad Request: text is too long")
        parse_mode = p.get("parse_mode", "")
        try:
            plain, entities = parse_entities(text, parse_mode)
        except MarkupError as exc:
            raise _Reply(400, f"Bad Request: can't parse entities: {exc}") from None
        except ValueError:
            raise _Reply(400, "Bad Request: unsupported parse_mode") from None

        chat = self._check_chat(p.get("chat_id", ""), write=True)
        thread_id = 0
        with contextlib.suppress(ValueError):
            thread_id = int(p.get("message_thread_id") or 0)
        in_topic = bool(thread_id) and bool(chat.get("is_forum"))
        if in_topic:
            topics = chat.get("_topics")
            if thread_id == GENERAL_FORUM_TOPIC_ID or (
                topics is not None and thread_id not in topics
            ):
                raise _Reply(400, "Bad Request: message thread not found")

        plain, entities = _trim(plain, entities)
        if not plain:
            raise _Reply(400, "Bad Request: text must be non-empty")
        if len(plain) > MAX_MESSAGE_LENGTH:
            raise _Reply(400, "Bad Request: message is too long")

        with self._lock:
            message_id = self._next_message_id
            self._next_message_id += 1
            self.messages.append(dict(p, plain_text=plain, message_id=message_id))
        message: dict[str, Any] = {
            "message_id": message_id,
            "from": dict(self.bot_user),
            "chat": {k: chat[k] for k in _CHAT_FIELDS if k in chat},
            "date": int(time.time()),
            "text": plain,
        }
        if in_topic:
            message["message_thread_id"] = thread_id
            message["is_topic_message"] = True
        if entities:
            message["entities"] = entities
        if link_preview:
            message["link_preview_options"] = {
                k: v
                for k, v in link_preview.items()
                if k
                in (
                    "is_disabled",
                    "url",
                    "prefer_small_media",
                    "prefer_large_media",
                    "show_above_text",
                )
                and v
            }
        return message


@contextlib.contextmanager
def bot_for_sheetq(monkeypatch: Any, *, timeout: str) -> Iterator[FakeBotAPI]:
    """A running fake Bot API that sheetq is configured to use (its URL, token and the
    forum chat in the environment; ``SHEETQ_TELEGRAM_TIMEOUT`` = ``timeout`` seconds)."""
    with FakeBotAPI() as server:
        monkeypatch.setenv("SHEETQ_TELEGRAM_API_URL", server.base_url)
        monkeypatch.setenv("TELEGRAM_BOT_TOKEN", server.token)
        monkeypatch.setenv("TELEGRAM_CHAT_ID", str(FORUM_CHAT_ID))
        monkeypatch.setenv("SHEETQ_TELEGRAM_TIMEOUT", timeout)
        yield server
