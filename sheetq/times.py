"""Timestamps as written in the sheet, as people type them, and durations.

sheetq writes UTC ISO 8601 with ``Z`` and second precision. It reads what
people type: ISO with or without offset, the spreadsheet's locale form
(``11/29/2026 14:05`` in en_US, ``29.11.2026 14:05`` or ``29/11/2026`` elsewhere)
and Sheets date serial numbers (days since 1899-12-30, as the API returns a
cell a person typed as a date). A time without an offset is in the
spreadsheet's time zone, daylight saving included.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta, tzinfo
from functools import lru_cache
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

_SERIAL_EPOCH = datetime(1899, 12, 30)
_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)\s*(ms|s|m|h|d|w)", re.IGNORECASE)
_UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


class Unparseable:
    """Marker for a cell that holds text that is not a time."""

    def __init__(self, text: str) -> None:
        self.text = text

    def __repr__(self) -> str:
        return f"Unparseable({self.text!r})"


def format_ts(when: datetime) -> str:
    """``2026-11-29T22:50:54Z``: UTC, second precision."""
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def format_not_before(when: datetime) -> str:
    """``format_ts`` of a not-before time, rounded up to the next whole second when it has a
    fraction: a cell holds seconds, and a task must never become due before its delay or
    backoff has passed (``12:00:05.3`` is written ``12:00:06``)."""
    if when.microsecond:
        when = when.replace(microsecond=0) + timedelta(seconds=1)
    return format_ts(when)


@lru_cache(maxsize=16)
def zone(name: str | None) -> tzinfo:
    """The time zone called ``name`` (IANA), UTC when empty or unknown."""
    if not name:
        return UTC
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        return UTC


_LOCALE_FORMATS_DMY = ("%d.%m.%Y", "%d/%m/%Y", "%d-%m-%Y")
_LOCALE_FORMATS_MDY = ("%m/%d/%Y",)
_TIME_SUFFIXES = ("", " %H:%M", " %H:%M:%S")


def parse_ts(
    value: object, tz: tzinfo = UTC, locale: str = "en_US"
) -> datetime | Unparseable | None:
    """Parse a timestamp cell. ``None`` for an empty cell; ``Unparseable`` for text that is no time.

    Fast path first: sheetq's own ``...Z`` form goes through ``fromisoformat``.
    """
    if value is None or value == "":
        return None
    if isinstance(value, bool):
        return Unparseable(str(value))
    if isinstance(value, int | float):
        moment = _SERIAL_EPOCH + timedelta(days=float(value))
        return moment.replace(tzinfo=tz).astimezone(UTC)
    text = str(value).strip()
    if not text:
        return None
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        local = _parse_locale(text, locale)
        if local is None:
            return Unparseable(text)
        moment = local
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=tz)
    return moment.astimezone(UTC)


def _parse_locale(text: str, locale: str) -> datetime | None:
    dates = _LOCALE_FORMATS_MDY + _LOCALE_FORMATS_DMY if locale == "en_US" else _LOCALE_FORMATS_DMY
    for date_fmt in dates:
        for time_fmt in _TIME_SUFFIXES:
            try:
                return datetime.strptime(text, date_fmt + time_fmt)
            except ValueError:
                continue
    return None


MAX_DURATION = 100 * 365 * 86400.0  # seconds; anything longer is a typo


def parse_duration(
    text: str | int | float, *, what: str = "duration", require_unit: bool = False
) -> float:
    """Seconds in ``"90s"``, ``"10m"``, ``"72h"``, ``"1h30m"``, ``"30d"`` or plain seconds.

    ``require_unit`` (command-line flags, ``sheetq.toml``, ``SHEETQ_*`` variables) refuses
    a bare number such as ``30``: days? minutes? Raises ``ValueError`` naming ``what`` when
    the text is not a duration (a list, a table or a boolean from ``sheetq.toml`` too), or
    is longer than 100 years.
    """
    if isinstance(text, bool) or not isinstance(text, str | int | float):
        raise ValueError(f"{what}: expected a duration like '10m', got {text!r}")
    if isinstance(text, int | float):
        if require_unit:
            raise ValueError(
                f"{what}: {text!r} needs a unit, as a string: '{text}s', '{text}m', "
                f"'{text}h' or '{text}d'"
            )
        if text < 0:
            raise ValueError(f"{what}: must not be negative, got {text!r}")
        return float(text)
    raw = text.strip()
    if re.fullmatch(r"\d+(\.\d+)?", raw):
        if require_unit:
            raise ValueError(
                f"{what}: {raw!r} needs a unit: '{raw}s', '{raw}m', '{raw}h' or '{raw}d'"
            )
        return float(raw)
    pos, total = 0, 0.0
    for match in _DURATION_PART.finditer(raw):
        if raw[pos : match.start()].strip():
            break
        total += float(match.group(1)) * _UNITS[match.group(2).lower()]
        pos = match.end()
    if pos == 0 or raw[pos:].strip():
        raise ValueError(
            f"{what}: expected a duration like '90s', '10m', '2h', '1h30m' or '30d', got {text!r}"
        )
    if total > MAX_DURATION:
        raise ValueError(f"{what}: {text!r} is longer than 100 years")
    return total


def format_duration(seconds: float) -> str:
    """``3725`` → ``1h02m``; short and human."""
    seconds = round(seconds)
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    if seconds < 86400:
        return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
    return f"{seconds // 86400}d{seconds % 86400 // 3600:02d}h"


def exact_duration(seconds: float) -> str:
    """``4200`` → ``1h10m``, ``3600`` → ``1h``, ``259200`` → ``3d``: whole seconds, zero parts
    left out (for limits and ages in messages, where rounding to hours misleads)."""
    left = max(0, round(seconds))
    parts = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if left >= size:
            parts.append(f"{left // size}{unit}")
            left %= size
    return "".join(parts) or "0s"
