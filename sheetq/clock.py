"""Time, injected: the queue logic never calls ``datetime.now`` itself.

All datetimes are timezone-aware UTC. ``monotonic`` and ``sleep`` are in seconds.
"""

from __future__ import annotations

import os
import time
from datetime import UTC, datetime, timedelta
from typing import Protocol

from sheetq.errors import ConfigError


class Clock(Protocol):
    def now(self) -> datetime:
        """The current time, timezone-aware UTC."""
        ...

    def monotonic(self) -> float:
        """Seconds from an arbitrary origin; never goes back."""
        ...

    def sleep(self, seconds: float) -> None:
        """Wait ``seconds``."""
        ...


class SystemClock:
    """The real clock."""

    def now(self) -> datetime:
        return datetime.now(UTC)

    def monotonic(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            time.sleep(seconds)


class FixedClock(SystemClock):
    """Wall-clock time fixed at ``at`` (what ``SHEETQ_NOW`` sets, to replay a run at a known
    time), while elapsed time stays real: ``monotonic`` and ``sleep`` are the system's, so
    durations, ``duration_ms``, ``--max-runtime`` and rate limits measure what happened."""

    def __init__(self, at: datetime) -> None:
        if at.tzinfo is None:
            raise ValueError("FixedClock needs an aware datetime")
        self._at = at.astimezone(UTC)

    def now(self) -> datetime:
        return self._at


class FakeClock:
    """A clock that only moves when told to; ``sleep`` advances it at once.

    Used by tests and by ``sheetq demo`` (``SHEETQ_NOW`` uses ``FixedClock`` instead, whose
    stopwatch is real).
    """

    def __init__(self, start: datetime | None = None) -> None:
        start = start or datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
        if start.tzinfo is None:
            raise ValueError("FakeClock needs an aware datetime")
        self._now = start.astimezone(UTC)
        self._mono = 0.0

    def now(self) -> datetime:
        return self._now

    def monotonic(self) -> float:
        return self._mono

    def sleep(self, seconds: float) -> None:
        self.advance(max(0.0, seconds))

    def advance(self, seconds: float) -> None:
        self._now += timedelta(seconds=seconds)
        self._mono += seconds

    def set(self, when: datetime) -> None:
        delta = (when - self._now).total_seconds()
        self._now = when.astimezone(UTC)
        self._mono += max(0.0, delta)


def clock_from_env() -> Clock:
    """``SHEETQ_NOW`` (ISO 8601, UTC if no offset) fixes the wall-clock time that decisions use
    (due, expired, lease expiry), for replaying and tests; elapsed time stays real."""
    fixed = os.environ.get("SHEETQ_NOW", "").strip()
    if not fixed:
        return SystemClock()
    try:
        when = datetime.fromisoformat(fixed)
    except ValueError:
        raise ConfigError(f"SHEETQ_NOW: expected an ISO 8601 time, got {fixed!r}") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return FixedClock(when)
