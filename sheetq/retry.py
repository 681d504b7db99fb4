"""Job retries: the policy of a task type and ``decide()``, a pure function.

Transport retries (around Sheets calls) live in the store adapters; these are
the retries persisted in the row. One handler run costs exactly one attempt.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from sheetq.model import ErrorClass, Status


@dataclass(frozen=True)
class RetryPolicy:
    """Per-type limits. Durations in seconds.

    Defaults are docs/design.md §5/§7: 5 attempts, backoff 2m 4m 8m 16m 30m with
    ±20 % jitter, 60 s handler timeout, 10 min lease, 72 h max age, circuit
    opens after 5 consecutive transient failures of a type within a run.
    """

    max_attempts: int = 5
    backoff: tuple[float, ...] = (120.0, 240.0, 480.0, 960.0, 1800.0)
    jitter: float = 0.2
    timeout: float = 60.0
    lease: float = 600.0
    max_age: float | None = 259_200.0
    breaker_threshold: int = 5

    def delay(self, failures: int, rng: random.Random) -> float:
        """Backoff before the attempt after ``failures`` failures, jitter applied (seconds)."""
        if not self.backoff:
            return 0.0
        base = self.backoff[min(max(failures, 1), len(self.backoff)) - 1]
        return max(0.0, base * (1 + rng.uniform(-self.jitter, self.jitter)))


@dataclass(frozen=True)
class Outcome:
    """How one handler run ended, before the policy is applied.

    ``status`` is where the handler wants the task to go: ``done``,
    ``skipped``, ``retry`` or ``failed``; ``None`` means the outcome is
    unknown (timeout after sending, runner killed). ``retry_after`` is a
    minimum delay in seconds (e.g. an HTTP ``Retry-After``).
    """

    status: Status | None
    error_class: ErrorClass | None = None
    message: str = ""
    result: str = ""
    retry_after: float | None = None

    @classmethod
    def done(cls, result: str = "") -> Outcome:
        return cls(Status.DONE, result=result)

    @classmethod
    def skipped(cls, message: str = "", result: str = "") -> Outcome:
        return cls(Status.SKIPPED, message=message, result=result)

    @classmethod
    def retry(
        cls,
        message: str,
        error_class: ErrorClass = ErrorClass.TRANSIENT,
        retry_after: float | None = None,
    ) -> Outcome:
        return cls(Status.RETRY, error_class, message, retry_after=retry_after)

    @classmethod
    def failed(cls, message: str, error_class: ErrorClass = ErrorClass.PERMANENT) -> Outcome:
        return cls(Status.FAILED, error_class, message)

    @classmethod
    def unknown(cls, message: str) -> Outcome:
        return cls(None, ErrorClass.UNKNOWN, message)


@dataclass(frozen=True)
class Decision:
    """The row's next state. ``open_circuit`` asks the runner to stop the type for this run."""

    status: Status
    retry_count: int
    error_class: ErrorClass | None
    next_retry_at: datetime | None
    message: str = ""
    result: str = ""
    open_circuit: bool = False
    counts_for_breaker: bool = field(default=False)


def decide(
    outcome: Outcome,
    retry_count: int,
    policy: RetryPolicy,
    now: datetime,
    rng: random.Random,
) -> Decision:
    """Apply the retry policy to one outcome (docs/design.md §5, §7).

    ``retry_count`` is the number of failed attempts before this one. An
    unknown outcome reaching here is to be retried (the caller has already
    applied ``on_unknown``): it counts as an attempt and keeps
    ``error_class=unknown``.
    """
    status, cls = outcome.status, outcome.error_class
    if status is Status.DONE:
        return Decision(Status.DONE, retry_count, None, None, outcome.message, outcome.result)
    if status is Status.SKIPPED:
        return Decision(Status.SKIPPED, retry_count, cls, None, outcome.message, outcome.result)
    if cls is ErrorClass.CONFIG:
        # The handler never ran: no attempt is consumed, but a person must look.
        return Decision(Status.FAILED, retry_count, cls, None, outcome.message, open_circuit=True)
    failures = retry_count + 1
    if cls is ErrorClass.AUTH:
        return Decision(Status.FAILED, failures, cls, None, outcome.message, open_circuit=True)
    if status is Status.FAILED:
        return Decision(Status.FAILED, failures, cls or ErrorClass.PERMANENT, None, outcome.message)
    cls = cls or (ErrorClass.UNKNOWN if status is None else ErrorClass.TRANSIENT)
    transient = cls in (ErrorClass.TRANSIENT, ErrorClass.RATE_LIMITED)
    if failures >= policy.max_attempts:
        message = f"{outcome.message} (gave up after {failures} attempts)".strip()
        return Decision(Status.FAILED, failures, cls, None, message, counts_for_breaker=transient)
    delay = policy.delay(failures, rng)
    if outcome.retry_after is not None and outcome.retry_after > delay:
        delay = outcome.retry_after
    return Decision(
        Status.RETRY,
        failures,
        cls,
        now + timedelta(seconds=delay),
        outcome.message,
        counts_for_breaker=transient,
    )
