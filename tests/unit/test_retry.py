"""decide(): the retry policy as a pure function (docs/design.md §5, §7)."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

import pytest

from sheetq.model import ErrorClass, Status
from sheetq.retry import Outcome, RetryPolicy, decide

NOW = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
POLICY = RetryPolicy()


@pytest.mark.parametrize("failures_before", [0, 1, 2, 3])
def test_transient_backs_off_within_jitter(failures_before: int) -> None:
    """Backoff doubles 2m, 4m, 8m, 16m with ±20 % jitter."""
    base = POLICY.backoff[failures_before]
    for seed in range(50):
        d = decide(Outcome.retry("x"), failures_before, POLICY, NOW, random.Random(seed))
        assert d.status is Status.RETRY and d.retry_count == failures_before + 1
        assert d.next_retry_at is not None
        delay = (d.next_retry_at - NOW).total_seconds()
        assert base * 0.8 <= delay <= base * 1.2


def test_gives_up_after_max_attempts() -> None:
    """The fifth failed attempt of a transient error ends in failed, keeping its class."""
    d = decide(Outcome.retry("boom", ErrorClass.RATE_LIMITED), 4, POLICY, NOW, random.Random(1))
    assert d.status is Status.FAILED and d.retry_count == 5
    assert d.error_class is ErrorClass.RATE_LIMITED


def test_retry_after_longer_than_backoff_wins() -> None:
    """A Retry-After longer than the backoff is honoured; a shorter one is not."""
    d = decide(Outcome.retry("x", retry_after=3600), 0, POLICY, NOW, random.Random(1))
    assert d.next_retry_at == NOW + timedelta(seconds=3600)
    d = decide(Outcome.retry("x", retry_after=1), 0, POLICY, NOW, random.Random(1))
    assert d.next_retry_at is not None and d.next_retry_at - NOW > timedelta(seconds=60)


def test_permanent_fails_at_once_and_auth_opens_circuit() -> None:
    """Bad data fails at once; auth fails at once and opens the circuit."""
    d = decide(Outcome.failed("bad"), 0, POLICY, NOW, random.Random(1))
    assert (d.status, d.error_class, d.retry_count, d.open_circuit) == (
        Status.FAILED,
        ErrorClass.PERMANENT,
        1,
        False,
    )
    d = decide(Outcome.failed("401", ErrorClass.AUTH), 0, POLICY, NOW, random.Random(1))
    assert (d.status, d.error_class, d.open_circuit) == (Status.FAILED, ErrorClass.AUTH, True)


def test_unknown_outcome_counts_and_keeps_class() -> None:
    """A lost outcome that is retried counts as an attempt and stays error_class=unknown."""
    d = decide(Outcome.unknown("timeout"), 0, POLICY, NOW, random.Random(1))
    assert (d.status, d.error_class, d.retry_count) == (Status.RETRY, ErrorClass.UNKNOWN, 1)


def test_done_and_skipped_keep_attempts() -> None:
    """Success does not add an attempt."""
    assert decide(Outcome.done("ok"), 2, POLICY, NOW, random.Random()).retry_count == 2
    assert decide(Outcome.skipped("n/a"), 0, POLICY, NOW, random.Random()).status is Status.SKIPPED
