"""A loopback emulator of the part of Google Sheets API v4 that gspread 6 and sheetq use.

A real HTTP/1.1 server on 127.0.0.1 (``ThreadingHTTPServer`` in a daemon thread) that
answers like Google: same JSON shapes, same quirks (trimmed rows, absent ``values``,
normalised and quoted range echoes, omitted zero fields), same error envelopes. On top
of the API it offers direct state access for tests (no HTTP, not counted), a request
log with counters, and fault injection (429/5xx answers, lost replies, latency, and "a
person" editing the sheet between two requests).

By hand::

    python -m tests.fakes.sheets_emulator --port 8765 --create KEY:Sheet1,Queue

In tests::

    with SheetsEmulator() as emu:
        key = emu.create_spreadsheet(sheets=("Queue", "QueueLog"))
        # point gspread at emu.base_url (a requests.Session that rewrites
        # https://sheets.googleapis.com to it; no credentials needed)

Sources: shared/reference/google-sheets-api.md (section numbers in comments refer to it)
and the recorded Google traffic in shared/reference/gspread-cassettes/ (conformance:
CONFORMANCE.md beside this file). Choices made where Google's behaviour is neither
documented nor recorded are marked ``[U]``; the module docstring of each helper says what
is simplified. Standard library only.
"""

from __future__ import annotations

import argparse
import calendar
import contextlib
import copy
import datetime
import http
import http.server
import json
import math
import random
import re
import socket
import sys
import threading
import traceback
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple
from urllib.parse import parse_qs, unquote, urlsplit

__all__ = ["RecordedRequest", "SheetsEmulator", "main"]

# ---------------------------------------------------------------------------------------
# Constants copied from the recorded responses (identical in every cassette)
# ---------------------------------------------------------------------------------------

DEFAULT_FORMAT: dict[str, Any] = {
    "backgroundColor": {"red": 1, "green": 1, "blue": 1},
    "padding": {"top": 2, "right": 3, "bottom": 2, "left": 3},
    "verticalAlignment": "BOTTOM",
    "wrapStrategy": "OVERFLOW_CELL",
    "textFormat": {
        "foregroundColor": {},
        "fontFamily": "arial,sans,sans-serif",
        "fontSize": 10,
        "bold": False,
        "italic": False,
        "strikethrough": False,
        "underline": False,
        "foregroundColorStyle": {"rgbColor": {}},
    },
    "backgroundColorStyle": {"rgbColor": {"red": 1, "green": 1, "blue": 1}},
}

SPREADSHEET_THEME: dict[str, Any] = {
    "primaryFontFamily": "Arial",
    "themeColors": [
        {"colorType": "TEXT", "color": {"rgbColor": {}}},
        {"colorType": "BACKGROUND", "color": {"rgbColor": {"red": 1, "green": 1, "blue": 1}}},
        {
            "colorType": "ACCENT1",
            "color": {"rgbColor": {"red": 0.25882354, "green": 0.52156866, "blue": 0.95686275}},
        },
        {
            "colorType": "ACCENT2",
            "color": {"rgbColor": {"red": 0.91764706, "green": 0.2627451, "blue": 0.20784314}},
        },
        {
            "colorType": "ACCENT3",
            "color": {"rgbColor": {"red": 0.9843137, "green": 0.7372549, "blue": 0.015686275}},
        },
        {
            "colorType": "ACCENT4",
            "color": {"rgbColor": {"red": 0.20392157, "green": 0.65882355, "blue": 0.3254902}},
        },
        {
            "colorType": "ACCENT5",
            "color": {"rgbColor": {"red": 1, "green": 0.42745098, "blue": 0.003921569}},
        },
        {
            "colorType": "ACCENT6",
            "color": {"rgbColor": {"red": 0.27450982, "green": 0.7411765, "blue": 0.7764706}},
        },
        {
            "colorType": "LINK",
            "color": {"rgbColor": {"red": 0.06666667, "green": 0.33333334, "blue": 0.8}},
        },
    ],
}

DEFAULT_CALLER = "sheetq-tests@sheetq-emulator.iam.gserviceaccount.com"
MAX_CELLS = 10_000_000  # per spreadsheet, all sheets together (section 7)
MAX_CELL_CHARS = 50_000
# Request bodies over this many bytes are refused with 400 before anything is applied
# (section 7, field report; the limit is on the bytes sent, i.e. the JSON as encoded).
MAX_REQUEST_BYTES = 10_485_760
PAYLOAD_TOO_LARGE = f"Request payload size exceeds the limit: {MAX_REQUEST_BYTES} bytes."
ROW_PX, COL_PX = 21, 100
_EPOCH = datetime.datetime(1899, 12, 30)
_ID_ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-"
_READ_OPS = frozenset({"spreadsheets.get", "values.get", "values.batchGet"})

_STATUS = {
    400: ("INVALID_ARGUMENT", "Request contains an invalid argument."),
    401: ("UNAUTHENTICATED", "Request is missing required authentication credential."),
    403: ("PERMISSION_DENIED", "The caller does not have permission"),
    404: ("NOT_FOUND", "Requested entity was not found."),
    408: ("DEADLINE_EXCEEDED", "Request timed out."),
    409: ("ABORTED", "The operation was aborted."),
    429: ("RESOURCE_EXHAUSTED", ""),
    500: ("INTERNAL", "Internal error encountered."),
    501: ("UNIMPLEMENTED", "Operation is not implemented, or supported, or enabled."),
    502: ("UNAVAILABLE", "Bad Gateway"),
    503: ("UNAVAILABLE", "The service is currently unavailable."),
    504: ("DEADLINE_EXCEEDED", "The request timed out. Please try again."),
}


class _ApiError(Exception):
    """An error answered with Google's envelope (section 6)."""

    def __init__(
        self,
        code: int,
        message: str | None = None,
        *,
        status: str | None = None,
        details: list[Any] | None = None,
    ) -> None:
        default_status, default_message = _STATUS.get(code, ("UNKNOWN", "Unknown error."))
        self.code = code
        self.message = default_message if message is None else message
        self.status = status or default_status
        self.details = details
        super().__init__(self.message)

    def body(self) -> dict[str, Any]:
        err: dict[str, Any] = {"code": self.code, "message": self.message, "status": self.status}
        if self.details:
            err["details"] = self.details
        return {"error": err}


class _ReqError(Exception):
    """A failed sub-request of spreadsheets.batchUpdate (wrapped as ``Invalid requests[i]``)."""


def _bad(message: str) -> _ApiError:
    return _ApiError(400, message)


def _invalid_value(field_path: str, type_name: str, value: Any) -> _ApiError:
    text = f"Invalid value at '{field_path}' ({type_name}), {json.dumps(value, ensure_ascii=False)}"
    return _ApiError(
        400,
        text,
        details=[
            {
                "@type": "type.googleapis.com/google.rpc.BadRequest",
                "fieldViolations": [{"field": field_path, "description": text}],
            }
        ],
    )


def _quota_error(op: str, message: str | None) -> _ApiError:
    kind, metric = ("Read", "read") if op in _READ_OPS else ("Write", "write")
    text = message or (
        f"Quota exceeded for quota metric '{kind} requests' and limit '{kind} requests per "
        f"minute per user' of service 'sheets.googleapis.com' for consumer "
        f"'project_number:123456789012'."
    )
    return _ApiError(
        429,
        text,
        details=[
            {
                "@type": "type.googleapis.com/google.rpc.ErrorInfo",
                "reason": "RATE_LIMIT_EXCEEDED",
                "domain": "googleapis.com",
                "metadata": {
                    "consumer": "projects/123456789012",
                    "quota_limit": f"{kind}RequestsPerMinutePerUser",
                    "quota_metric": f"sheets.googleapis.com/{metric}_requests",
                    "service": "sheets.googleapis.com",
                },
            }
        ],
    )


# ---------------------------------------------------------------------------------------
# Numbers, number formats, dates
# ---------------------------------------------------------------------------------------


def _norm_num(x: Any) -> Any:
    """Integral floats become ints so JSON prints ``2``, never ``2.0`` (section 4.4)."""
    if isinstance(x, float) and math.isfinite(x) and x.is_integer() and abs(x) < 2**63:
        return int(x)
    return x


def _parse_json_float(text: str) -> Any:
    return _norm_num(float(text))


def _auto_number(x: float) -> str:
    """Sheets' "Automatic" display: ``2``, ``1.5``, ``0.12``; 15 significant digits.

    [U] very large/small magnitudes use ``1.00E+20`` (Sheets' scientific display).
    """
    if x == 0:
        return "0"
    ax = abs(x)
    if ax >= 1e15 or ax < 1e-9:
        return _sci(x, 2)
    if float(x).is_integer():
        return str(int(x))
    x15 = float(f"{x:.15g}")
    text = f"{x15:.10f}".rstrip("0").rstrip(".")
    return text if text not in ("0", "-0") else _sci(x, 2)


def _sci(x: float, decimals: int) -> str:
    return f"{x:.{decimals}E}"


_NUM_CORE = re.compile(r"([0#?,]*(?:\.[0#?]*)?)")


def _format_number_pattern(x: float, pattern: str) -> str:
    """A small subset of Sheets number patterns: ``0``, ``0.00``, ``#,##0.00``, ``0%``,
    ``$#,##0.00``, ``0.00E+00``; first section only."""
    section = pattern.split(";")[0]
    section = re.sub(r'"([^"]*)"', r"\1", section).replace("\\", "")
    if "E+" in section.upper():
        mant = section.upper().split("E")[0]
        return _sci(x, len(mant.partition(".")[2]))
    start = next((i for i, ch in enumerate(section) if ch in "0#?"), None)
    if start is None:
        return _auto_number(x)
    if start > 0 and section[start - 1] == ".":
        start -= 1
    m = _NUM_CORE.match(section, start)
    core = m.group(1) if m else ""
    prefix, suffix = section[:start], section[start + len(core) :]
    if "%" in prefix + suffix:
        x *= 100
    int_part, _, dec_part = core.partition(".")
    max_dec = len(dec_part)
    min_dec = dec_part.count("0")
    min_int = int_part.count("0")
    grouping = "," in int_part
    text = f"{abs(x):{',' if grouping else ''}.{max_dec}f}"
    if max_dec > min_dec:
        whole, _, frac = text.partition(".")
        frac = frac.rstrip("0")
        if len(frac) < min_dec:
            frac = frac + "0" * (min_dec - len(frac))
        text = whole + ("." + frac if frac else "")
    whole, dot, frac = text.partition(".")
    digits = whole.replace(",", "")
    if min_int == 0 and digits == "0":
        whole = ""
    elif len(digits) < min_int:
        whole = "0" * (min_int - len(digits)) + whole
    text = whole + dot + frac
    negative = x < 0 and any(ch in "123456789" for ch in text)
    return ("-" if negative else "") + prefix + text + suffix


def _serial_to_datetime(serial: float) -> datetime.datetime:
    return _EPOCH + datetime.timedelta(seconds=round(serial * 86400))


def _datetime_to_serial(dt: datetime.datetime) -> Any:
    delta = dt - _EPOCH
    return _norm_num(delta.days + delta.seconds / 86400)


_DATE_TOKENS = re.compile(
    r'"[^"]*"|\\.|am/pm|a/p|yyyy|yy|y|mmmmm|mmmm|mmm|mm|m|dddd|ddd|dd|d|hh|h|ss|s|\.0+|.',
    re.IGNORECASE,
)


def _format_datetime_pattern(serial: float, pattern: str) -> str:
    """Sheets date/time patterns: yyyy yy mmmm mmm mm m dddd ddd dd d hh h mm ss am/pm."""
    dt = _serial_to_datetime(serial)
    tokens = _DATE_TOKENS.findall(pattern)
    kinds = [t.lower() for t in tokens]
    twelve = any(k in ("am/pm", "a/p") for k in kinds)
    out: list[str] = []
    for i, (tok, k) in enumerate(zip(tokens, kinds, strict=True)):
        if k in ("mm", "m"):
            prev = next((kinds[j] for j in range(i - 1, -1, -1) if kinds[j][0] in "hmdys"), "")
            nxt = next((kinds[j] for j in range(i + 1, len(kinds)) if kinds[j][0] in "hmdys"), "")
            minutes = prev.startswith("h") or nxt.startswith("s")
            value = dt.minute if minutes else dt.month
            out.append(f"{value:02d}" if k == "mm" else str(value))
        elif k == "yyyy" or k == "y":
            out.append(f"{dt.year:04d}")
        elif k == "yy":
            out.append(f"{dt.year % 100:02d}")
        elif k == "mmmmm":
            out.append(calendar.month_name[dt.month][0])
        elif k == "mmmm":
            out.append(calendar.month_name[dt.month])
        elif k == "mmm":
            out.append(calendar.month_abbr[dt.month])
        elif k == "dddd":
            out.append(calendar.day_name[dt.weekday()])
        elif k == "ddd":
            out.append(calendar.day_abbr[dt.weekday()])
        elif k in ("dd", "d"):
            out.append(f"{dt.day:02d}" if k == "dd" else str(dt.day))
        elif k in ("hh", "h"):
            hour = (dt.hour % 12 or 12) if twelve else dt.hour
            out.append(f"{hour:02d}" if k == "hh" else str(hour))
        elif k in ("ss", "s"):
            out.append(f"{dt.second:02d}" if k == "ss" else str(dt.second))
        elif k in ("am/pm", "a/p"):
            out.append(("AM" if dt.hour < 12 else "PM")[: 1 if k == "a/p" else 2])
        elif tok.startswith('"'):
            out.append(tok[1:-1])
        elif tok.startswith("\\"):
            out.append(tok[1:])
        elif k.startswith(".0"):
            continue
        else:
            out.append(tok)
    return "".join(out)


_DEFAULT_PATTERNS = {
    "NUMBER": "#,##0.00",
    "PERCENT": "0.00%",
    "CURRENCY": "$#,##0.00",
    "SCIENTIFIC": "0.00E+00",
    "DATE": "M/d/yyyy",
    "TIME": "h:mm:ss am/pm",
    "DATE_TIME": "M/d/yyyy H:mm:ss",
}


def _format_number(x: float, number_format: dict[str, Any] | None) -> str:
    if not number_format:
        return _auto_number(x)
    kind = number_format.get("type", "NUMBER")
    pattern = number_format.get("pattern") or _DEFAULT_PATTERNS.get(kind, "")
    if kind in ("DATE", "TIME", "DATE_TIME"):
        try:
            return _format_datetime_pattern(x, pattern)
        except (OverflowError, ValueError):
            return _auto_number(x)
    if kind == "TEXT" or not pattern:
        return _auto_number(x)
    return _format_number_pattern(x, pattern)


# ---------------------------------------------------------------------------------------
# What a person typing into a cell produces (USER_ENTERED, en_US; section 5)
# ---------------------------------------------------------------------------------------

_PLAIN_NUMBER = re.compile(r"^[+-]?(\d+\.?\d*|\.\d+)$")
_SCI_NUMBER = re.compile(r"^[+-]?(\d+\.?\d*|\.\d+)[eE][+-]?\d+$")
_GROUPED = re.compile(r"^[+-]?\d{1,3}(,\d{3})+(\.\d*)?$")
_PERCENT = re.compile(r"^([+-]?(?:\d+\.?\d*|\.\d+))%$")
_CURRENCY = re.compile(r"^(-?)\$(\d{1,3}(?:,\d{3})+|\d+)(\.\d+)?$")
_ISO_DATE = re.compile(r"^(\d{4})-(\d{1,2})-(\d{1,2})(?:[ T](\d{1,2}):(\d{2})(?::(\d{2}))?)?$")
_US_DATE = re.compile(r"^(\d{1,2})/(\d{1,2})/(\d{4})(?: (\d{1,2}):(\d{2})(?::(\d{2}))?)?$")
_TIME = re.compile(r"^(\d{1,2}):(\d{2})(?::(\d{2}))?(?: ?([AaPp][Mm]))?$")


def _typed_value(
    text: str, cell_format: dict[str, Any] | None
) -> tuple[Value | None, dict[str, Any] | None]:
    """Parse ``text`` as if typed in the Sheets UI (en_US).

    Returns (userEnteredValue as a ``Value``, detected numberFormat or None); ``''`` clears
    the cell.
    A cell whose format is plain text (``numberFormat.type == "TEXT"``) keeps text as is.
    Not parsed (stays text) [U]: currencies other than ``$``, month names, ``1,5``.
    """
    if text == "":
        return None, None
    number_format = (cell_format or {}).get("numberFormat") or {}
    if number_format.get("type") == "TEXT":
        return ("stringValue", text), None
    if text.startswith("'"):
        return ("stringValue", text[1:]), None
    if text.startswith("=") and len(text) > 1:
        return ("formulaValue", text), None
    s = text.strip()
    if s.upper() in ("TRUE", "FALSE"):
        return ("boolValue", s.upper() == "TRUE"), None
    if _PLAIN_NUMBER.match(s):
        return ("numberValue", _norm_num(float(s))), None
    if _SCI_NUMBER.match(s):
        return ("numberValue", _norm_num(float(s))), {"type": "SCIENTIFIC", "pattern": "0.00E+00"}
    if _GROUPED.match(s):
        decimals = len(s.partition(".")[2])
        pattern = "#,##0" + ("." + "0" * decimals if decimals else "")
        value = _norm_num(float(s.replace(",", "")))
        return ("numberValue", value), {"type": "NUMBER", "pattern": pattern}
    m = _PERCENT.match(s)
    if m:
        decimals = len(m.group(1).partition(".")[2])
        pattern = "0" + ("." + "0" * decimals if decimals else "") + "%"
        value = _norm_num(float(f"{float(m.group(1)) / 100:.15g}"))
        return ("numberValue", value), {"type": "PERCENT", "pattern": pattern}
    m = _CURRENCY.match(s)
    if m:
        value = float(m.group(2).replace(",", "") + (m.group(3) or ""))
        value = -value if m.group(1) else value
        return ("numberValue", _norm_num(value)), {"type": "CURRENCY", "pattern": "$#,##0.00"}
    parsed = _typed_datetime(s)
    if parsed is not None:
        serial, fmt = parsed
        return ("numberValue", serial), fmt
    if text.startswith("+") and len(text) > 1:
        # Sheets reads a leading '+' as the start of a formula (section 5).
        return ("formulaValue", "=" + text), None
    return ("stringValue", text), None


