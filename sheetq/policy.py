"""Queue rules that are policy, not storage: shared by the sheet engine and PostgreSQL.

Each is a pure function of a task's fields, its type's configuration and the time. Where
PostgreSQL must apply the same rule inside a statement (which task is due, since when, when
it is too old to run), ``tests/postgres/test_rules_sql.py`` runs the SQL and these functions
on the same generated cases and compares.

* ``due_since`` / ``is_due`` — a waiting task is due from the later of its ``created_at``
  and its ``next_retry_at`` (a delay, a backoff, a requeue); an unreadable
  ``next_retry_at`` (a person's typing) counts as due, from its creation;
* ``expiry`` — a task due for longer than its type's ``max_age`` fails without running;
* ``recover`` — a lost outcome (an expired lease) under the type's ``on_unknown``;
* ``will_do`` — what recovery will do with a type's lost outcomes, in a person's words;
* ``alert_order`` — the order of a digest's failures: auth failures first (a person must
  fix credentials), then by task id;
* ``log_values`` — one QueueLog row's cells; ``result_cut`` — whether a result is cut;
* ``outcome_message`` — the log message of a finished attempt.
"""

from __future__ import annotations

import random
from datetime import datetime
from typing import Protocol

from sheetq.config import Settings, TypeConfig
from sheetq.model import MAX_ERROR_CHARS, MAX_RESULT_CHARS, CellValue, ErrorClass, Event, Status
from sheetq.redact import printable, shorten
from sheetq.retry import Decision, Outcome, decide
from sheetq.times import exact_duration, format_ts

LOST = "lease expired while processing: the runner stopped before recording the outcome"


def due_since(created: datetime | None, next_retry_at: object) -> datetime | None:
    """Since when a waiting task is due: the later of its ``created_at`` and its
    ``next_retry_at`` (a delay, a backoff, a requeue; an ``--at`` in the past is due from
    the enqueue), the readable one of them when only one is (``None``: neither)."""
    times = [t for t in (created, next_retry_at) if isinstance(t, datetime)]
    return max(times) if times else None


def is_due(next_retry_at: object, now: datetime) -> bool:
    """Whether a waiting task may run at ``now``: no ``next_retry_at``, an unreadable one
    (counted as due, with a warning), or one that has passed."""
    return not isinstance(next_retry_at, datetime) or next_retry_at <= now


def expiry(since: datetime | None, now: datetime, max_age: float | None) -> str:
    """The ``last_error`` of a task due since ``since`` that is too old to run at ``now``
    (its type's ``max_age``, seconds; ``None``: no limit), or ``""`` when it may still run.
    The age is shown to the minute (``1h10m``) once it is a minute or more."""
    if max_age is None or since is None:
        return ""
    age = (now - since).total_seconds()
    if age <= max_age:
        return ""
    shown = round(age / 60) * 60 if age >= 60 else age
    return (
        f"expired: due for {exact_duration(shown)} without running, max_age is "
        f"{exact_duration(max_age)}"
    )


def recover(retry_count: int, config: TypeConfig, now: datetime, rng: random.Random) -> Decision:
    """A lost outcome (its lease expired) under ``on_unknown`` = ``retry`` or ``fail``.

    It counts as an attempt, so a poison task that kills its runner every time ends in
    ``failed`` after ``max_attempts``. (``reconcile`` runs the type's check instead.)"""
    if config.on_unknown == "retry":
        return decide(Outcome.unknown(LOST + "; retrying"), retry_count, config.policy, now, rng)
    return Decision(
        Status.FAILED,
        retry_count + 1,
        ErrorClass.UNKNOWN,
        None,
        LOST + "; a person must check whether it happened",
    )


def will_do(settings: Settings, task_type: str) -> str:
    """What recovery does with a lost outcome of this type: ``retry``, ``reconcile`` or
    ``fail`` (a ``reconcile`` type without a reconcile check fails)."""
    config = settings.type_config(task_type)
    if config.on_unknown == "reconcile" and config.reconcile is None:
        return "fail"
    return config.on_unknown


class _Owed(Protocol):
    """An owed alert as ``alert_order`` sees it (``sheetq.port.AlertItem``)."""

    @property
    def error_class(self) -> str: ...

    @property
    def task_id(self) -> str: ...


def alert_order(item: _Owed) -> tuple[bool, str]:
    """Sort key of an owed alert in its digest: auth failures first, then by task id."""
    return (item.error_class != ErrorClass.AUTH, item.task_id)


def log_values(
    now: datetime,
    task_id: str,
    task_type: str,
    event: Event,
    status: Status | str,
    retry_count: int,
    message: str = "",
    run_id: str = "",
    duration_ms: int | None = None,
) -> dict[str, CellValue]:
    """One QueueLog row's cells: ``ts`` as UTC ISO text, the message printable and cut to
    ``MAX_ERROR_CHARS``, ``duration_ms`` empty when unknown."""
    return {
        "ts": format_ts(now),
        "task_id": task_id,
        "type": task_type,
        "event": str(event),
        "status": str(status),
        "retry_count": retry_count,
        "message": shorten(printable(message), MAX_ERROR_CHARS),
        "run_id": run_id,
        "duration_ms": "" if duration_ms is None else duration_ms,
    }


def result_cut(result: str) -> int:
    """The length of a handler's result if the ``result`` cell cannot hold it (it is then cut
    to ``MAX_RESULT_CHARS``, ending with ``…``); 0 if it fits."""
    length = len(printable(result.strip()))
    return length if length > MAX_RESULT_CHARS else 0


def outcome_message(decision: Decision) -> str:
    """The QueueLog message of a finished attempt: the result (cut to 200 characters) for
    ``done``, else the decision's message; a cut result says so, and a ``failed``/``retry``
    message starts with its error class (the log then says why on its own)."""
    message = (
        decision.message if decision.status is not Status.DONE else shorten(decision.result, 200)
    )
    cut = result_cut(decision.result)
    if cut:
        message = f"result cut to {MAX_RESULT_CHARS:,} of {cut:,} characters; {message}"
    if decision.status in (Status.FAILED, Status.RETRY) and decision.error_class:
        message = f"{decision.error_class}: {message}"
    return message