def _typed_datetime(s: str) -> tuple[Any, dict[str, Any]] | None:
    m = _ISO_DATE.match(s)
    us = None if m else _US_DATE.match(s)
    if m or us:
        if m:
            year, month, day = int(m.group(1)), int(m.group(2)), int(m.group(3))
            hh, mi, ss = m.group(4), m.group(5), m.group(6)
            date_pattern = "yyyy-mm-dd"
        else:
            assert us is not None
            month, day, year = int(us.group(1)), int(us.group(2)), int(us.group(3))
            hh, mi, ss = us.group(4), us.group(5), us.group(6)
            date_pattern = "M/d/yyyy"
        try:
            dt = datetime.datetime(year, month, day, int(hh or 0), int(mi or 0), int(ss or 0))
        except ValueError:
            return None
        if hh is None:
            return _datetime_to_serial(dt), {"type": "DATE", "pattern": date_pattern}
        return _datetime_to_serial(dt), {"type": "DATE_TIME", "pattern": date_pattern + " H:mm:ss"}
    t = _TIME.match(s)
    if t:
        hour, minute, second = int(t.group(1)), int(t.group(2)), int(t.group(3) or 0)
        ampm = (t.group(4) or "").upper()
        if ampm:
            if not 1 <= hour <= 12:
                return None
            hour = hour % 12 + (12 if ampm == "PM" else 0)
        if hour > 23 or minute > 59 or second > 59:
            return None
        serial = _norm_num((hour * 3600 + minute * 60 + second) / 86400)
        return serial, {"type": "TIME", "pattern": "h:mm:ss am/pm"}
    return None


# ---------------------------------------------------------------------------------------
# Formulas: constant expressions only
# ---------------------------------------------------------------------------------------

_ERRORS = {
    "DIVIDE_BY_ZERO": "#DIV/0!",
    "VALUE": "#VALUE!",
    "NAME": "#NAME?",
    "ERROR": "#ERROR!",
    "REF": "#REF!",
    "N_A": "#N/A",
    "NUM": "#NUM!",
    "NULL_VALUE": "#NULL!",
}
_FORMULA_TOKEN = re.compile(
    r'\s*(?:(\d+\.?\d*(?:[eE][+-]?\d+)?|\.\d+(?:[eE][+-]?\d+)?)|("(?:[^"]|"")*")|'
    r"(TRUE|FALSE)\b|([-+*/^&()]))",
    re.IGNORECASE,
)


class _FormulaError(Exception):
    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message


def _evaluate_formula(formula: str) -> Any:
    """Evaluate ``=<constant expression>``: numbers, strings, TRUE/FALSE, ``+ - * / ^ &``
    and parentheses. Anything else (cell references, functions) is not evaluated: the
    effective value is a ``#NAME?`` error [U] while the formula text is kept."""
    body = formula[1:] if formula.startswith("=") else formula
    tokens: list[tuple[str, Any]] = []
    pos = 0
    body = body.rstrip()
    while pos < len(body):
        m = _FORMULA_TOKEN.match(body, pos)
        if not m or m.end() == pos:
            raise _FormulaError(
                "NAME",
                f"sheets_emulator evaluates constant arithmetic only; cannot evaluate {formula!r}.",
            )
        pos = m.end()
        if m.group(1):
            tokens.append(("num", _norm_num(float(m.group(1)))))
        elif m.group(2):
            tokens.append(("str", m.group(2)[1:-1].replace('""', '"')))
        elif m.group(3):
            tokens.append(("bool", m.group(3).upper() == "TRUE"))
        else:
            tokens.append(("op", m.group(4)))
    if not tokens:
        raise _FormulaError("ERROR", "Formula parse error.")
    parser = _ExprParser(tokens)
    value = parser.concat()
    if parser.i != len(tokens):
        raise _FormulaError("ERROR", "Formula parse error.")
    return _norm_num(value) if isinstance(value, float) else value


class _ExprParser:
    def __init__(self, tokens: list[tuple[str, Any]]) -> None:
        self.tokens = tokens
        self.i = 0

    def _peek(self) -> tuple[str, Any] | None:
        return self.tokens[self.i] if self.i < len(self.tokens) else None

    def _op(self, *ops: str) -> str | None:
        tok = self._peek()
        if tok and tok[0] == "op" and tok[1] in ops:
            self.i += 1
            return str(tok[1])
        return None

    @staticmethod
    def _num(value: Any) -> float:
        if isinstance(value, bool):
            return float(value)
        if isinstance(value, int | float):
            return float(value)
        try:
            return float(value)
        except ValueError:
            raise _FormulaError(
                "VALUE", f"Function cannot parse text '{value}' as a number."
            ) from None

    @staticmethod
    def _text(value: Any) -> str:
        if isinstance(value, bool):
            return "TRUE" if value else "FALSE"
        if isinstance(value, int | float):
            return _auto_number(value)
        return str(value)

    def concat(self) -> Any:
        left = self.additive()
        while self._op("&"):
            left = self._text(left) + self._text(self.additive())
        return left

    def additive(self) -> Any:
        left = self.term()
        while True:
            op = self._op("+", "-")
            if not op:
                return left
            right = self.term()
            left = (
                self._num(left) + self._num(right)
                if op == "+"
                else (self._num(left) - self._num(right))
            )

    def term(self) -> Any:
        left = self.power()
        while True:
            op = self._op("*", "/")
            if not op:
                return left
            right = self._num(self.power())
            if op == "*":
                left = self._num(left) * right
            else:
                if right == 0:
                    raise _FormulaError(
                        "DIVIDE_BY_ZERO", "Function DIVIDE parameter 2 cannot be zero."
                    )
                left = self._num(left) / right

    def power(self) -> Any:
        base = self.unary()
        if self._op("^"):
            exponent = self._num(self.power())
            try:
                return float(self._num(base) ** exponent)
            except (OverflowError, ZeroDivisionError, TypeError):
                raise _FormulaError("NUM", "Invalid power.") from None
        return base

    def unary(self) -> Any:
        if self._op("-"):
            return -self._num(self.unary())
        if self._op("+"):
            return self.unary()
        return self.atom()

    def atom(self) -> Any:
        tok = self._peek()
        if tok is None:
            raise _FormulaError("ERROR", "Formula parse error.")
        if tok == ("op", "("):
            self.i += 1
            value = self.concat()
            if not self._op(")"):
                raise _FormulaError("ERROR", "Formula parse error.")
            return value
        if tok[0] == "op":
            raise _FormulaError("ERROR", "Formula parse error.")
        self.i += 1
        return tok[1]


# ---------------------------------------------------------------------------------------
# Cells, sheets, spreadsheets
# ---------------------------------------------------------------------------------------

_WRITABLE_CELL_FIELDS = ("userEnteredValue", "userEnteredFormat", "note", "dataValidation")
_VALUE_KINDS = ("stringValue", "numberValue", "boolValue", "formulaValue", "errorValue")

# An ExtendedValue kept as a tuple: ("stringValue", "x"), ("numberValue", 2),
# ("boolValue", True), ("formulaValue", "=1+1") or ("errorValue", (type, message)).
# Cells made only of tuples, strings and None are untracked by the cyclic garbage
# collector, which keeps a 50,000-row sheet from slowing every collection.
Value = tuple[str, Any]


def _value_in(extended: dict[str, Any]) -> Value:
    """ExtendedValue JSON -> Value (exactly one member)."""
    kind, payload = next(iter(extended.items()))
    if kind == "errorValue":
        payload = (payload.get("type", "ERROR"), payload.get("message", ""))
    elif kind == "numberValue":
        payload = _norm_num(payload)
    return (kind, payload)


def _value_out(value: Value) -> dict[str, Any]:
    """Value -> ExtendedValue JSON."""
    kind, payload = value
    if kind == "errorValue":
        return {kind: {"type": payload[0], "message": payload[1]}}
    return {kind: payload}


class _Cell(NamedTuple):
    """One cell. Immutable (replaced, never edited) so a spreadsheet copy is cheap."""

    value: Value | None = None  # userEnteredValue
    effective: Value | None = None  # effectiveValue
    formatted: str | None = None  # formattedValue
    fmt: dict[str, Any] | None = None  # userEnteredFormat
    note: str | None = None
    validation: dict[str, Any] | None = None  # dataValidation rule

    def is_empty(self) -> bool:
        return (
            self.value is None
            and self.fmt is None
            and self.note is None
            and self.validation is None
        )

    def as_cell_data(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.value is not None:
            out["userEnteredValue"] = _value_out(self.value)
        if self.fmt is not None:
            out["userEnteredFormat"] = self.fmt
        if self.note is not None:
            out["note"] = self.note
        if self.validation is not None:
            out["dataValidation"] = self.validation
        return out


def _make_cell(data: dict[str, Any]) -> _Cell | None:
    """Build a cell from writable CellData fields, deriving effective/formatted values."""
    extended = data.get("userEnteredValue") or None
    value = _value_in(extended) if extended else None
    fmt = data.get("userEnteredFormat") or None
    effective, formatted = _derive(value, fmt)
    cell = _Cell(
        value,
        effective,
        formatted,
        fmt,
        data.get("note") or None,
        data.get("dataValidation") or None,
    )
    return None if cell.is_empty() else cell


def _derive(value: Value | None, fmt: dict[str, Any] | None) -> tuple[Value | None, str | None]:
    """(effectiveValue, formattedValue) of a userEnteredValue under a format."""
    if value is None:
        return None, None
    kind, payload = value
    if kind == "stringValue":
        return value, str(payload)
    if kind == "numberValue":
        number_format = fmt.get("numberFormat") if fmt else None
        return value, _format_number(payload, number_format)
    if kind == "boolValue":
        return value, "TRUE" if payload else "FALSE"
    if kind == "formulaValue":
        try:
            result = _evaluate_formula(str(payload))
        except _FormulaError as exc:
            return ("errorValue", (exc.kind, exc.message)), _ERRORS[exc.kind]
        return _derive(_extended(result), fmt)
    if kind == "errorValue":
        return value, _ERRORS.get(payload[0], "#ERROR!")
    return None, None


def _extended(value: Any) -> Value:
    if isinstance(value, bool):
        return ("boolValue", value)
    if isinstance(value, int | float):
        return ("numberValue", _norm_num(value))
    return ("stringValue", str(value))


def _with_color_styles(fmt: dict[str, Any]) -> dict[str, Any]:
    """Google stores ``backgroundColorStyle``/``foregroundColorStyle`` beside the plain
    colours (and the reverse) [C: WorksheetTest.test_format]."""
    out = copy.deepcopy(fmt)

    def pair(obj: dict[str, Any], plain: str, style: str) -> None:
        if plain in obj and style not in obj:
            obj[style] = {"rgbColor": copy.deepcopy(obj[plain])}
        elif style in obj and plain not in obj and "rgbColor" in obj[style]:
            obj[plain] = copy.deepcopy(obj[style]["rgbColor"])

    pair(out, "backgroundColor", "backgroundColorStyle")
    if isinstance(out.get("textFormat"), dict):
        pair(out["textFormat"], "foregroundColor", "foregroundColorStyle")
    return out


class _Sheet:
    """One grid. ``grid[r]`` is None (empty row) or ``{column: _Cell}``."""

    def __init__(self, sheet_id: int, title: str, rows: int, cols: int) -> None:
        self.sheet_id = sheet_id
        self.title = title
        self.rows = rows
        self.cols = cols
        self.frozen_rows = 0
        self.frozen_cols = 0
        self.hidden = False
        self.extra: dict[str, Any] = {}  # tabColor, tabColorStyle, rightToLeft, hideGridlines
        self.grid: list[dict[int, _Cell] | None] = [None] * rows
        self.row_meta: list[dict[str, Any] | None] = [None] * rows
        self.col_meta: list[dict[str, Any] | None] = [None] * cols
        self.protected: list[dict[str, Any]] = []
        self.cond_formats: list[dict[str, Any]] = []
        self.basic_filter: dict[str, Any] | None = None

    def clone(self) -> _Sheet:
        new = copy.copy(self)
        new.extra = copy.deepcopy(self.extra)
        new.grid = [dict(r) if r else None for r in self.grid]
        new.row_meta = list(self.row_meta)
        new.col_meta = list(self.col_meta)
        new.protected = copy.deepcopy(self.protected)
        new.cond_formats = copy.deepcopy(self.cond_formats)
        new.basic_filter = copy.deepcopy(self.basic_filter)
        return new

    def get(self, r: int, c: int) -> _Cell | None:
        row = self.grid[r] if r < len(self.grid) else None
        return row.get(c) if row else None

    def put(self, r: int, c: int, cell: _Cell | None) -> None:
        row = self.grid[r]
        if cell is None:
            if row and c in row:
                del row[c]
                if not row:
                    self.grid[r] = None
            return
        if row is None:
            row = self.grid[r] = {}
        row[c] = cell

    def last_value_row(self) -> int:
        """0-based index of the last row holding a value, -1 when there is none."""
        for r in range(len(self.grid) - 1, -1, -1):
            row = self.grid[r]
            if row and any(cell.value is not None for cell in row.values()):
                return r
        return -1

    def has_value(self, r: int, c: int) -> bool:
        if r < 0 or c < 0 or r >= self.rows or c >= self.cols:
            return False
        cell = self.get(r, c)
        return cell is not None and cell.value is not None


class _Book:
    """One spreadsheet."""

    def __init__(self, spreadsheet_id: str, title: str, locale: str, time_zone: str) -> None:
        self.id = spreadsheet_id
        self.title = title
        self.locale = locale
        self.time_zone = time_zone
        self.auto_recalc = "ON_CHANGE"
        self.sheets: list[_Sheet] = []
        self.named: list[dict[str, Any]] = []  # {"namedRangeId", "name", "range"(with sheetId)}
        self.broken_named: list[dict[str, Any]] = []  # #REF! named ranges: hidden, name kept
        self.access = "owner"

    def clone(self) -> _Book:
        new = copy.copy(self)
        new.sheets = [s.clone() for s in self.sheets]
        new.named = copy.deepcopy(self.named)
        new.broken_named = copy.deepcopy(self.broken_named)
        return new

    def sheet_by_id(self, sheet_id: Any) -> _Sheet | None:
        return next((s for s in self.sheets if s.sheet_id == sheet_id), None)

    def sheet_by_title(self, title: str) -> _Sheet | None:
        exact = next((s for s in self.sheets if s.title == title), None)
        if exact is not None:
            return exact
        folded = title.casefold()  # [U] sheet names are unique case-insensitively
        return next((s for s in self.sheets if s.title.casefold() == folded), None)

    def total_cells(self) -> int:
        return sum(s.rows * s.cols for s in self.sheets)


# ---------------------------------------------------------------------------------------
# A1 notation (sections 2 and 4.3)
# ---------------------------------------------------------------------------------------

_REF = re.compile(r"^\$?([A-Za-z]{1,3})?\$?([0-9]+)?$")
_CELL_LIKE = re.compile(r"^[A-Za-z]{1,3}[0-9]+$")
_R1C1_LIKE = re.compile(r"^[Rr][0-9]*[Cc][0-9]*$")
_SIMPLE_TITLE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def _col_letters(c: int) -> str:
    out = ""
    n = c + 1
    while n:
        n, rem = divmod(n - 1, 26)
        out = chr(65 + rem) + out
    return out


def _col_index(letters: str) -> int:
    n = 0
    for ch in letters.upper():
        n = n * 26 + ord(ch) - 64
    return n - 1


def _cell_a1(r: int, c: int) -> str:
    return f"{_col_letters(c)}{r + 1}"


def _quote_title(title: str) -> str:
    """Quote a sheet title in an echoed range only when needed (section 2): ``Sheet1``,
    ``Queue`` bare; ``'D3'``, ``'CRM26'``, ``'My Queue'``, ``'Jon''s'`` quoted.
    [U] non-ASCII titles are quoted."""
    if (
        _SIMPLE_TITLE.match(title)
        and not _CELL_LIKE.match(title)
        and not _R1C1_LIKE.match(title)
        and title.upper() not in ("TRUE", "FALSE")
    ):
        return title
    return "'" + title.replace("'", "''") + "'"


@dataclass(frozen=True, slots=True)
class _Box:
    r0: int
    c0: int
    r1: int  # exclusive
    c1: int  # exclusive

    @property
    def height(self) -> int:
        return self.r1 - self.r0

    @property
    def width(self) -> int:
        return self.c1 - self.c0

    def a1(self) -> str:
        start = _cell_a1(self.r0, self.c0)
        if self.height == 1 and self.width == 1:
            return start
        return f"{start}:{_cell_a1(self.r1 - 1, self.c1 - 1)}"


@dataclass(frozen=True, slots=True)
class _Ref:
    sheet: _Sheet
    box: _Box
    single: bool  # one cell written as "A1": an anchor when writing
    text: str  # as sent by the client


def _echo(sheet: _Sheet, box: _Box) -> str:
    return f"{_quote_title(sheet.title)}!{box.a1()}"


def _split_title(text: str) -> tuple[str | None, str | None]:
    """``'Jon''s'!A1`` -> ("Jon's", "A1"); ``Sheet1!A1`` -> ("Sheet1", "A1");
    ``'Q'`` -> ("Q", None); ``A1`` -> (None, "A1")."""
    if text.startswith("'"):
        buf: list[str] = []
        i = 1
        while True:
            if i >= len(text):
                raise ValueError("unterminated quote")
            ch = text[i]
            if ch == "'":
                if text[i + 1 : i + 2] == "'":
                    buf.append("'")
                    i += 2
                    continue
                break
            buf.append(ch)
            i += 1
        rest = text[i + 1 :]
        if rest == "":
            return "".join(buf), None
        if rest.startswith("!") and len(rest) > 1:
            return "".join(buf), rest[1:]
        raise ValueError("text after quoted title")
    if "!" in text:
        title, _, cells = text.rpartition("!")
        if not title or not cells:
            raise ValueError("empty title or cells")
        return title, cells
    return None, text


def _parse_ref(part: str) -> tuple[int | None, int | None]:
    m = _REF.match(part)
    if not m or (m.group(1) is None and m.group(2) is None):
        raise ValueError(part)
    col = _col_index(m.group(1)) if m.group(1) else None
    row = int(m.group(2)) if m.group(2) else None
    if row is not None and row < 1:
        raise ValueError(part)
    return col, row


def _parse_cells(part: str) -> tuple[int, int, int | None, int | None, bool]:
    """-> (r0, c0, r1 or None for "to the last row", c1 or None, single)."""
    if ":" not in part:
        col, row = _parse_ref(part)
        if col is None or row is None:
            raise ValueError(part)
        return row - 1, col, row, col + 1, True
    first, _, second = part.partition(":")
    ca, ra = _parse_ref(first)
    cb, rb = _parse_ref(second)
    if (ca is not None and ra is None and cb is None) or (
        ca is None and cb is not None and rb is None
    ):
        raise ValueError(part)  # "A:1", "1:A"
    if ra is not None and rb is not None:
        ra, rb = min(ra, rb), max(ra, rb)
    if ca is not None and cb is not None:
        ca, cb = min(ca, cb), max(ca, cb)
    r0 = ra - 1 if ra is not None else 0
    c0 = ca if ca is not None else 0
    return r0, c0, rb, (cb + 1 if cb is not None else None), False


def _grid_limit_error(sheet: _Sheet, box: _Box) -> _ApiError:
    bad_r = max(box.r0, sheet.rows) if box.r1 > sheet.rows else box.r0
    bad_c = max(box.c0, sheet.cols) if box.c1 > sheet.cols else box.c0
    return _bad(
        f"Range ({_quote_title(sheet.title)}!{_cell_a1(bad_r, bad_c)}) exceeds grid "
        f"limits. Max rows: {sheet.rows}, max columns: {sheet.cols}"
    )


def _resolve(book: _Book, text: str) -> _Ref:
    """Resolve an A1 range as Google does; raise 400 ``Unable to parse range: ...``."""
    unable = _bad(f"Unable to parse range: {text}")
    try:
        title, cells = _split_title(text)
    except ValueError:
        raise unable from None
    if title is None:
        assert cells is not None
        try:
            spec = _parse_cells(cells)
        except ValueError:
            sheet = book.sheet_by_title(cells)
            if sheet is not None:
                return _Ref(sheet, _Box(0, 0, sheet.rows, sheet.cols), False, text)
            named = next((n for n in book.named if n["name"].casefold() == cells.casefold()), None)
            if named is None:
                raise unable from None
            sheet = book.sheet_by_id(named["range"].get("sheetId", 0))
            if sheet is None:
                raise unable from None
            box = _grid_box(sheet, named["range"])
            return _Ref(sheet, box, False, text)
        if not book.sheets:
            raise unable
        sheet = book.sheets[0]
    else:
        found = book.sheet_by_title(title)
        if found is None:
            raise unable
        sheet = found
        if cells is None:
            return _Ref(sheet, _Box(0, 0, sheet.rows, sheet.cols), False, text)
        try:
            spec = _parse_cells(cells)
        except ValueError:
            raise unable from None
    r0, c0, r1, c1, single = spec
    box = _Box(r0, c0, sheet.rows if r1 is None else r1, sheet.cols if c1 is None else c1)
    if box.r0 >= sheet.rows or box.c0 >= sheet.cols or box.r1 > sheet.rows or (box.c1 > sheet.cols):
        raise _grid_limit_error(sheet, box)
    return _Ref(sheet, box, single, text)


def _grid_box(sheet: _Sheet, grid_range: dict[str, Any]) -> _Box:
    def get(key: str, default: int) -> int:
        value = grid_range.get(key)
        return default if value is None else int(value)

    return _Box(
        get("startRowIndex", 0),
        get("startColumnIndex", 0),
        get("endRowIndex", sheet.rows),
        get("endColumnIndex", sheet.cols),
    )


def _grid_range_out(grid_range: dict[str, Any]) -> dict[str, Any]:
    """GridRange as Google echoes it: ``sheetId`` omitted when 0 (section 3.9)."""
    out = {k: v for k, v in grid_range.items() if not (k == "sheetId" and v == 0)}
    if "sheetId" in out:
        out = {"sheetId": out.pop("sheetId"), **out}
    return out


# ---------------------------------------------------------------------------------------
# Field masks: partial responses (``fields=``) and update masks (``"fields": ...``)
# ---------------------------------------------------------------------------------------

_MASK_PATH = re.compile(r"[A-Za-z0-9_*@]+(?:[./][A-Za-z0-9_*@]+)*")
MaskTree = dict[str, Any]  # name -> MaskTree, or None for "everything below"


def _parse_mask(text: str) -> MaskTree:
    """``a,b(c,d/e),f.g`` -> {"a": None, "b": {"c": None, "d": {"e": None}}, "f": {"g": None}}."""
    s = re.sub(r"\s+", "", text)
    tree, i = _mask_items(s, 0)
    if i != len(s):
        raise ValueError(text)
    return tree


def _mask_items(s: str, i: int) -> tuple[MaskTree, int]:
    tree: MaskTree = {}
    while i < len(s):
        m = _MASK_PATH.match(s, i)
        if not m:
            raise ValueError(s)
        path = re.split(r"[./]", m.group())
        i = m.end()
        sub: MaskTree | None = None
        if i < len(s) and s[i] == "(":
            sub, i = _mask_items(s, i + 1)
            if i >= len(s) or s[i] != ")":
                raise ValueError(s)
            i += 1
        _mask_add(tree, path, sub)
        if i < len(s) and s[i] == ",":
            i += 1
            continue
        break
    return tree, i


def _mask_add(tree: MaskTree, path: list[str], sub: MaskTree | None) -> None:
    node = tree
    for part in path[:-1]:
        if part in node and node[part] is None:
            return
        node = node.setdefault(part, {})
    last = path[-1]
    if sub is None:
        node[last] = None
    elif last not in node:
        node[last] = sub
    elif node[last] is not None:
        for key, value in sub.items():
            _mask_add(node[last], [key], value)


def _mask_filter(obj: Any, tree: MaskTree | None) -> Any:
    if tree is None:
        return obj
    if isinstance(obj, list):
        return [_mask_filter(x, tree) for x in obj]
    if isinstance(obj, dict):
        out = {}
        for key, value in obj.items():
            if key in tree:
                out[key] = _mask_filter(value, tree[key])
            elif "*" in tree:
                out[key] = _mask_filter(value, tree["*"])
        return out
    return obj


def _mask_wants(tree: MaskTree | None, path: Sequence[str]) -> bool:
    node: Any = tree
    for part in path:
        if node is None:
            return True
        if part in node:
            node = node[part]
        elif "*" in node:
            node = node["*"]
        else:
            return False
    return True


def _mask_apply(target: dict[str, Any], source: dict[str, Any], tree: MaskTree) -> None:
    """Copy the masked fields from ``source`` into ``target``; masked but absent -> cleared."""
    if "*" in tree:
        target.clear()
        target.update(copy.deepcopy(source))
        return
    for key, sub in tree.items():
        if sub is None:
            if key in source and source[key] is not None:
                target[key] = copy.deepcopy(source[key])
            else:
                target.pop(key, None)
            continue
        child = target.get(key)
        child = dict(child) if isinstance(child, dict) else {}
        src = source.get(key)
        _mask_apply(child, src if isinstance(src, dict) else {}, sub)
        if child:
            target[key] = child
        else:
            target.pop(key, None)


def _compact(obj: Any) -> Any:
    """Drop null and False members as proto3 JSON output does (for stored rules)."""
    if isinstance(obj, dict):
        return {k: _compact(v) for k, v in obj.items() if v is not None and v is not False}
    if isinstance(obj, list):
        return [_compact(v) for v in obj]
    return obj


# ---------------------------------------------------------------------------------------
# Request log and faults
# ---------------------------------------------------------------------------------------


@dataclass
class RecordedRequest:
    """One HTTP request as the emulator saw it.

    ``status`` is what the client received; 0 when the reply was dropped by a fault.
    ``counted`` is False for requests answered 429 or 5xx and for dropped replies.
    """

    method: str
    path: str  # raw path, percent-encoding kept, no query string
    query: dict[str, list[str]]
    body: Any  # parsed JSON, or None
    status: int = 0
    op: str = "unknown"
    kinds: list[str] = field(default_factory=list)  # spreadsheets.batchUpdate request kinds
    counted: bool = False


@dataclass
class _Fault:
    kind: str  # "fail" | "lose" | "delay" | "before"
    op: str | None
    remaining: int
    status: int = 0
    retry_after: float | None = None
    message: str | None = None
    mode: str = "disconnect"
    seconds: float = 0.0
    callback: Callable[[SheetsEmulator], None] | None = None


def _op_matches(pattern: str | None, op: str, kinds: Sequence[str]) -> bool:
    if pattern is None:
        return True
    base, _, kind = pattern.partition(":")
    if kind:
        return op == base and kind in kinds
    return op == pattern


# ---------------------------------------------------------------------------------------
# HTTP plumbing
# ---------------------------------------------------------------------------------------


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128
    emulator: SheetsEmulator

    def handle_error(self, request: Any, client_address: Any) -> None:
        exc = sys.exc_info()[1]
        if isinstance(exc, OSError):
            return  # a client hung up; nothing to report
        super().handle_error(request, client_address)


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "ESF"
    sys_version = ""
    timeout = 120  # idle keep-alive connections end after this many seconds
    disable_nagle_algorithm = True  # small JSON replies must not wait for delayed ACKs
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        """Silence the stdlib request log."""

    def handle(self) -> None:
        emulator = self.server.emulator
        with emulator._lock:
            emulator.connections_opened += 1
            emulator._sockets.add(self.connection)
        try:
            super().handle()
        finally:
            with emulator._lock:
                emulator._sockets.discard(self.connection)

    def do_GET(self) -> None:
        self.server.emulator._serve(self)

    do_POST = do_PUT = do_DELETE = do_PATCH = do_GET


# ---------------------------------------------------------------------------------------
# The emulator
# ---------------------------------------------------------------------------------------

_VALUE_RENDER = ("FORMATTED_VALUE", "UNFORMATTED_VALUE", "FORMULA")
_DATE_RENDER = ("SERIAL_NUMBER", "FORMATTED_STRING")
_DIMENSIONS = ("ROWS", "COLUMNS")
_UNSUPPORTED_KINDS = frozenset(
    {
        "updateConditionalFormatRule",
        "updateProtectedRange",
        "duplicateSheet",
        "mergeCells",
        "unmergeCells",
        "updateBorders",
        "cutPaste",
        "findReplace",
        "pasteData",
        "textToColumns",
        "addFilterView",
        "deleteFilterView",
        "updateFilterView",
        "duplicateFilterView",
        "addChart",
        "updateChartSpec",
        "deleteEmbeddedObject",
        "updateEmbeddedObjectPosition",
        "addBanding",
        "updateBanding",
        "deleteBanding",
        "createDeveloperMetadata",
        "updateDeveloperMetadata",
        "deleteDeveloperMetadata",
        "randomizeRange",
        "addDimensionGroup",
        "deleteDimensionGroup",
        "updateDimensionGroup",
        "trimWhitespace",
        "deleteDuplicates",
        "addSlicer",
        "updateSlicerSpec",
        "autoFill",
        "insertRange",
        "deleteRange",
        "addDataSource",
        "updateDataSource",
        "deleteDataSource",
        "refreshDataSource",
        "cancelDataSourceRefresh",
        "updateEmbeddedObjectBorder",
        "addTable",
        "updateTable",
        "deleteTable",
    }
)


class SheetsEmulator:
    """Loopback Google Sheets API v4 emulator (see the module docstring).

    ``caller_email`` is the identity Google would report as editor of protected ranges;
    ``seed`` makes generated ids (spreadsheets, sheets, named/protected ranges) repeatable.
    ``echo_writes = False`` makes ``spreadsheets.batchUpdate`` ignore
    ``includeSpreadsheetInResponse`` (an endpoint that sends no echo of its writes), so
    a client's fallback can be tested.
    """

    base_url: str
    echo_writes: bool = True

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        caller_email: str = DEFAULT_CALLER,
        seed: int | None = None,
    ) -> None:
        self.host = host
        self.port = port
        self.caller_email = caller_email
        self.base_url = ""
        self.requests: list[RecordedRequest] = []
        self.connections_opened = 0
        self.errors: list[str] = []  # tracebacks of unexpected emulator failures (answered 500)
        self._lock = threading.RLock()
        self._rng = random.Random(seed)
        self._books: dict[str, _Book] = {}
        self._faults: list[_Fault] = []
        self._hooks: list[tuple[int, Callable[[SheetsEmulator], None]]] = []
        self._counted = 0  # counted requests since the last reset_counts()
        self._sockets: set[socket.socket] = set()
        self._stopping = threading.Event()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle --------------------------------------------------------------------

    def start(self) -> SheetsEmulator:
        """Start serving in a daemon thread; ``base_url`` is set afterwards."""
        if self._server is not None:
            return self
        server = _Server((self.host, self.port), _Handler)
        server.emulator = self
        self._server = server
        self._stopping.clear()
        host, port = server.server_address[:2]
        self.port = int(port)
        self.base_url = f"http://{host}:{port}"
        self._thread = threading.Thread(
            target=server.serve_forever,
            kwargs={"poll_interval": 0.05},
            name=f"sheets-emulator:{port}",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving, wake delayed requests and close open connections."""
        server, self._server = self._server, None
        if server is None:
            return
        self._stopping.set()
        server.shutdown()
        server.server_close()
        with self._lock:
            sockets = list(self._sockets)
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> SheetsEmulator:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    # -- direct state access (no HTTP, not counted) -------------------------------------

    def create_spreadsheet(
        self,
        title: str = "sheetq test",
        *,
        spreadsheet_id: str | None = None,
        sheets: Sequence[str] = ("Sheet1",),
        time_zone: str = "Etc/GMT",
        locale: str = "en_US",
        rows: int = 1000,
        cols: int = 26,
    ) -> str:
        """Create a spreadsheet; the first sheet has sheetId 0. Returns its id."""
        if not sheets:
            raise ValueError("a spreadsheet needs at least one sheet")
        if isinstance(sheets, str):
            raise TypeError("sheets must be a sequence of titles, not a string")
        with self._lock:
            if spreadsheet_id is None:
                spreadsheet_id = self._new_spreadsheet_id()
            elif not re.fullmatch(r"[A-Za-z0-9_-]+", spreadsheet_id):
                raise ValueError(f"invalid spreadsheet id {spreadsheet_id!r}")
            if spreadsheet_id in self._books:
                raise ValueError(f"spreadsheet {spreadsheet_id!r} already exists")
            book = _Book(spreadsheet_id, title, locale, time_zone)
            for i, sheet_title in enumerate(sheets):
                if book.sheet_by_title(sheet_title) is not None:
                    raise ValueError(f"duplicate sheet title {sheet_title!r}")
                sheet_id = 0 if i == 0 else self._new_sheet_id(book)
                book.sheets.append(_Sheet(sheet_id, sheet_title, rows, cols))
            self._books[spreadsheet_id] = book
            return spreadsheet_id

    def values(
        self, spreadsheet_id: str, title: str, *, render: str = "FORMATTED_VALUE"
    ) -> list[list[Any]]:
        """The whole sheet's values, trimmed like Google (no HTTP, not counted)."""
        with self._lock:
            sheet = self._sheet(spreadsheet_id, title)
            if render not in _VALUE_RENDER:
                raise ValueError(f"render must be one of {_VALUE_RENDER}")
            box = _Box(0, 0, sheet.rows, sheet.cols)
            return self._read_matrix(sheet, box, "ROWS", render, "SERIAL_NUMBER")

    def set_values(
        self,
        spreadsheet_id: str,
        title: str,
        values: list[list[Any]],
        start: str = "A1",
        *,
        user_entered: bool = True,
    ) -> None:
        """A person typing ``values`` from ``start`` on (None skips a cell, "" clears it)."""
        with self._lock:
            sheet = self._sheet(spreadsheet_id, title)
            col, row = _parse_ref(start)
            if col is None or row is None:
                raise ValueError(f"start must be a cell such as 'B2', not {start!r}")
            height = len(values)
            width = max((len(r) for r in values), default=0)
            box = _Box(row - 1, col, row - 1 + height, col + width)
            if box.r1 > sheet.rows or box.c1 > sheet.cols:
                raise ValueError(str(_grid_limit_error(sheet, box)))
            self._write_matrix(sheet, box.r0, box.c0, values, user_entered)

    def add_sheet(self, spreadsheet_id: str, title: str, rows: int = 1000, cols: int = 26) -> int:
        """Add a sheet at the end; returns its (random) sheetId."""
        with self._lock:
            book = self._book(spreadsheet_id)
            if book.sheet_by_title(title) is not None:
                raise ValueError(f"a sheet named {title!r} already exists")
            sheet = _Sheet(self._new_sheet_id(book), title, rows, cols)
            book.sheets.append(sheet)
            return sheet.sheet_id

    def sheet_id(self, spreadsheet_id: str, title: str) -> int:
        """The sheetId of the sheet titled ``title``."""
        with self._lock:
            return self._sheet(spreadsheet_id, title).sheet_id

    def sheet_properties(self, spreadsheet_id: str, title: str) -> dict[str, Any]:
        """Sheet properties as in metadata, but with frozen counts present even when 0."""
        with self._lock:
            book = self._book(spreadsheet_id)
            sheet = self._sheet(spreadsheet_id, title)
            props = self._sheet_props(book, sheet)
            props["gridProperties"].setdefault("frozenRowCount", 0)
            props["gridProperties"].setdefault("frozenColumnCount", 0)
            return props

    def metadata(self, spreadsheet_id: str, *, include_grid_data: bool = False) -> dict[str, Any]:
        """Same as ``GET /v4/spreadsheets/{id}`` without ``fields``. Data validation rules and
        formats live in the grid data (``include_grid_data=True``), as on Google."""
        with self._lock:
            book = self._book(spreadsheet_id)
            return copy.deepcopy(self._book_json(book, include_grid_data, None))

    def cell(self, spreadsheet_id: str, title: str, a1: str) -> dict[str, Any]:
        """One cell's CellData: userEnteredValue, effectiveValue, formattedValue,
        userEnteredFormat, note, dataValidation (absent keys when unset)."""
        with self._lock:
            sheet = self._sheet(spreadsheet_id, title)
            col, row = _parse_ref(a1)
            if col is None or row is None:
                raise ValueError(f"not a cell: {a1!r}")
            if row > sheet.rows or col >= sheet.cols:
                raise ValueError(f"{a1} is outside the grid of {title!r}")
            found = sheet.get(row - 1, col)
            if found is None:
                return {}
            out: dict[str, Any] = {}
            if found.value is not None:
                out["userEnteredValue"] = _value_out(found.value)
                if found.effective is not None:
                    out["effectiveValue"] = _value_out(found.effective)
                out["formattedValue"] = found.formatted
            if found.fmt is not None:
                out["userEnteredFormat"] = copy.deepcopy(found.fmt)
            if found.note is not None:
                out["note"] = found.note
            if found.validation is not None:
                out["dataValidation"] = copy.deepcopy(found.validation)
            return out

    def named_ranges(self, spreadsheet_id: str) -> list[dict[str, Any]]:
        """Named ranges as listed by ``GET ...?fields=namedRanges`` (``[]`` when none)."""
        with self._lock:
            return copy.deepcopy(self._named_json(self._book(spreadsheet_id)))

    def sort_rows(
        self,
        spreadsheet_id: str,
        title: str,
        column_index: int,
        *,
        ascending: bool = True,
        header_rows: int = 1,
    ) -> None:
        """A person sorting the data rows (below ``header_rows``) by a 0-based column."""
        with self._lock:
            sheet = self._sheet(spreadsheet_id, title)
            last = sheet.last_value_row()
            if last < header_rows:
                return
            box = _Box(header_rows, 0, last + 1, sheet.cols)
            _sort_box(sheet, box, [(column_index, ascending)])

    def insert_rows(self, spreadsheet_id: str, title: str, at_row: int, count: int = 1) -> None:
        """A person inserting ``count`` empty rows before 1-based row ``at_row``."""
        with self._lock:
            book = self._book(spreadsheet_id)
            sheet = self._sheet(spreadsheet_id, title)
            if not 1 <= at_row <= sheet.rows + 1 or count < 1:
                raise ValueError("row out of range")
            _insert_dimension(
                book, sheet, "ROWS", at_row - 1, at_row - 1 + count, inherit_before=at_row > 1
            )

    def delete_rows(self, spreadsheet_id: str, title: str, at_row: int, count: int = 1) -> None:
        """A person deleting ``count`` rows from 1-based row ``at_row`` on."""
        with self._lock:
            book = self._book(spreadsheet_id)
            sheet = self._sheet(spreadsheet_id, title)
            if at_row < 1 or count < 1 or at_row - 1 + count > sheet.rows or count >= sheet.rows:
                raise ValueError("rows out of range")
            _delete_dimension(book, sheet, "ROWS", at_row - 1, at_row - 1 + count)

    def reverse_rows(self, spreadsheet_id: str, title: str, *, header_rows: int = 1) -> None:
        """A person reversing the order of the data rows (below ``header_rows``), as a sort by
        a helper column would; blank rows among them move too, rows below the last value stay."""
        with self._lock:
            sheet = self._sheet(spreadsheet_id, title)
            last = sheet.last_value_row()
            if last <= header_rows:
                return
            sheet.grid[header_rows : last + 1] = sheet.grid[header_rows : last + 1][::-1]

    def copy_spreadsheet(self, spreadsheet_id: str) -> str:
        """A copy of a whole spreadsheet (sheets, values, formats, named and protected ranges)
        under a new id, as "Make a copy" would; returns the new id (not counted)."""
        with self._lock:
            book = self._book(spreadsheet_id).clone()
            book.id = self._new_spreadsheet_id()
            self._books[book.id] = book
            return book.id

    def widen(self, spreadsheet_id: str, title: str, columns: int) -> None:
        """A person adding columns at the right until the grid is ``columns`` wide."""
        with self._lock:
            book = self._book(spreadsheet_id)
            sheet = self._sheet(spreadsheet_id, title)
            if columns > sheet.cols:
                _resize(book, sheet, "COLUMNS", columns)

    def move_column(self, spreadsheet_id: str, title: str, from_index: int, to_index: int) -> None:
        """A person dragging the 0-based column ``from_index`` so it ends at ``to_index``."""
        with self._lock:
            book = self._book(spreadsheet_id)
            sheet = self._sheet(spreadsheet_id, title)
            if not (0 <= from_index < sheet.cols and 0 <= to_index < sheet.cols):
                raise ValueError("column out of range")
            dest = to_index + 1 if to_index > from_index else to_index
            _move_dimension(book, sheet, "COLUMNS", from_index, from_index + 1, dest)

    def set_access(self, spreadsheet_id: str, mode: str) -> None:
        """ "owner" (default), "reader" (every write 403) or "none" (everything 403)."""
        if mode not in ("owner", "writer", "reader", "none"):
            raise ValueError("mode must be 'owner', 'reader' or 'none'")
        with self._lock:
            self._book(spreadsheet_id).access = "owner" if mode == "writer" else mode

    # -- counters -------------------------------------------------------------------------

    def count(self, op: str | None = None) -> int:
        """Counted requests (all answered requests except 429, 5xx and dropped replies),
        optionally only those of ``op`` (e.g. "values.get" or
        "spreadsheets.batchUpdate:appendCells")."""
        with self._lock:
            return sum(1 for r in self.requests if r.counted and _op_matches(op, r.op, r.kinds))

    def reset_counts(self) -> None:
        """Start counting afresh (also empties ``requests``); ``after`` hooks count from here."""
        with self._lock:
            self.requests.clear()
            self._counted = 0

    # -- fault injection ----------------------------------------------------------------

    def fail_next(
        self,
        status: int,
        *,
        times: int = 1,
        retry_after: float | None = None,
        op: str | None = None,
        message: str | None = None,
    ) -> None:
        """Answer the next ``times`` matching requests with ``status`` and Google's error
        envelope, without applying them (429 carries the quota message of section 6)."""
        if status < 400:
            raise ValueError("fail_next needs an error status")
        self._add_fault(
            _Fault("fail", op, times, status=status, retry_after=retry_after, message=message)
        )

    def lose_reply_next(
        self,
        *,
        op: str | None = None,
        times: int = 1,
        mode: str = "disconnect",
        seconds: float = 2.0,
    ) -> None:
        """APPLY the next matching requests, then lose the reply: "disconnect" closes the
        socket without a response, "500"/"503" answer 5xx anyway, "timeout" waits
        ``seconds`` and then closes."""
        if mode not in ("disconnect", "timeout", "500", "503"):
            raise ValueError("mode must be 'disconnect', 'timeout', '500' or '503'")
        self._add_fault(_Fault("lose", op, times, mode=mode, seconds=seconds))

    def delay_next(self, seconds: float, *, op: str | None = None, times: int = 1) -> None:
        """Wait ``seconds`` before handling the next matching requests."""
        self._add_fault(_Fault("delay", op, times, seconds=seconds))

    def before_next(
        self, callback: Callable[[SheetsEmulator], None], *, op: str | None = None, times: int = 1
    ) -> None:
        """Run ``callback(emulator)`` (e.g. a person sorting) just before handling the next
        matching requests."""
        self._add_fault(_Fault("before", op, times, callback=callback))

    def after(self, k: int, callback: Callable[[SheetsEmulator], None]) -> None:
        """Run ``callback(emulator)`` (e.g. a person sorting) right after the ``k``-th counted
        request since the last ``reset_counts()`` has been applied, before its reply is sent, so
        before the client can send the next request. Numbering is that of ``count()``: requests
        answered 429 or 5xx and dropped replies are not numbered. Several hooks may be
        registered, also for the same ``k`` (run in registration order); each runs once. A
        callback that raises is recorded in ``errors`` and the reply is sent anyway."""
        if k < 1:
            raise ValueError("k must be >= 1")
        with self._lock:
            self._hooks.append((k, callback))

    def pending_hooks(self) -> int:
        """How many ``after`` hooks have not run yet."""
        with self._lock:
            return len(self._hooks)

    def clear_faults(self) -> None:
        """Forget every queued fault and every ``after`` hook not run yet."""
        with self._lock:
            self._faults.clear()
            self._hooks.clear()

    def pending_faults(self) -> int:
        """How many queued faults are not consumed yet."""
        with self._lock:
            return len(self._faults)

    def _add_fault(self, fault: _Fault) -> None:
        if fault.remaining < 1:
            raise ValueError("times must be >= 1")
        with self._lock:
            self._faults.append(fault)

    def _take_fault(self, kind: str, op: str, kinds: Sequence[str]) -> _Fault | None:
        with self._lock:
            for fault in self._faults:
                if fault.kind == kind and _op_matches(fault.op, op, kinds):
                    fault.remaining -= 1
                    if fault.remaining == 0:
                        self._faults.remove(fault)
                    return fault
        return None

    # -- internals: ids, lookups ----------------------------------------------------------

    def _new_spreadsheet_id(self) -> str:
        while True:
            key = "".join(self._rng.choice(_ID_ALPHABET) for _ in range(44))
            if key not in self._books:
                return key

    def _new_sheet_id(self, book: _Book) -> int:
        while True:
            sheet_id = self._rng.randrange(1, 2**31)
            if book.sheet_by_id(sheet_id) is None:
                return sheet_id

    def _book(self, spreadsheet_id: str) -> _Book:
        try:
            return self._books[spreadsheet_id]
        except KeyError:
            raise KeyError(f"no spreadsheet {spreadsheet_id!r}") from None

    def _sheet(self, spreadsheet_id: str, title: str) -> _Sheet:
        sheet = self._book(spreadsheet_id).sheet_by_title(title)
        if sheet is None:
            raise KeyError(f"no sheet {title!r} in {spreadsheet_id!r}")
        return sheet

    # -- HTTP -----------------------------------------------------------------------------

    def _serve(self, handler: _Handler) -> None:
        method = handler.command.upper()
        parts = urlsplit(handler.path)
        path = parts.path
        query = parse_qs(parts.query, keep_blank_values=True)
        try:
            raw = self._read_body(handler)
        except (ValueError, OSError):
            handler.close_connection = True
            return
        body: Any = None
        body_error = False
        if raw.strip():
            try:
                body = json.loads(raw.decode("utf-8"), parse_float=_parse_json_float)
            except (ValueError, UnicodeDecodeError):
                body_error = True
        op, spreadsheet_id, range_text = _classify(method, path)
        kinds: list[str] = []
        if op == "spreadsheets.batchUpdate" and isinstance(body, dict):
            kinds = [next(iter(r)) for r in body.get("requests") or [] if isinstance(r, dict) and r]
        record = RecordedRequest(method, path, query, body, 0, op, kinds, False)
        with self._lock:
            self.requests.append(record)

        headers: dict[str, str] = {}
        status, payload = 500, _ApiError(500).body()
        try:
            before = self._take_fault("before", op, kinds)
            if before is not None and before.callback is not None:
                before.callback(self)
            delay = self._take_fault("delay", op, kinds)
            if delay is not None:
                self._stopping.wait(delay.seconds)
            fail = self._take_fault("fail", op, kinds)
            lose = None if fail is not None else self._take_fault("lose", op, kinds)
            if fail is not None:
                err = (
                    _quota_error(op, fail.message)
                    if fail.status == 429
                    else _ApiError(fail.status, fail.message)
                )
                status, payload = err.code, err.body()
                if fail.retry_after is not None:
                    value = fail.retry_after
                    headers["Retry-After"] = (
                        str(int(value)) if float(value).is_integer() else str(value)
                    )
            else:
                try:
                    if len(raw) > MAX_REQUEST_BYTES:
                        raise _ApiError(400, PAYLOAD_TOO_LARGE)
                    with self._lock:
                        status, payload = self._route(
                            method, path, query, body, body_error, op, spreadsheet_id, range_text
                        )
                    if "fields" in query and op != "spreadsheets.get":
                        payload = _mask_filter(payload, _partial_mask(query))
                except _ApiError as exc:
                    status, payload = exc.code, exc.body()
                if lose is not None:
                    if lose.mode in ("disconnect", "timeout"):
                        record.status, record.counted = 0, False
                        if lose.mode == "timeout":
                            self._stopping.wait(lose.seconds)
                        self._drop(handler)
                        return
                    err = _ApiError(int(lose.mode))
                    status, payload = err.code, err.body()
        except Exception:
            with self._lock:
                self.errors.append(traceback.format_exc())
            status, payload = 500, _ApiError(500).body()
        record.status = status
        record.counted = status != 429 and status < 500
        if record.counted:
            self._run_hooks()
        self._respond(handler, status, payload, headers)

    def _run_hooks(self) -> None:
        """Number a counted request and run the ``after`` hooks due at that number."""
        with self._lock:
            self._counted += 1
            due = [hook for hook in self._hooks if hook[0] == self._counted]
            self._hooks = [hook for hook in self._hooks if hook[0] != self._counted]
            for _, callback in due:
                try:
                    callback(self)
                except Exception:
                    self.errors.append(traceback.format_exc())

    @staticmethod
    def _read_body(handler: _Handler) -> bytes:
        if handler.headers.get("Transfer-Encoding", "").lower() == "chunked":
            chunks = []
            while True:
                size = int(handler.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while handler.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return b"".join(chunks)
                chunks.append(handler.rfile.read(size))
                handler.rfile.readline()
        length = int(handler.headers.get("Content-Length") or 0)
        return handler.rfile.read(length) if length > 0 else b""

    @staticmethod
    def _respond(handler: _Handler, status: int, payload: Any, headers: dict[str, str]) -> None:
        data = json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
        lines = [
            f"HTTP/1.1 {status} {http.HTTPStatus(status).phrase}",
            "Content-Type: application/json; charset=UTF-8",
            f"Content-Length: {len(data)}",
            "Vary: Origin, X-Origin, Referer",
            f"Date: {handler.date_time_string()}",
            f"Server: {handler.server_version}",
        ]
        lines += [f"{name}: {value}" for name, value in headers.items()]
        if handler.close_connection:
            lines.append("Connection: close")
        head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
        handler.log_request(status)
        try:
            handler.wfile.write(head + data)  # one write: headers and body in one segment
            handler.wfile.flush()
        except OSError:
            handler.close_connection = True

    @staticmethod
    def _drop(handler: _Handler) -> None:
        handler.close_connection = True
        with contextlib.suppress(OSError):
            handler.connection.shutdown(socket.SHUT_RDWR)

    def _route(
        self,
        method: str,
        path: str,
        query: dict[str, list[str]],
        body: Any,
        body_error: bool,
        op: str,
        spreadsheet_id: str | None,
        range_text: str | None,
    ) -> tuple[int, Any]:
        if spreadsheet_id is None or op == "unknown":
            raise _ApiError(404, "Method not found.")
        if body_error:
            raise _bad("Invalid JSON payload received. Unexpected token.")
        book = self._books.get(spreadsheet_id)
        if book is None:
            raise _ApiError(404)
        if book.access == "none" or (book.access == "reader" and op not in _READ_OPS):
            raise _ApiError(403)
        if op == "spreadsheets.get":
            return 200, self._spreadsheets_get(book, query)
        if op == "spreadsheets.batchUpdate":
            return 200, self._spreadsheets_batch_update(book, body)
        if op == "values.get":
            assert range_text is not None
            return 200, self._values_get(book, range_text, query)
        if op == "values.batchGet":
            return 200, self._values_batch_get(book, query)
        if op == "values.update":
            assert range_text is not None
            return 200, self._values_update(book, range_text, query, body)
        if op == "values.batchUpdate":
            return 200, self._values_batch_update(book, body)
        if op == "values.append":
            assert range_text is not None
            return 200, self._values_append(book, range_text, query, body)
        if op == "values.clear":
            assert range_text is not None
            return 200, self._values_clear(book, range_text)
        if op == "values.batchClear":
            return 200, self._values_batch_clear(book, body)
        raise _ApiError(404, "Method not found.")

    # -- reading --------------------------------------------------------------------------

    @staticmethod
    def _render(cell: _Cell | None, render: str, date_render: str) -> Any:
        if cell is None or cell.value is None:
            return ""
        if render == "FORMATTED_VALUE":
            return cell.formatted if cell.formatted is not None else ""
        if render == "FORMULA" and cell.value[0] == "formulaValue":
            return cell.value[1]
        kind, payload = cell.effective or ("", None)
        if kind == "numberValue":
            number_format = (cell.fmt or {}).get("numberFormat") or {}
            if date_render == "FORMATTED_STRING" and number_format.get("type") in (
                "DATE",
                "TIME",
                "DATE_TIME",
            ):
                return cell.formatted
            return payload
        if kind in ("boolValue", "stringValue"):
            return payload
        return cell.formatted or ""

    def _read_matrix(
        self, sheet: _Sheet, box: _Box, major: str, render: str, date_render: str
    ) -> list[list[Any]]:
        """Values of ``box``, trailing empties trimmed (section 4.1)."""
        rows: list[list[Any]] = []
        c0, c1 = box.c0, box.c1
        formatted = render == "FORMATTED_VALUE"
        for row in sheet.grid[box.r0 : min(box.r1, len(sheet.grid))]:
            last = -1
            if row and c1 - c0 <= len(row):  # narrow range: probe its columns right to left
                for c in range(c1 - 1, c0 - 1, -1):
                    cell = row.get(c)
                    if cell is not None and cell.value is not None:
                        last = c
                        break
            elif row:
                for c, cell in row.items():
                    if c0 <= c < c1 and c > last and cell.value is not None:
                        last = c
            if last < 0:
                rows.append([])
                continue
            assert row is not None
            if formatted:
                rows.append(
                    [
                        cell.formatted
                        if (cell := row.get(c)) is not None and cell.value is not None
                        else ""
                        for c in range(c0, last + 1)
                    ]
                )
            else:
                rows.append(
                    [self._render(row.get(c), render, date_render) for c in range(c0, last + 1)]
                )
        if major == "COLUMNS":
            width = max((len(r) for r in rows), default=0)
            columns = [[r[c] if c < len(r) else "" for r in rows] for c in range(width)]
            rows = []
            for col in columns:
                while col and col[-1] == "":
                    col.pop()
                rows.append(col)
        while rows and not rows[-1]:
            rows.pop()
        return rows

    def _value_range(
        self, sheet: _Sheet, box: _Box, major: str, render: str, date_render: str
    ) -> dict[str, Any]:
        out: dict[str, Any] = {"range": _echo(sheet, box), "majorDimension": major}
        values = self._read_matrix(sheet, box, major, render, date_render)
        if values:
            out["values"] = values
        return out

    def _values_get(
        self, book: _Book, range_text: str, query: dict[str, list[str]]
    ) -> dict[str, Any]:
        ref = _resolve(book, range_text)
        major, render, date_render = _read_options(query)
        return self._value_range(ref.sheet, ref.box, major, render, date_render)

    def _values_batch_get(self, book: _Book, query: dict[str, list[str]]) -> dict[str, Any]:
        major, render, date_render = _read_options(query)
        refs = [_resolve(book, text) for text in query.get("ranges", [])]
        out: dict[str, Any] = {"spreadsheetId": book.id}
        if refs:
            out["valueRanges"] = [
                self._value_range(r.sheet, r.box, major, render, date_render) for r in refs
            ]
        return out

    # -- writing values -------------------------------------------------------------------

    def _write_matrix(
        self, sheet: _Sheet, r0: int, c0: int, matrix: Sequence[Sequence[Any]], user_entered: bool
    ) -> tuple[set[int], set[int], int]:
        """Write values from (r0, c0); None skips a cell, "" clears it. Returns the rows and
        columns that received a value and the number of cells written."""
        rows_hit: set[int] = set()
        col_flags = [False] * max((len(r) for r in matrix), default=0)
        cells = 0
        grid = sheet.grid
        for i, row_values in enumerate(matrix):
            r = r0 + i
            row = grid[r]
            written = 0
            for j, value in enumerate(row_values):
                if value is None:
                    continue
                written += 1
                col_flags[j] = True
                c = c0 + j
                old = row.get(c) if row else None
                fmt = old.fmt if old is not None else None
                if value.__class__ is str and not user_entered:
                    new_value: Value | None = ("stringValue", value) if value else None
                elif isinstance(value, bool):
                    new_value = ("boolValue", value)
                elif isinstance(value, int | float):
                    new_value = ("numberValue", _norm_num(value))
                elif user_entered:
                    new_value, detected = _typed_value(str(value), fmt)
                    if detected and not (fmt or {}).get("numberFormat"):
                        fmt = {**(fmt or {}), "numberFormat": detected}
                else:
                    new_value = ("stringValue", str(value)) if value != "" else None
                if old is None or (old.fmt is None and old.note is None and old.validation is None):
                    if new_value is None and fmt is None:
                        if row is not None and old is not None:
                            del row[c]
                        continue
                    cell = _Cell(new_value, *_derive(new_value, fmt), fmt)
                else:
                    cell = _Cell(new_value, *_derive(new_value, fmt), fmt, old.note, old.validation)
                if row is None:
                    row = grid[r] = {}
                row[c] = cell
            if written:
                rows_hit.add(r)
                cells += written
            if row is not None and not row:
                grid[r] = None
        cols_hit = {c0 + j for j, hit in enumerate(col_flags) if hit}
        return rows_hit, cols_hit, cells

    @staticmethod
    def _check_matrix(values: Any, where: str) -> list[list[Any]]:
        if values is None:
            return []
        if not isinstance(values, list):
            raise _invalid_value(where, "type.googleapis.com/google.protobuf.ListValue", values)
        for i, row in enumerate(values):
            if not isinstance(row, list):
                raise _invalid_value(
                    f"{where}[{i}]", "type.googleapis.com/google.protobuf.ListValue", row
                )
            for j, value in enumerate(row):
                if isinstance(value, dict):
                    raise _bad(f"Invalid values[{i}][{j}]: struct_value")
                if isinstance(value, list):
                    raise _bad(f"Invalid values[{i}][{j}]: list_value")
                if isinstance(value, str) and len(value) > MAX_CELL_CHARS:
                    raise _bad(
                        f"Your input contains more than the maximum of {MAX_CELL_CHARS} "
                        "characters in a single cell."
                    )
        return values

    def _write_value_range(
        self,
        book: _Book,
        ref: _Ref,
        matrix: list[list[Any]],
        major: str,
        user_entered: bool,
        prefix: str = "",
    ) -> tuple[dict[str, Any], set[tuple[int, int]], set[tuple[int, int]], int]:
        if major == "COLUMNS":
            height = max((len(c) for c in matrix), default=0)
            matrix = [[col[i] if i < len(col) else None for col in matrix] for i in range(height)]
        sheet, box = ref.sheet, ref.box
        height = len(matrix)
        width = max((len(r) for r in matrix), default=0)
        if height == 0 or width == 0:
            anchor = _Box(box.r0, box.c0, box.r0 + 1, box.c0 + 1) if ref.single else box
            return {"updatedRange": _echo(sheet, anchor)}, set(), set(), 0
        if not ref.single:
            if height > box.height:
                raise _bad(
                    f"{prefix}Requested writing within range [{ref.text}], but tried "
                    f"writing to row [{box.r0 + box.height + 1}]"
                )
            if width > box.width:
                raise _bad(
                    f"{prefix}Requested writing within range [{ref.text}], but tried "
                    f"writing to column [{_col_letters(box.c0 + box.width)}]"
                )
        target = _Box(box.r0, box.c0, box.r0 + height, box.c0 + width)
        if target.r1 > sheet.rows or target.c1 > sheet.cols:
            raise _grid_limit_error(sheet, target)
        rows, cols, cells = self._write_matrix(sheet, box.r0, box.c0, matrix, user_entered)
        result: dict[str, Any] = {"updatedRange": _echo(sheet, target)}
        _put_nonzero(result, "updatedRows", len(rows))
        _put_nonzero(result, "updatedColumns", len(cols))
        _put_nonzero(result, "updatedCells", cells)
        sid = sheet.sheet_id
        return (result, {(sid, r) for r in rows}, {(sid, c) for c in cols}, cells)

    def _updated_data(
        self, book: _Book, range_echo: str, options: dict[str, Any]
    ) -> dict[str, Any]:
        ref = _resolve(book, range_echo)
        render = _enum_value(
            options.get("responseValueRenderOption"),
            _VALUE_RENDER,
            "FORMATTED_VALUE",
            "response_value_render_option",
            "ValueRenderOption",
        )
        date_render = _enum_value(
            options.get("responseDateTimeRenderOption"),
            _DATE_RENDER,
            "SERIAL_NUMBER",
            "response_date_time_render_option",
            "DateTimeRenderOption",
        )
        return self._value_range(ref.sheet, ref.box, "ROWS", render, date_render)

    def _values_update(
        self, book: _Book, range_text: str, query: dict[str, list[str]], body: Any
    ) -> dict[str, Any]:
        user_entered = _input_option(_first(query, "valueInputOption"))
        body = body if body is not None else {}
        if not isinstance(body, dict):
            raise _bad("Invalid JSON payload received. Expected an object.")
        matrix = self._check_matrix(body.get("values"), "data.values")
        major = _enum_value(
            body.get("majorDimension"), _DIMENSIONS, "ROWS", "data.major_dimension", "Dimension"
        )
        ref = _resolve(book, range_text)
        result, _, _, _ = self._write_value_range(book, ref, matrix, major, user_entered)
        out = {"spreadsheetId": book.id, **result}
        if _truthy(_first(query, "includeValuesInResponse")):
            options = {
                "responseValueRenderOption": _first(query, "responseValueRenderOption"),
                "responseDateTimeRenderOption": _first(query, "responseDateTimeRenderOption"),
            }
            out["updatedData"] = self._updated_data(book, result["updatedRange"], options)
        return out

    def _values_batch_update(self, book: _Book, body: Any) -> dict[str, Any]:
        if not isinstance(body, dict):
            raise _bad("Invalid JSON payload received. Expected an object.")
        user_entered = _input_option(body.get("valueInputOption"))
        data = body.get("data") or []
        if not isinstance(data, list):
            raise _invalid_value(
                "data", "type.googleapis.com/google.apps.sheets.v4.ValueRange", data
            )
        tx = book.clone()
        responses = []
        all_rows: set[tuple[int, int]] = set()
        all_cols: set[tuple[int, int]] = set()
        total_cells = 0
        sheets_hit: set[int] = set()
        for i, item in enumerate(data):
            if not isinstance(item, dict) or not isinstance(item.get("range"), str):
                raise _bad(f"Invalid data[{i}]: range is required")
            matrix = self._check_matrix(item.get("values"), f"data[{i}].values")
            major = _enum_value(
                item.get("majorDimension"),
                _DIMENSIONS,
                "ROWS",
                f"data[{i}].major_dimension",
                "Dimension",
            )
            ref = _resolve(tx, item["range"])
            result, rows, cols, cells = self._write_value_range(
                tx, ref, matrix, major, user_entered, prefix=f"Invalid data[{i}]: "
            )
            if cells:
                sheets_hit.add(ref.sheet.sheet_id)
            all_rows |= rows
            all_cols |= cols
            total_cells += cells
            response = {"spreadsheetId": book.id, **result}
            if body.get("includeValuesInResponse"):
                response["updatedData"] = self._updated_data(tx, result["updatedRange"], body)
            responses.append(response)
        self._books[book.id] = tx
        out: dict[str, Any] = {"spreadsheetId": book.id}
        # [U] totals count distinct rows/columns/cells [C: WorksheetTest.test_batch_update]
        _put_nonzero(out, "totalUpdatedRows", len(all_rows))
        _put_nonzero(out, "totalUpdatedColumns", len(all_cols))
        _put_nonzero(out, "totalUpdatedCells", total_cells)
        _put_nonzero(out, "totalUpdatedSheets", len(sheets_hit))
        if responses:
            out["responses"] = responses
        return out

    def _values_append(
        self, book: _Book, range_text: str, query: dict[str, list[str]], body: Any
    ) -> dict[str, Any]:
        """values:append with Google's table detection (section 3.6)."""
        user_entered = _input_option(_first(query, "valueInputOption"))
        insert = _enum_value(
            _first(query, "insertDataOption"),
            ("OVERWRITE", "INSERT_ROWS"),
            "OVERWRITE",
            "insert_data_option",
            "InsertDataOption",
        )
        body = body if body is not None else {}
        if not isinstance(body, dict):
            raise _bad("Invalid JSON payload received. Expected an object.")
        matrix = self._check_matrix(body.get("values"), "data.values")
        major = _enum_value(
            body.get("majorDimension"), _DIMENSIONS, "ROWS", "data.major_dimension", "Dimension"
        )
        if major == "COLUMNS":
            height = max((len(c) for c in matrix), default=0)
            matrix = [[col[i] if i < len(col) else None for col in matrix] for i in range(height)]
        ref = _resolve(book, range_text)
        sheet, box = ref.sheet, ref.box
        table = _find_table(sheet, box, ref.single)
        if table is None:
            r0, c0 = box.r0, box.c0
        else:
            r0, c0 = table.r1, table.c0
        height = len(matrix)
        width = max((len(r) for r in matrix), default=0)
        out: dict[str, Any] = {"spreadsheetId": book.id}
        if table is not None:
            out["tableRange"] = _echo(sheet, table)
        if height == 0 or width == 0:
            out["updates"] = {
                "spreadsheetId": book.id,
                "updatedRange": _echo(sheet, _Box(r0, c0, r0 + 1, c0 + 1)),
            }
            return out
        target = _Box(r0, c0, r0 + height, c0 + width)
        if target.c1 > sheet.cols:
            # [U] appends widen the grid too (gspread's append_rows docstring says so)
            _check_cell_limit(book, (target.c1 - sheet.cols) * sheet.rows)
            _resize(book, sheet, "COLUMNS", target.c1)
        if insert == "INSERT_ROWS" and r0 < sheet.rows:
            _check_cell_limit(book, height * sheet.cols)
            _insert_dimension(book, sheet, "ROWS", r0, r0 + height, inherit_before=r0 > 0)
        elif target.r1 > sheet.rows:
            _check_cell_limit(book, (target.r1 - sheet.rows) * sheet.cols)
            _resize(book, sheet, "ROWS", target.r1)
        rows, cols, cells = self._write_matrix(sheet, r0, c0, matrix, user_entered)
        updates: dict[str, Any] = {"spreadsheetId": book.id, "updatedRange": _echo(sheet, target)}
        _put_nonzero(updates, "updatedRows", len(rows))
        _put_nonzero(updates, "updatedColumns", len(cols))
        _put_nonzero(updates, "updatedCells", cells)
        if _truthy(_first(query, "includeValuesInResponse")):
            options = {
                "responseValueRenderOption": _first(query, "responseValueRenderOption"),
                "responseDateTimeRenderOption": _first(query, "responseDateTimeRenderOption"),
            }
            updates["updatedData"] = self._updated_data(book, updates["updatedRange"], options)
        out["updates"] = updates
        return out

    @staticmethod
    def _clear_box(sheet: _Sheet, box: _Box) -> None:
        for r in range(box.r0, min(box.r1, len(sheet.grid))):
            row = sheet.grid[r]
            if not row:
                continue
            for c in [c for c in row if box.c0 <= c < box.c1]:
                old = row[c]
                if old.value is None:
                    continue
                kept = _Cell(None, None, None, old.fmt, old.note, old.validation)
                sheet.put(r, c, None if kept.is_empty() else kept)

    def _values_clear(self, book: _Book, range_text: str) -> dict[str, Any]:
        ref = _resolve(book, range_text)
        self._clear_box(ref.sheet, ref.box)
        return {"spreadsheetId": book.id, "clearedRange": _echo(ref.sheet, ref.box)}

    def _values_batch_clear(self, book: _Book, body: Any) -> dict[str, Any]:
        ranges = body.get("ranges") if isinstance(body, dict) else None
        if ranges is not None and not isinstance(ranges, list):
            raise _invalid_value("ranges", "type.googleapis.com/google.protobuf.ListValue", ranges)
        refs = [_resolve(book, str(text)) for text in ranges or []]
        for ref in refs:
            self._clear_box(ref.sheet, ref.box)
        out: dict[str, Any] = {"spreadsheetId": book.id}
        if refs:
            out["clearedRanges"] = [_echo(r.sheet, r.box) for r in refs]
        return out

    # -- metadata -------------------------------------------------------------------------

    def _sheet_props(self, book: _Book, sheet: _Sheet) -> dict[str, Any]:
        grid: dict[str, Any] = {"rowCount": sheet.rows, "columnCount": sheet.cols}
        if sheet.frozen_rows:
            grid["frozenRowCount"] = sheet.frozen_rows
        if sheet.frozen_cols:
            grid["frozenColumnCount"] = sheet.frozen_cols
        if sheet.extra.get("hideGridlines"):
            grid["hideGridlines"] = True
        props: dict[str, Any] = {
            "sheetId": sheet.sheet_id,
            "title": sheet.title,
            "index": book.sheets.index(sheet),
            "sheetType": "GRID",
            "gridProperties": grid,
        }
        if sheet.hidden:
            props["hidden"] = True
        for key in ("tabColor", "tabColorStyle", "rightToLeft"):
            if sheet.extra.get(key):
                props[key] = copy.deepcopy(sheet.extra[key])
        return props

    def _named_json(self, book: _Book) -> list[dict[str, Any]]:
        return [
            {
                "namedRangeId": n["namedRangeId"],
                "name": n["name"],
                "range": _grid_range_out(n["range"]),
            }
            for n in book.named
        ]

    def _protected_json(self, sheet: _Sheet) -> list[dict[str, Any]]:
        out = []
        for pr in sheet.protected:
            item = copy.deepcopy(pr)
            item["range"] = _grid_range_out(item["range"])
            editors = item.pop("editors", {})
            users = [
                self.caller_email,
                *[u for u in editors.get("users", []) if u != self.caller_email],
            ]
            full: dict[str, Any] = {"users": users}
            if editors.get("groups"):
                full["groups"] = editors["groups"]
            if editors.get("domainUsersCanEdit"):
                full["domainUsersCanEdit"] = True
            item["requestingUserCanEdit"] = True
            item["editors"] = full
            out.append(item)
        return out

    def _cell_json(self, cell: _Cell | None) -> dict[str, Any]:
        if cell is None:
            return {}
        out: dict[str, Any] = {}
        if cell.value is not None:
            out["userEnteredValue"] = _value_out(cell.value)
            if cell.effective is not None:
                out["effectiveValue"] = _value_out(cell.effective)
            if cell.formatted is not None:
                out["formattedValue"] = cell.formatted
        if cell.fmt is not None:
            out["userEnteredFormat"] = cell.fmt
        if cell.value is not None or cell.fmt is not None:
            # [U] effective format = default format + the cell's own format
            effective = copy.deepcopy(DEFAULT_FORMAT)
            effective["hyperlinkDisplayType"] = "PLAIN_TEXT"
            _deep_merge(effective, cell.fmt or {})
            out["effectiveFormat"] = effective
        if cell.note is not None:
            out["note"] = cell.note
        if cell.validation is not None:
            out["dataValidation"] = cell.validation
        return out

    def _grid_data(self, sheet: _Sheet, box: _Box) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if box.r0:
            out["startRow"] = box.r0
        if box.c0:
            out["startColumn"] = box.c0
        row_data: list[dict[str, Any]] = []
        last = -1
        for r in range(box.r0, min(box.r1, len(sheet.grid))):
            row = sheet.grid[r]
            cols = [c for c in row if box.c0 <= c < box.c1] if row else []
            if not cols:
                row_data.append({})
                continue
            assert row is not None
            row_data.append(
                {"values": [self._cell_json(row.get(c)) for c in range(box.c0, max(cols) + 1)]}
            )
            last = len(row_data) - 1
        if last >= 0:
            out["rowData"] = row_data[: last + 1]
        out["rowMetadata"] = [
            {"pixelSize": ROW_PX, **(sheet.row_meta[r] or {})} for r in range(box.r0, box.r1)
        ]
        out["columnMetadata"] = [
            {"pixelSize": COL_PX, **(sheet.col_meta[c] or {})} for c in range(box.c0, box.c1)
        ]
        return out

    def _book_json(
        self, book: _Book, with_data: bool, ranges: list[tuple[_Sheet, _Box]] | None
    ) -> dict[str, Any]:
        sheets_out = []
        for sheet in book.sheets:
            boxes = [b for s, b in ranges if s is sheet] if ranges is not None else None
            if boxes == []:
                continue
            item: dict[str, Any] = {"properties": self._sheet_props(book, sheet)}
            if with_data:
                item["data"] = [
                    self._grid_data(sheet, b)
                    for b in (boxes or [_Box(0, 0, sheet.rows, sheet.cols)])
                ]
            if sheet.cond_formats:
                item["conditionalFormats"] = [_rule_out(rule) for rule in sheet.cond_formats]
            if sheet.protected:
                item["protectedRanges"] = self._protected_json(sheet)
            if sheet.basic_filter is not None:
                flt = copy.deepcopy(sheet.basic_filter)
                flt["range"] = _grid_range_out(flt["range"])
                item["basicFilter"] = flt
            sheets_out.append(item)
        out: dict[str, Any] = {
            "spreadsheetId": book.id,
            "properties": {
                "title": book.title,
                "locale": book.locale,
                "autoRecalc": book.auto_recalc,
                "timeZone": book.time_zone,
                "defaultFormat": copy.deepcopy(DEFAULT_FORMAT),
                "spreadsheetTheme": copy.deepcopy(SPREADSHEET_THEME),
            },
            "sheets": sheets_out,
        }
        if book.named:
            out["namedRanges"] = self._named_json(book)
        out["spreadsheetUrl"] = f"https://docs.google.com/spreadsheets/d/{book.id}/edit"
        return out

    def _spreadsheets_get(self, book: _Book, query: dict[str, list[str]]) -> dict[str, Any]:
        mask = _partial_mask(query) if "fields" in query else None
        ranges = None
        if query.get("ranges"):
            ranges = [(ref.sheet, ref.box) for ref in (_resolve(book, t) for t in query["ranges"])]
        if mask is not None:  # includeGridData is ignored when a field mask is given
            with_data = _mask_wants(mask, ("sheets", "data"))
        else:
            with_data = _truthy(_first(query, "includeGridData"))
        out = self._book_json(book, with_data, ranges)
        return _mask_filter(out, mask) if mask is not None else out

    # -- spreadsheets.batchUpdate ---------------------------------------------------------

    def _spreadsheets_batch_update(self, book: _Book, body: Any) -> dict[str, Any]:
        if not isinstance(body, dict):
            raise _bad("Invalid JSON payload received. Expected an object.")
        requests_ = body.get("requests")
        if not requests_:
            raise _bad("Must specify at least one request.")
        if not isinstance(requests_, list):
            raise _invalid_value(
                "requests", "type.googleapis.com/google.apps.sheets.v4.Request", requests_
            )
        tx = book.clone()
        replies = []
        for i, request in enumerate(requests_):
            if not isinstance(request, dict) or len(request) != 1:
                raise _bad(f"Invalid requests[{i}]: exactly one kind of request must be set.")
            kind, payload = next(iter(request.items()))
            handler = getattr(self, f"_bu_{kind}", None)
            if handler is None:
                if kind in _UNSUPPORTED_KINDS:
                    raise _bad(f"Invalid requests[{i}].{kind}: not supported by sheets_emulator.")
                text = (
                    f'Invalid JSON payload received. Unknown name "{kind}" at '
                    f"'requests[{i}]': Cannot find field."
                )
                raise _ApiError(
                    400,
                    text,
                    details=[
                        {
                            "@type": "type.googleapis.com/google.rpc.BadRequest",
                            "fieldViolations": [{"field": f"requests[{i}]", "description": text}],
                        }
                    ],
                )
            if not isinstance(payload, dict):
                raise _bad(f"Invalid requests[{i}].{kind}: request body must be an object.")
            try:
                reply = handler(tx, payload)
            except _ReqError as exc:
                raise _bad(f"Invalid requests[{i}].{kind}: {exc}") from None
            except _ApiError as exc:
                raise _bad(f"Invalid requests[{i}].{kind}: {exc.message}") from None
            except (KeyError, TypeError, ValueError, AttributeError) as exc:
                raise _bad(f"Invalid requests[{i}].{kind}: malformed request ({exc}).") from None
            replies.append(reply or {})
        out: dict[str, Any] = {"spreadsheetId": book.id, "replies": replies}
        if body.get("includeSpreadsheetInResponse") and self.echo_writes:
            ranges = None
            if body.get("responseRanges"):  # resolved first: a bad range applies nothing
                refs = [_resolve(tx, str(text)) for text in body["responseRanges"]]
                ranges = [(ref.sheet, ref.box) for ref in refs]
            out["updatedSpreadsheet"] = self._book_json(
                tx, bool(body.get("responseIncludeGridData")), ranges
            )
        self._books[book.id] = tx
        return out

    # Sub-request helpers

    @staticmethod
    def _req_sheet(book: _Book, sheet_id: Any) -> _Sheet:
        sheet = book.sheet_by_id(int(sheet_id or 0))
        if sheet is None:
            raise _ReqError(f"No grid with id: {sheet_id}")
        return sheet

    def _req_range(self, book: _Book, grid_range: Any) -> tuple[_Sheet, _Box, dict[str, Any]]:
        if not isinstance(grid_range, dict):
            raise _ReqError("range is required.")
        sheet = self._req_sheet(book, grid_range.get("sheetId", 0))
        box = _grid_box(sheet, grid_range)
        if box.r0 < 0 or box.c0 < 0 or box.r1 < box.r0 or box.c1 < box.c0:
            raise _ReqError("Invalid range: start index must be <= end index.")
        if box.r1 > sheet.rows or box.c1 > sheet.cols:
            raise _ReqError(str(_grid_limit_error(sheet, box)))
        normalized = {"sheetId": sheet.sheet_id}
        for key in ("startRowIndex", "endRowIndex", "startColumnIndex", "endColumnIndex"):
            if key in grid_range and grid_range[key] is not None:
                normalized[key] = int(grid_range[key])
        return sheet, box, normalized

    def _req_dimension(
        self, book: _Book, dim_range: Any, *, need_end: bool = True
    ) -> tuple[_Sheet, str, int, int]:
        if not isinstance(dim_range, dict):
            raise _ReqError("range is required.")
        sheet = self._req_sheet(book, dim_range.get("sheetId", 0))
        dim = dim_range.get("dimension")
        if dim not in _DIMENSIONS:
            raise _ReqError(f"Invalid dimension: {dim}")
        size = sheet.rows if dim == "ROWS" else sheet.cols
        start = int(dim_range.get("startIndex", 0))
        end = int(dim_range.get("endIndex", size)) if need_end or "endIndex" in dim_range else size
        if start < 0 or end <= start:
            raise _ReqError("Invalid dimension range: startIndex must be < endIndex.")
        return sheet, dim, start, end

    # Sheets

    def _bu_addSheet(self, book: _Book, req: dict[str, Any]) -> dict[str, Any]:
        props = req.get("properties") or {}
        if props.get("sheetType", "GRID") != "GRID":
            raise _ReqError("Only GRID sheets are supported by sheets_emulator.")
        title = props.get("title")
        if title is None:
            n = len(book.sheets) + 1
            while book.sheet_by_title(f"Sheet{n}") is not None:
                n += 1
            title = f"Sheet{n}"
        if not str(title).strip():
            raise _ReqError("Sheet name cannot be empty.")
        if book.sheet_by_title(title) is not None:
            raise _ReqError(
                f'A sheet with the name "{title}" already exists. Please enter another name.'
            )
        if "sheetId" in props and props["sheetId"] is not None:
            sheet_id = int(props["sheetId"])
            if sheet_id < 0 or book.sheet_by_id(sheet_id) is not None:
                raise _ReqError(f"Sheet with ID {sheet_id} already exists.")  # [U] wording
        else:
            sheet_id = self._new_sheet_id(book)
        grid = props.get("gridProperties") or {}
        rows, cols = int(grid.get("rowCount", 1000)), int(grid.get("columnCount", 26))
        if rows < 1 or cols < 1:
            raise _ReqError("A sheet needs at least one row and one column.")
        _check_cell_limit(book, rows * cols)
        sheet = _Sheet(sheet_id, str(title), rows, cols)
        sheet.frozen_rows = int(grid.get("frozenRowCount", 0))
        sheet.frozen_cols = int(grid.get("frozenColumnCount", 0))
        sheet.hidden = bool(props.get("hidden", False))
        for key in ("tabColor", "tabColorStyle", "rightToLeft"):
            if props.get(key):
                sheet.extra[key] = copy.deepcopy(props[key])
        if grid.get("hideGridlines"):
            sheet.extra["hideGridlines"] = True
        index = props.get("index")
        if index is None or int(index) >= len(book.sheets):
            book.sheets.append(sheet)
        else:
            book.sheets.insert(max(0, int(index)), sheet)
        if all(s.hidden for s in book.sheets):
            raise _ReqError("You can't hide all the sheets in a document.")
        return {"addSheet": {"properties": self._sheet_props(book, sheet)}}

    def _bu_deleteSheet(self, book: _Book, req: dict[str, Any]) -> None:
        sheet = book.sheet_by_id(int(req.get("sheetId", 0)))
        if sheet is None:
            raise _ReqError(f"No sheet with id: {req.get('sheetId', 0)}")
        if len(book.sheets) == 1:
            raise _ReqError("You can't remove all the sheets in a document.")
        book.sheets.remove(sheet)
        if all(s.hidden for s in book.sheets):
            raise _ReqError("You can't hide all the sheets in a document.")
        for named in [n for n in book.named if n["range"].get("sheetId", 0) == sheet.sheet_id]:
            book.named.remove(named)
            book.broken_named.append(named)  # [U] #REF!: hidden but still holds its name

    def _bu_updateSheetProperties(self, book: _Book, req: dict[str, Any]) -> None:
        props = req.get("properties") or {}
        sheet = book.sheet_by_id(int(props.get("sheetId", 0)))
        if sheet is None:
            raise _ReqError(f"No grid with id: {props.get('sheetId', 0)}")
        mask = _update_mask(req)
        current = {
            "sheetId": sheet.sheet_id,
            "title": sheet.title,
            "index": book.sheets.index(sheet),
            "sheetType": "GRID",
            "hidden": sheet.hidden,
            "gridProperties": {
                "rowCount": sheet.rows,
                "columnCount": sheet.cols,
                "frozenRowCount": sheet.frozen_rows,
                "frozenColumnCount": sheet.frozen_cols,
                "hideGridlines": bool(sheet.extra.get("hideGridlines")),
            },
            **{
                k: sheet.extra[k]
                for k in ("tabColor", "tabColorStyle", "rightToLeft")
                if k in sheet.extra
            },
        }
        _mask_apply(current, props, mask)
        if int(current.get("sheetId", sheet.sheet_id)) != sheet.sheet_id:
            raise _ReqError("sheetId cannot be changed.")
        title = current.get("title")
        if not title or not str(title).strip():
            raise _ReqError("Sheet name cannot be empty.")
        other = book.sheet_by_title(str(title))
        if other is not None and other is not sheet:
            raise _ReqError(
                f'A sheet with the name "{title}" already exists. Please enter another name.'
            )
        grid = current.get("gridProperties") or {}
        rows = int(grid.get("rowCount", 0))
        cols = int(grid.get("columnCount", 0))
        if rows < 1 or cols < 1:
            raise _ReqError("A sheet needs at least one row and one column.")
        frozen_rows = int(grid.get("frozenRowCount", 0))
        frozen_cols = int(grid.get("frozenColumnCount", 0))
        # [U] Google checks the cell limit with the new rowCount before the new columnCount
        if rows > sheet.rows:
            _check_cell_limit(book, (rows - sheet.rows) * sheet.cols)
        _resize(book, sheet, "ROWS", rows)
        if cols > sheet.cols:
            _check_cell_limit(book, (cols - sheet.cols) * sheet.rows)
        _resize(book, sheet, "COLUMNS", cols)
        if frozen_rows >= sheet.rows and frozen_rows:
            raise _ReqError("You can't freeze all visible rows on the sheet.")
        if frozen_cols >= sheet.cols and frozen_cols:
            raise _ReqError("You can't freeze all visible columns on the sheet.")
        sheet.title = str(title)
        sheet.frozen_rows, sheet.frozen_cols = frozen_rows, frozen_cols
        sheet.hidden = bool(current.get("hidden"))
        if all(s.hidden for s in book.sheets):
            raise _ReqError("You can't hide all the sheets in a document.")
        sheet.extra = {
            k: current[k] for k in ("tabColor", "tabColorStyle", "rightToLeft") if current.get(k)
        }
        if grid.get("hideGridlines"):
            sheet.extra["hideGridlines"] = True
        index = int(current.get("index", 0))
        if index != book.sheets.index(sheet):
            book.sheets.remove(sheet)
            book.sheets.insert(max(0, min(index, len(book.sheets))), sheet)

    def _bu_updateSpreadsheetProperties(self, book: _Book, req: dict[str, Any]) -> None:
        mask = _update_mask(req)
        current = {
            "title": book.title,
            "locale": book.locale,
            "timeZone": book.time_zone,
            "autoRecalc": book.auto_recalc,
        }
        _mask_apply(current, req.get("properties") or {}, mask)
        book.title = str(current.get("title") or book.title)
        book.locale = str(current.get("locale") or book.locale)
        book.time_zone = str(current.get("timeZone") or book.time_zone)
        book.auto_recalc = str(current.get("autoRecalc") or book.auto_recalc)

    # Dimensions

    def _bu_appendDimension(self, book: _Book, req: dict[str, Any]) -> None:
        sheet = self._req_sheet(book, req.get("sheetId", 0))
        dim = req.get("dimension")
        length = int(req.get("length", 0))
        if dim not in _DIMENSIONS or length < 1:
            raise _ReqError("dimension and a positive length are required.")
        if dim == "ROWS":
            _check_cell_limit(book, length * sheet.cols)
            _resize(book, sheet, "ROWS", sheet.rows + length)
        else:
            _check_cell_limit(book, length * sheet.rows)
            _resize(book, sheet, "COLUMNS", sheet.cols + length)

    def _bu_insertDimension(self, book: _Book, req: dict[str, Any]) -> None:
        sheet, dim, start, end = self._req_dimension(book, req.get("range"))
        size = sheet.rows if dim == "ROWS" else sheet.cols
        if start > size:
            raise _ReqError(f"Invalid insert index {start}: the sheet has {size} {dim.lower()}.")
        inherit = bool(req.get("inheritFromBefore", False))
        if inherit and start == 0:
            raise _ReqError("Cannot inherit from before when inserting at the start.")
        other = sheet.cols if dim == "ROWS" else sheet.rows
        _check_cell_limit(book, (end - start) * other)
        _insert_dimension(book, sheet, dim, start, end, inherit_before=inherit)

    def _bu_deleteDimension(self, book: _Book, req: dict[str, Any]) -> None:
        sheet, dim, start, end = self._req_dimension(book, req.get("range"))
        size = sheet.rows if dim == "ROWS" else sheet.cols
        if end > size:
            box = _Box(start, 0, end, 1) if dim == "ROWS" else _Box(0, start, 1, end)
            raise _ReqError(str(_grid_limit_error(sheet, box)))
        if start == 0 and end == size:
            raise _ReqError(f"You can't delete all the {dim.lower()} on the sheet.")
        _delete_dimension(book, sheet, dim, start, end)

    def _bu_moveDimension(self, book: _Book, req: dict[str, Any]) -> None:
        sheet, dim, start, end = self._req_dimension(book, req.get("source"))
        size = sheet.rows if dim == "ROWS" else sheet.cols
        dest = int(req.get("destinationIndex", 0))
        if end > size or not 0 <= dest <= size:
            raise _ReqError("Invalid move: index out of the grid.")
        _move_dimension(book, sheet, dim, start, end, dest)

    def _bu_updateDimensionProperties(self, book: _Book, req: dict[str, Any]) -> None:
        sheet, dim, start, end = self._req_dimension(book, req.get("range"))
        size = sheet.rows if dim == "ROWS" else sheet.cols
        if end > size:
            raise _ReqError("Invalid range: beyond the grid.")
        mask = _update_mask(req)
        meta = sheet.row_meta if dim == "ROWS" else sheet.col_meta
        source = req.get("properties") or {}
        for i in range(start, end):
            current = dict(meta[i] or {})
            _mask_apply(current, source, mask)
            meta[i] = current or None

    def _bu_autoResizeDimensions(self, book: _Book, req: dict[str, Any]) -> None:
        sheet, dim, _, end = self._req_dimension(book, req.get("dimensions"))
        size = sheet.rows if dim == "ROWS" else sheet.cols
        if end > size:
            raise _ReqError("Invalid range: beyond the grid.")
        # [U] no text measuring: sizes are left as they are

    # Cells

    def _bu_sortRange(self, book: _Book, req: dict[str, Any]) -> None:
        sheet, box, _ = self._req_range(book, req.get("range"))
        specs = []
        for spec in req.get("sortSpecs") or []:
            index = int(spec.get("dimensionIndex", 0))
            if not box.c0 <= index < box.c1:
                raise _ReqError(f"Invalid sort spec: dimensionIndex {index} is outside the range.")
            order = spec.get("sortOrder", "ASCENDING")
            if order not in ("ASCENDING", "DESCENDING", "SORT_ORDER_UNSPECIFIED"):
                raise _ReqError(f"Invalid sortOrder: {order}")
            specs.append((index, order != "DESCENDING"))
        if not specs:
            raise _ReqError("At least one sort spec is required.")
        _sort_box(sheet, box, specs)

    def _bu_updateCells(self, book: _Book, req: dict[str, Any]) -> None:
        rows = req.get("rows") or []
        mask = _cell_mask(req)
        if "start" in req and req["start"] is not None:
            start = req["start"]
            sheet = self._req_sheet(book, start.get("sheetId", 0))
            r0, c0 = int(start.get("rowIndex", 0)), int(start.get("columnIndex", 0))
            height = len(rows)
            width = max((len(r.get("values") or []) for r in rows), default=0)
            box = _Box(r0, c0, r0 + max(height, 1), c0 + max(width, 1))
            if box.r1 > sheet.rows or box.c1 > sheet.cols:
                raise _ReqError(str(_grid_limit_error(sheet, box)))
            clear_rest = False
        elif "range" in req:
            sheet, box, _ = self._req_range(book, req["range"])
            r0, c0 = box.r0, box.c0
            if len(rows) > box.height or any(len(r.get("values") or []) > box.width for r in rows):
                raise _ReqError("Attempting to write data beyond the requested range.")
            clear_rest = True
        else:
            raise _ReqError("Either start or range must be set.")
        for i, row in enumerate(rows):
            for j, cell_data in enumerate(row.get("values") or []):
                _apply_cell(sheet, r0 + i, c0 + j, cell_data or {}, mask)
        if clear_rest:
            for r in range(box.r0, box.r1):
                given = len(rows[r - r0].get("values") or []) if r - r0 < len(rows) else 0
                for c in range(box.c0 + given, box.c1):
                    if sheet.get(r, c) is not None:
                        _apply_cell(sheet, r, c, {}, mask)

    def _bu_copyPaste(self, book: _Book, req: dict[str, Any]) -> None:
        """Copy a range onto another (any sheet), tiling the source over a larger destination.
        ``PASTE_NORMAL`` copies whole cells; ``PASTE_VALUES`` only values (a formula's
        result), keeping the destination's format, note and validation."""
        source, sbox, _ = self._req_range(book, req.get("source"))
        dest, dbox, _ = self._req_range(book, req.get("destination"))
        kind = req.get("pasteType", "PASTE_NORMAL")
        if kind not in ("PASTE_NORMAL", "PASTE_VALUES"):
            raise _ReqError(f"pasteType {kind} is not supported by sheets_emulator.")
        if req.get("pasteOrientation", "NORMAL") != "NORMAL":
            raise _ReqError("Only NORMAL pasteOrientation is supported by sheets_emulator.")
        height, width = sbox.r1 - sbox.r0, sbox.c1 - sbox.c0
        if height < 1 or width < 1:
            return
        copied = {
            (r - sbox.r0, c - sbox.c0): source.get(r, c)
            for r in range(sbox.r0, sbox.r1)
            for c in range(sbox.c0, sbox.c1)
        }
        rows = max(dbox.r1 - dbox.r0, height)
        cols = max(dbox.c1 - dbox.c0, width)
        if dbox.r0 + rows > dest.rows or dbox.c0 + cols > dest.cols:
            box = _Box(dbox.r0, dbox.c0, dbox.r0 + rows, dbox.c0 + cols)
            raise _ReqError(str(_grid_limit_error(dest, box)))
        for i in range(rows):
            for j in range(cols):
                cell = copied[(i % height, j % width)]
                r, c = dbox.r0 + i, dbox.c0 + j
                if kind == "PASTE_NORMAL":
                    dest.put(r, c, None if cell is None or cell.is_empty() else cell)
                    continue
                old = dest.get(r, c) or _Cell()
                value = None
                if cell is not None and cell.value is not None:
                    value = cell.effective if cell.value[0] == "formulaValue" else cell.value
                effective, formatted = _derive(value, old.fmt)
                new = old._replace(value=value, effective=effective, formatted=formatted)
                dest.put(r, c, None if new.is_empty() else new)

    def _bu_appendCells(self, book: _Book, req: dict[str, Any]) -> None:
        sheet = self._req_sheet(book, req.get("sheetId", 0))
        rows = req.get("rows") or []
        mask = _cell_mask(req)
        width = max((len(r.get("values") or []) for r in rows), default=0)
        if width > sheet.cols:
            raise _ReqError(str(_grid_limit_error(sheet, _Box(0, 0, 1, width))))
        r0 = sheet.last_value_row() + 1
        if r0 + len(rows) > sheet.rows:
            _check_cell_limit(book, (r0 + len(rows) - sheet.rows) * sheet.cols)
            _resize(book, sheet, "ROWS", r0 + len(rows))
        for i, row in enumerate(rows):
            for j, cell_data in enumerate(row.get("values") or []):
                _apply_cell(sheet, r0 + i, j, cell_data or {}, mask)

    def _bu_repeatCell(self, book: _Book, req: dict[str, Any]) -> None:
        sheet, box, _ = self._req_range(book, req.get("range"))
        mask = _cell_mask(req)
        cell_data = req.get("cell") or {}
        for r in range(box.r0, box.r1):
            for c in range(box.c0, box.c1):
                _apply_cell(sheet, r, c, cell_data, mask)

    def _bu_setDataValidation(self, book: _Book, req: dict[str, Any]) -> None:
        sheet, box, _ = self._req_range(book, req.get("range"))
        rule = req.get("rule")
        stored = _compact(rule) if rule else None
        if stored is not None:
            condition = stored.get("condition") or {}
            if not condition.get("type"):
                raise _ReqError("A data validation rule needs condition.type.")
            if condition["type"] in ("ONE_OF_LIST",) and not condition.get("values"):
                raise _ReqError("ONE_OF_LIST needs at least one value.")
        for r in range(box.r0, box.r1):
            for c in range(box.c0, box.c1):
                old = sheet.get(r, c) or _Cell()
                new = _Cell(old.value, old.effective, old.formatted, old.fmt, old.note, stored)
                sheet.put(r, c, None if new.is_empty() else new)

    # Conditional formats, protected ranges, filters

    def _bu_addConditionalFormatRule(self, book: _Book, req: dict[str, Any]) -> None:
        rule = copy.deepcopy(req.get("rule") or {})
        ranges = rule.get("ranges") or []
        if not ranges:
            raise _ReqError("A conditional format rule needs at least one range.")
        if "booleanRule" not in rule and "gradientRule" not in rule:
            raise _ReqError("A conditional format rule needs booleanRule or gradientRule.")
        normalized = [self._req_range(book, r)[2] for r in ranges]
        sheet_ids = {r["sheetId"] for r in normalized}
        if len(sheet_ids) != 1:
            raise _ReqError("All ranges of a conditional format rule must be on one sheet.")
        sheet = self._req_sheet(book, sheet_ids.pop())
        rule["ranges"] = normalized
        index = int(req.get("index", 0))
        if not 0 <= index <= len(sheet.cond_formats):
            raise _ReqError(f"Invalid index {index}.")
        sheet.cond_formats.insert(index, rule)

    def _bu_deleteConditionalFormatRule(self, book: _Book, req: dict[str, Any]) -> dict[str, Any]:
        sheet = self._req_sheet(book, req.get("sheetId", 0))
        index = int(req.get("index", 0))
        if not 0 <= index < len(sheet.cond_formats):
            raise _ReqError(f"No conditional format on sheet {sheet.sheet_id} at index {index}.")
        rule = sheet.cond_formats.pop(index)
        return {"deleteConditionalFormatRule": {"rule": _rule_out(rule)}}

    def _bu_addProtectedRange(self, book: _Book, req: dict[str, Any]) -> dict[str, Any]:
        given = req.get("protectedRange") or {}
        sheet, _, normalized = self._req_range(book, given.get("range"))
        existing = {p["protectedRangeId"] for s in book.sheets for p in s.protected}
        if given.get("protectedRangeId") is not None:
            pr_id = int(given["protectedRangeId"])
            if pr_id in existing:
                raise _ReqError(f"A protected range with ID {pr_id} already exists.")
        else:
            pr_id = self._rng.randrange(1, 2**31)
            while pr_id in existing:
                pr_id = self._rng.randrange(1, 2**31)
        stored: dict[str, Any] = {"protectedRangeId": pr_id, "range": normalized}
        if given.get("description"):
            stored["description"] = given["description"]
        if given.get("warningOnly"):
            stored["warningOnly"] = True
        if given.get("unprotectedRanges"):
            stored["unprotectedRanges"] = [
                self._req_range(book, r)[2] for r in given["unprotectedRanges"]
            ]
        editors = _compact(given.get("editors") or {})
        stored["editors"] = {k: v for k, v in editors.items() if v}
        sheet.protected.append(stored)
        reply = {k: copy.deepcopy(v) for k, v in stored.items() if k != "editors"}
        reply["range"] = _grid_range_out(reply["range"])
        reply["requestingUserCanEdit"] = True
        reply["editors"] = copy.deepcopy(stored["editors"])
        return {"addProtectedRange": {"protectedRange": reply}}

    def _bu_deleteProtectedRange(self, book: _Book, req: dict[str, Any]) -> None:
        pr_id = int(req.get("protectedRangeId", -1))
        for sheet in book.sheets:
            for pr in sheet.protected:
                if pr["protectedRangeId"] == pr_id:
                    sheet.protected.remove(pr)
                    return
        raise _ReqError(f"No protected range with id: {pr_id}")  # [U] wording

    def _bu_setBasicFilter(self, book: _Book, req: dict[str, Any]) -> None:
        flt = copy.deepcopy(req.get("filter") or {})
        sheet, _, normalized = self._req_range(book, flt.get("range"))
        flt["range"] = normalized
        sheet.basic_filter = _compact(flt)

    def _bu_clearBasicFilter(self, book: _Book, req: dict[str, Any]) -> None:
        sheet = self._req_sheet(book, req.get("sheetId", 0))
        sheet.basic_filter = None

    # Named ranges (section 3.9, section 9: a compare-and-set)

    def _bu_addNamedRange(self, book: _Book, req: dict[str, Any]) -> dict[str, Any]:
        given = req.get("namedRange") or {}
        name = given.get("name")
        if not isinstance(name, str) or not _valid_range_name(name):
            raise _ReqError(f'Invalid name "{name}" for a named range.')  # [U] wording
        every = book.named + book.broken_named
        if any(n["name"].casefold() == name.casefold() for n in every):
            raise _ReqError(f'A named range with the name "{name}" already exists.')  # [U]
        range_id = given.get("namedRangeId")
        if range_id is not None and range_id != "":
            range_id = str(range_id)
            if any(n["namedRangeId"] == range_id for n in every):
                raise _ReqError(f'A named range with ID "{range_id}" already exists.')  # [U]
        else:
            range_id = str(self._rng.randrange(1, 2**31))
            while any(n["namedRangeId"] == range_id for n in every):
                range_id = str(self._rng.randrange(1, 2**31))
        _, _, normalized = self._req_range(book, given.get("range"))
        stored = {"namedRangeId": range_id, "name": name, "range": normalized}
        book.named.append(stored)
        return {
            "addNamedRange": {
                "namedRange": {
                    "namedRangeId": range_id,
                    "name": name,
                    "range": _grid_range_out(normalized),
                }
            }
        }

    def _bu_updateNamedRange(self, book: _Book, req: dict[str, Any]) -> None:
        given = req.get("namedRange") or {}
        range_id = str(given.get("namedRangeId", ""))
        stored = next((n for n in book.named if n["namedRangeId"] == range_id), None)
        if stored is None:
            raise _ReqError(f"No named range with id: {range_id}")  # [U] wording
        mask = _update_mask(req)
        current = copy.deepcopy(stored)
        _mask_apply(current, given, mask)
        name = current.get("name")
        if not isinstance(name, str) or not _valid_range_name(name):
            raise _ReqError(f'Invalid name "{name}" for a named range.')
        if any(
            n is not stored and n["name"].casefold() == name.casefold()
            for n in book.named + book.broken_named
        ):
            raise _ReqError(f'A named range with the name "{name}" already exists.')
        _, _, normalized = self._req_range(book, current.get("range"))
        stored.update({"name": name, "range": normalized})

    def _bu_deleteNamedRange(self, book: _Book, req: dict[str, Any]) -> None:
        range_id = str(req.get("namedRangeId", ""))
        for bucket in (book.named, book.broken_named):
            for stored in bucket:
                if stored["namedRangeId"] == range_id:
                    bucket.remove(stored)
                    return
        raise _ReqError(f"No named range with id: {range_id}")  # [U] wording


# ---------------------------------------------------------------------------------------
# Module-level helpers used by the emulator
# ---------------------------------------------------------------------------------------


def _classify(method: str, path: str) -> tuple[str, str | None, str | None]:
    """-> (op, spreadsheet id, decoded single range)."""
    m = re.match(r"^/v4/spreadsheets/([^/:]+)(.*)$", path)
    if not m:
        return "unknown", None, None
    spreadsheet_id, rest = unquote(m.group(1)), m.group(2)
    if rest == "" and method == "GET":
        return "spreadsheets.get", spreadsheet_id, None
    if rest == ":batchUpdate" and method == "POST":
        return "spreadsheets.batchUpdate", spreadsheet_id, None
    fixed = {
        ("GET", "/values:batchGet"): "values.batchGet",
        ("POST", "/values:batchUpdate"): "values.batchUpdate",
        ("POST", "/values:batchClear"): "values.batchClear",
    }
    if (method, rest) in fixed:
        return fixed[(method, rest)], spreadsheet_id, None
    if rest.startswith("/values/"):
        raw = rest[len("/values/") :]
        verb = None
        if ":" in raw:  # gspread encodes ':' inside the range, so a literal one is the verb
            raw, verb = raw.rsplit(":", 1)
        range_text = unquote(raw)
        if verb == "append" and method == "POST":
            return "values.append", spreadsheet_id, range_text
        if verb == "clear" and method == "POST":
            return "values.clear", spreadsheet_id, range_text
        if verb is None and method == "GET":
            return "values.get", spreadsheet_id, range_text
        if verb is None and method == "PUT":
            return "values.update", spreadsheet_id, range_text
    return "unknown", spreadsheet_id, None


def _first(query: dict[str, list[str]], name: str) -> str | None:
    values = query.get(name)
    return values[0] if values else None


def _truthy(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    return str(value).strip().lower() in ("true", "1") if value is not None else False


def _enum_value(
    value: Any, allowed: Sequence[str], default: str, field_name: str, type_name: str
) -> str:
    if value is None or value == "":
        return default
    if value not in allowed and not str(value).endswith("_UNSPECIFIED"):
        raise _invalid_value(
            field_name, f"type.googleapis.com/google.apps.sheets.v4.{type_name}", value
        )
    return default if str(value).endswith("_UNSPECIFIED") else str(value)


def _read_options(query: dict[str, list[str]]) -> tuple[str, str, str]:
    major = _enum_value(
        _first(query, "majorDimension"), _DIMENSIONS, "ROWS", "major_dimension", "Dimension"
    )
    render = _enum_value(
        _first(query, "valueRenderOption"),
        _VALUE_RENDER,
        "FORMATTED_VALUE",
        "value_render_option",
        "ValueRenderOption",
    )
    date_render = _enum_value(
        _first(query, "dateTimeRenderOption"),
        _DATE_RENDER,
        "SERIAL_NUMBER",
        "date_time_render_option",
        "DateTimeRenderOption",
    )
    return major, render, date_render


def _input_option(value: Any) -> bool:
    """True for USER_ENTERED, False for RAW."""
    if value is None or value == "":
        raise _bad("'valueInputOption' is required but not specified")
    if value not in ("RAW", "USER_ENTERED"):
        raise _invalid_value(
            "value_input_option",
            "type.googleapis.com/google.apps.sheets.v4.ValueInputOption",
            value,
        )
    return value == "USER_ENTERED"


def _put_nonzero(target: dict[str, Any], key: str, value: int) -> None:
    if value:
        target[key] = value


def _deep_merge(target: dict[str, Any], source: dict[str, Any]) -> None:
    for key, value in source.items():
        if isinstance(value, dict) and isinstance(target.get(key), dict):
            _deep_merge(target[key], value)
        else:
            target[key] = copy.deepcopy(value)


def _check_cell_limit(book: _Book, extra: int) -> None:
    if extra > 0 and book.total_cells() + extra > MAX_CELLS:
        raise _bad(
            "This action would increase the number of cells in the workbook above "
            f"the limit of {MAX_CELLS} cells."
        )


def _resize(book: _Book, sheet: _Sheet, dim: str, size: int) -> None:
    if dim == "ROWS":
        if size > sheet.rows:
            sheet.grid.extend([None] * (size - sheet.rows))
            sheet.row_meta.extend([None] * (size - sheet.rows))
            sheet.rows = size
        elif size < sheet.rows:
            _delete_dimension(book, sheet, "ROWS", size, sheet.rows)
    elif size > sheet.cols:
        sheet.col_meta.extend([None] * (size - sheet.cols))
        sheet.cols = size
    elif size < sheet.cols:
        _delete_dimension(book, sheet, "COLUMNS", size, sheet.cols)


def _remap_ranges(
    book: _Book,
    sheet: _Sheet,
    dim: str,
    fn: Callable[[int | None, int | None], tuple[int | None, int | None]],
) -> None:
    """Adjust every GridRange on ``sheet`` after a structural edit; a range that loses all
    its rows/columns is dropped (named ranges become hidden #REF! entries, see 3.9)."""
    keys = (
        ("startRowIndex", "endRowIndex")
        if dim == "ROWS"
        else ("startColumnIndex", "endColumnIndex")
    )

    def adjust(grid_range: dict[str, Any]) -> bool:
        """Mutate in place; False when nothing of the range is left."""
        if grid_range.get("sheetId", 0) != sheet.sheet_id:
            return True
        s, e = grid_range.get(keys[0]), grid_range.get(keys[1])
        was_empty = s is not None and e is not None and e <= s
        new_s, new_e = fn(s, e)
        if new_s is not None:
            grid_range[keys[0]] = new_s
        if new_e is not None:
            grid_range[keys[1]] = new_e
        return was_empty or new_s is None or new_e is None or new_e > new_s

    for named in list(book.named):
        if not adjust(named["range"]):
            book.named.remove(named)
            book.broken_named.append(named)
    for pr in list(sheet.protected):
        if not adjust(pr["range"]):
            sheet.protected.remove(pr)
            continue
        pr["unprotectedRanges"] = [r for r in pr.get("unprotectedRanges", []) if adjust(r)]
        if not pr["unprotectedRanges"]:
            del pr["unprotectedRanges"]
    for rule in list(sheet.cond_formats):
        rule["ranges"] = [r for r in rule["ranges"] if adjust(r)]
        if not rule["ranges"]:
            sheet.cond_formats.remove(rule)
    if sheet.basic_filter is not None and not adjust(sheet.basic_filter["range"]):
        sheet.basic_filter = None


# ---------------------------------------------------------------------------------------
# Structural edits shared by the API and the "person" helpers
# ---------------------------------------------------------------------------------------


def _insert_dimension(
    book: _Book, sheet: _Sheet, dim: str, start: int, end: int, *, inherit_before: bool
) -> None:
    n = end - start
    size = sheet.rows if dim == "ROWS" else sheet.cols
    src = start - 1 if inherit_before else start
    src = src if 0 <= src < size else -1
    if dim == "ROWS":
        template: dict[int, _Cell] = {}
        if src >= 0 and sheet.grid[src]:
            template = {
                c: _Cell(fmt=cell.fmt, validation=cell.validation)
                for c, cell in (sheet.grid[src] or {}).items()
                if cell.fmt is not None or cell.validation is not None
            }
        sheet.grid[start:start] = [dict(template) if template else None for _ in range(n)]
        sheet.row_meta[start:start] = [sheet.row_meta[src] if src >= 0 else None] * n
        sheet.rows += n
        if start < sheet.frozen_rows:
            sheet.frozen_rows += n
    else:
        for r, row in enumerate(sheet.grid):
            if not row:
                continue
            shifted = {(c + n if c >= start else c): cell for c, cell in row.items()}
            if src >= 0 and src in row:
                base = row[src]
                if base.fmt is not None or base.validation is not None:
                    for c in range(start, end):
                        shifted[c] = _Cell(fmt=base.fmt, validation=base.validation)
            sheet.grid[r] = shifted
        sheet.col_meta[start:start] = [sheet.col_meta[src] if src >= 0 else None] * n
        sheet.cols += n
        if start < sheet.frozen_cols:
            sheet.frozen_cols += n

    def shift(s: int | None, e: int | None) -> tuple[int | None, int | None]:
        new_s = s + n if s is not None and s >= start else s
        new_e = e + n if e is not None and e > start else e
        return new_s, new_e

    _remap_ranges(book, sheet, dim, shift)


def _delete_dimension(book: _Book, sheet: _Sheet, dim: str, start: int, end: int) -> None:
    n = end - start
    if dim == "ROWS":
        del sheet.grid[start:end]
        del sheet.row_meta[start:end]
        sheet.rows -= n
        sheet.frozen_rows -= max(0, min(sheet.frozen_rows, end) - start)
    else:
        for r, row in enumerate(sheet.grid):
            if not row:
                continue
            kept = {
                (c - n if c >= end else c): cell for c, cell in row.items() if not start <= c < end
            }
            sheet.grid[r] = kept or None
        del sheet.col_meta[start:end]
        sheet.cols -= n
        sheet.frozen_cols -= max(0, min(sheet.frozen_cols, end) - start)

    def shrink(s: int | None, e: int | None) -> tuple[int | None, int | None]:
        def move(x: int) -> int:
            return x - max(0, min(x, end) - start) if x > start else x

        new_s = move(s) if s is not None else None
        new_e = move(e) if e is not None else None
        return new_s, new_e

    _remap_ranges(book, sheet, dim, shrink)


def _move_dimension(book: _Book, sheet: _Sheet, dim: str, start: int, end: int, dest: int) -> None:
    if start <= dest <= end:
        return
    size = sheet.rows if dim == "ROWS" else sheet.cols
    order = list(range(size))
    block = order[start:end]
    rest = order[:start] + order[end:]
    insert_at = dest if dest < start else dest - (end - start)
    new_order = rest[:insert_at] + block + rest[insert_at:]
    position = {old: new for new, old in enumerate(new_order)}
    if dim == "ROWS":
        sheet.grid = [sheet.grid[i] for i in new_order]
        sheet.row_meta = [sheet.row_meta[i] for i in new_order]
    else:
        for r, row in enumerate(sheet.grid):
            if row:
                sheet.grid[r] = {position[c]: cell for c, cell in row.items()}
        sheet.col_meta = [sheet.col_meta[i] for i in new_order]

    def remap(s: int | None, e: int | None) -> tuple[int | None, int | None]:
        if s is None or e is None or e <= s:
            return s, e
        moved = [position[x] for x in range(s, e)]  # [U] bounding box of where cells went
        return min(moved), max(moved) + 1

    _remap_ranges(book, sheet, dim, remap)


def _rule_out(rule: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(rule)
    out["ranges"] = [_grid_range_out(r) for r in out.get("ranges", [])]
    return out


def _partial_mask(query: dict[str, list[str]]) -> MaskTree:
    """The ``fields`` query parameter (partial response) as a mask tree."""
    try:
        return _parse_mask(",".join(query["fields"]))
    except ValueError:
        raise _bad("Request contains an invalid argument.") from None


def _update_mask(req: dict[str, Any]) -> MaskTree:
    fields = req.get("fields")
    if not fields or not isinstance(fields, str):
        raise _ReqError("At least one field must be specified in 'fields'.")
    try:
        return _parse_mask(fields)
    except ValueError:
        raise _ReqError(f"Invalid field mask: {fields}") from None


def _cell_mask(req: dict[str, Any]) -> MaskTree:
    mask = _update_mask(req)
    if "*" in mask:
        return {name: None for name in _WRITABLE_CELL_FIELDS}
    unknown = (
        set(mask)
        - set(_WRITABLE_CELL_FIELDS)
        - {"textFormatRuns", "hyperlink", "pivotTable", "dataSourceFormula", "dataSourceTable"}
    )
    if unknown:
        raise _ReqError(f"Invalid field mask: unknown CellData field(s) {sorted(unknown)}.")
    return {k: v for k, v in mask.items() if k in _WRITABLE_CELL_FIELDS}


def _apply_cell(sheet: _Sheet, r: int, c: int, cell_data: dict[str, Any], mask: MaskTree) -> None:
    old = sheet.get(r, c)
    current = old.as_cell_data() if old else {}
    source = dict(cell_data)
    value = source.get("userEnteredValue")
    if value is not None:
        if (
            not isinstance(value, dict)
            or len(value) != 1
            or next(iter(value)) not in (_VALUE_KINDS)
        ):
            raise _ReqError(
                "userEnteredValue must set exactly one of stringValue, "
                "numberValue, boolValue, formulaValue."
            )
        kind, payload = next(iter(value.items()))
        expected = {
            "stringValue": str,
            "formulaValue": str,
            "boolValue": bool,
            "numberValue": int | float,
            "errorValue": dict,
        }[kind]
        if not isinstance(payload, expected) or (
            kind == "numberValue" and isinstance(payload, bool)
        ):
            raise _ReqError(
                f"Invalid value for userEnteredValue.{kind}: "
                f"{json.dumps(payload, ensure_ascii=False)}"
            )
        if kind == "stringValue" and len(payload) > MAX_CELL_CHARS:
            raise _ReqError(
                f"Your input contains more than the maximum of {MAX_CELL_CHARS} "
                "characters in a single cell."
            )
    if isinstance(source.get("userEnteredFormat"), dict):
        source["userEnteredFormat"] = _with_color_styles(source["userEnteredFormat"])
    if isinstance(source.get("dataValidation"), dict):
        source["dataValidation"] = _compact(source["dataValidation"])
    _mask_apply(current, source, mask)
    if "userEnteredFormat" in current:
        current["userEnteredFormat"] = _with_color_styles(current["userEnteredFormat"])
    sheet.put(r, c, _make_cell(current))


def _sort_key(cell: _Cell) -> tuple[int, Any, str]:
    """Sheets' ascending order: numbers, then text (case-insensitive), then booleans."""
    kind, payload = cell.effective or ("", None)
    if kind == "numberValue":
        return (0, payload, "")
    if kind == "stringValue":
        return (1, 0, str(payload).casefold())
    if kind == "boolValue":
        return (2, int(payload), "")
    return (3, 0, "")


def _sort_box(sheet: _Sheet, box: _Box, specs: list[tuple[int, bool]]) -> None:
    """Stable sort of the rows of ``box`` (only its columns move); blanks always last."""
    parts: list[dict[int, _Cell]] = []
    for r in range(box.r0, box.r1):
        row = sheet.grid[r]
        parts.append({c: cell for c, cell in row.items() if box.c0 <= c < box.c1} if row else {})
    order = list(range(len(parts)))
    for col, ascending in reversed(specs):

        def filled(i: int, col: int = col) -> bool:
            cell = parts[i].get(col)
            return cell is not None and cell.value is not None

        with_value = [i for i in order if filled(i)]
        blank = [i for i in order if not filled(i)]
        with_value.sort(key=lambda i, col=col: _sort_key(parts[i][col]), reverse=not ascending)
        order = with_value + blank
    for k, i in enumerate(order):
        r = box.r0 + k
        row = sheet.grid[r]
        kept = {c: cell for c, cell in row.items() if not box.c0 <= c < box.c1} if row else {}
        kept.update(parts[i])
        sheet.grid[r] = kept or None


def _find_table(sheet: _Sheet, box: _Box, single: bool) -> _Box | None:
    """The "table" values:append appends to (section 3.6) [U: rule inferred from the five
    recorded cases]: for a one-cell range, the block of filled cells around that cell (none
    when it is empty); otherwise the block around the last filled cell of the last filled
    row inside the range, not growing beyond the range."""
    if single:
        if not sheet.has_value(box.r0, box.c0):
            return None
        seed = (box.r0, box.c0)
        limit = _Box(0, 0, sheet.rows, sheet.cols)
    else:
        seed = None
        for r in range(min(box.r1, len(sheet.grid)) - 1, box.r0 - 1, -1):
            row = sheet.grid[r]
            cols = (
                [c for c, cell in row.items() if box.c0 <= c < box.c1 and cell.value is not None]
                if row
                else []
            )
            if cols:
                seed = (r, max(cols))
                break
        if seed is None:
            return None
        limit = box
    r0, c0 = seed
    r1, c1 = r0 + 1, c0 + 1

    def any_value(rows: Iterable[int], cols: Iterable[int]) -> bool:
        cols = list(cols)
        return any(sheet.has_value(r, c) for r in rows for c in cols)

    grew = True
    while grew:
        grew = False
        if r0 > limit.r0 and any_value(
            [r0 - 1], range(max(c0 - 1, limit.c0), min(c1 + 1, limit.c1))
        ):
            r0 -= 1
            grew = True
        if r1 < limit.r1 and any_value([r1], range(max(c0 - 1, limit.c0), min(c1 + 1, limit.c1))):
            r1 += 1
            grew = True
        if c0 > limit.c0 and any_value(
            range(max(r0 - 1, limit.r0), min(r1 + 1, limit.r1)), [c0 - 1]
        ):
            c0 -= 1
            grew = True
        if c1 < limit.c1 and any_value(range(max(r0 - 1, limit.r0), min(r1 + 1, limit.r1)), [c1]):
            c1 += 1
            grew = True
    return _Box(r0, c0, r1, c1)


def _valid_range_name(name: str) -> bool:
    """Sheets' rules: letters, digits, underscores (and dots); not starting with a digit;
    not TRUE/FALSE; not an A1 or R1C1 reference; at most 250 characters."""
    return bool(re.fullmatch(r"[A-Za-z_\\][A-Za-z0-9_.]{0,249}", name)) and not (
        _CELL_LIKE.match(name) or _R1C1_LIKE.match(name) or name.upper() in ("TRUE", "FALSE")
    )


# ---------------------------------------------------------------------------------------
# Command line
# ---------------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    """Serve until Ctrl-C: ``python -m tests.fakes.sheets_emulator --create KEY:Sheet1,Queue``."""
    parser = argparse.ArgumentParser(
        prog="python -m tests.fakes.sheets_emulator",
        description="Loopback Google Sheets API v4 emulator for sheetq tests. Example: "
        "--port 8765 --create KEY:Queue,QueueLog, then set "
        "SHEETQ_SHEETS_API_URL to the printed URL.",
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default %(default)s)")
    parser.add_argument(
        "--port",
        type=int,
        default=8765,
        help="port to bind, 0 for any free port (default %(default)s)",
    )
    parser.add_argument(
        "--create",
        action="append",
        default=[],
        metavar="KEY:TITLE,TITLE",
        help="create a spreadsheet with this id and sheets (repeatable)",
    )
    parser.add_argument("--seed", type=int, default=None, help="seed for generated ids")
    args = parser.parse_args(argv)
    emulator = SheetsEmulator(host=args.host, port=args.port, seed=args.seed).start()
    try:
        created = []
        for spec in args.create:
            key, _, titles = spec.partition(":")
            sheets = [t for t in titles.split(",") if t] or ["Sheet1"]
            created.append(emulator.create_spreadsheet(spreadsheet_id=key or None, sheets=sheets))
        print(emulator.base_url, flush=True)
        for key in created:
            print(f"spreadsheet {key}: {emulator.base_url}/v4/spreadsheets/{key}", flush=True)
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    finally:
        emulator.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
