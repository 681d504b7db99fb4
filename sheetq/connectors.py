"""Connectors: one budget per downstream, however many workers (docs/design.md §13).

Pure arithmetic shared by both engines; no I/O, no clock of its own (every function takes
``now``). PostgreSQL applies the same rules inside its claim and settle statements
(``sheetq/postgres/queries/run.sql``, migration 0005); the sheet engine applies these
functions to the ``Connectors`` worksheet's row.

* ``grant`` / ``next_start`` — the rate limit as an **evenly spaced token bucket**: one
  handler start per ``per / calls`` seconds, so at most ``calls`` starts in any window of
  ``per`` seconds (never fixed windows, which allow twice the limit across a boundary);
* ``free_slots`` — concurrency as slots, each held until its task's lease ends at the
  latest, so a crash never keeps a slot longer than the task's lease;
* ``Breaker`` and ``after`` — the breaker's state machine: ``closed`` → ``open`` after
  ``breaker_threshold`` consecutive transient failures (or at once on ``auth``, until a
  person resumes it) → ``half-open`` after the cooldown, one probe at a time → ``closed``
  on the probe's success, ``open`` again on its failure; ``paused`` by a person, for a
  while or until resumed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from sheetq.model import ErrorClass
from sheetq.retry import Decision
from sheetq.times import format_ts

DEFAULT_COOLDOWN = 300.0  # seconds an open breaker waits before its probe (5m)
DEFAULT_ESCALATE = 900.0  # seconds open before the second alert (15m)
DEFAULT_THRESHOLD = 5


class State(StrEnum):
    """A connector's state, as the ``state`` cell and ``connector list`` show it."""

    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half-open"
    PAUSED = "paused"


class Kind(StrEnum):
    """What a finished or returned task means for its connector's breaker."""

    OK = "ok"  # the downstream answered (done, skipped, a permanent failure)
    FAIL = "fail"  # a transient failure (5xx, a timeout, 429): counts toward the threshold
    AUTH = "auth"  # credentials refused: open until a person resumes
    RELEASE = "release"  # never started: gives its slot (and a probe's turn) back


def grant(
    next_at: datetime | None, now: datetime, interval: float | None, wanted: int
) -> tuple[int, datetime | None]:
    """How many of ``wanted`` tasks may start at ``now`` under an evenly spaced token bucket
    of one start per ``interval`` seconds (``None``: no rate limit, all of them), and the
    bucket's ``next_at`` afterwards. One start per interval, never a burst: so at most
    ``calls`` starts fall in any window of ``per`` seconds, however the windows are placed
    (fixed windows would allow twice that across a boundary)."""
    if interval is None:
        return wanted, next_at
    if wanted <= 0 or (next_at is not None and next_at > now):
        return 0, next_at
    return 1, now + timedelta(seconds=interval)


def next_start(next_at: datetime | None, now: datetime, interval: float | None) -> datetime:
    """When the next start is allowed: ``now`` if the bucket has a token, else ``next_at``."""
    if interval is None or next_at is None or next_at <= now:
        return now
    return next_at


def free_slots(slots: dict[str, datetime], now: datetime, concurrency: int | None) -> int | None:
    """Slots free at ``now`` (``None``: no concurrency limit). A slot whose ``until`` (its
    task's lease end) has passed is free again."""
    if concurrency is None:
        return None
    return max(0, concurrency - sum(1 for until in slots.values() if until > now))


@dataclass(frozen=True)
class Breaker:
    """A connector's shared state. ``until``: an open breaker's cooldown end (``None`` with
    ``open``: until a person resumes it) or a pause's end (``None``: until resumed);
    ``probe``: the task let through while half-open (``probe_until``: its lease end);
    ``failures``: consecutive transient failures."""

    state: State = State.CLOSED
    until: datetime | None = None
    reason: str = ""
    failures: int = 0
    probe: str = ""
    probe_until: datetime | None = None
    opened_at: datetime | None = None
    slots: dict[str, datetime] = field(default_factory=dict)
    next_at: datetime | None = None  # the rate limit's next start


@dataclass(frozen=True)
class Limits:
    """A connector's configuration as the arithmetic needs it (seconds)."""

    interval: float | None = None  # seconds between starts (rate limit), None: no limit
    concurrency: int | None = None
    threshold: int = DEFAULT_THRESHOLD
    cooldown: float = DEFAULT_COOLDOWN


def effective(b: Breaker, now: datetime) -> State:
    """The state that holds at ``now``: an open breaker past its cooldown is ``half-open``,
    a pause past its end is ``closed``."""
    if b.state is State.OPEN and b.until is not None and b.until <= now:
        return State.HALF_OPEN
    if b.state is State.PAUSED and b.until is not None and b.until <= now:
        return State.CLOSED
    return b.state


def admits(b: Breaker, now: datetime, limits: Limits, wanted: int) -> int:
    """How many of ``wanted`` due tasks may be claimed at ``now``: none while open or paused
    or while a probe is out, one probe when half-open, else what the window and the slots
    allow."""
    state = effective(b, now)
    if state in (State.OPEN, State.PAUSED):
        return 0
    if state is State.HALF_OPEN:
        if b.probe and b.probe_until is not None and b.probe_until > now:
            return 0
        wanted = min(wanted, 1)
    n, _ = grant(b.next_at, now, limits.interval, wanted)
    free = free_slots(b.slots, now, limits.concurrency)
    return n if free is None else min(n, free)


def take(
    b: Breaker, now: datetime, limits: Limits, task_ids: Sequence[str], until: datetime
) -> Breaker:
    """The state after claiming ``task_ids`` (as many as ``admits`` allowed) whose leases end
    at ``until``: their starts in the window, their slots, the probe when half-open."""
    _, next_at = grant(b.next_at, now, limits.interval, len(task_ids))
    slots = {k: v for k, v in b.slots.items() if v > now}
    if limits.concurrency is not None:
        slots.update(dict.fromkeys(task_ids, until))
    changed = replace(b, next_at=next_at, slots=slots)
    if effective(b, now) is State.HALF_OPEN and task_ids:
        changed = replace(
            changed, state=State.HALF_OPEN, probe=task_ids[0], probe_until=until, until=b.until
        )
    elif b.state is State.PAUSED and effective(b, now) is State.CLOSED:
        changed = replace(changed, state=State.CLOSED, until=None, reason="")
    return changed


@dataclass(frozen=True)
class Change:
    """A transition worth a QueueLog row and, for opening and closing, an alert: ``event``
    is ``breaker_opened``, ``breaker_closed``, ``paused`` or ``resumed``."""

    event: str
    message: str


def after(
    b: Breaker, now: datetime, limits: Limits, task_id: str, kind: Kind, error: str = ""
) -> tuple[Breaker, Change | None]:
    """The state after task ``task_id`` of this connector ended as ``kind`` at ``now``: its
    slot freed; a success resets the failure count and closes a half-open breaker whose
    probe it was; a transient failure counts (``threshold`` in a row open it for the
    cooldown; a failed probe re-opens it); ``auth`` opens it until a person resumes it. A
    paused connector stays paused (a person's decision)."""
    slots = {k: v for k, v in b.slots.items() if k != task_id and v > now}
    b = replace(b, slots=slots)
    probing = b.probe == task_id
    if probing:
        b = replace(b, probe="", probe_until=None)
    if kind is Kind.RELEASE:
        return b, None
    if kind is Kind.OK:
        if probing and b.state in (State.OPEN, State.HALF_OPEN):
            closed = replace(
                b, state=State.CLOSED, until=None, reason="", failures=0, opened_at=None
            )
            return closed, Change("breaker_closed", f"probe {task_id} succeeded: closed")
        return replace(b, failures=0), None
    if b.state is State.PAUSED:
        return replace(b, failures=b.failures + (kind is Kind.FAIL)), None
    if kind is Kind.AUTH:
        if b.state is State.OPEN and b.until is None:
            return b, None
        why = f"credentials refused (auth), a person must resume it: {error}".strip(": ")
        return _open(b, now, None, why), Change("breaker_opened", why)
    failures = b.failures + 1
    if probing and b.state in (State.OPEN, State.HALF_OPEN):
        why = f"probe {task_id} failed: {error}".strip(": ")
        return _open(replace(b, failures=failures), now, limits.cooldown, why), Change(
            "breaker_opened", why
        )
    if b.state is State.CLOSED and failures >= limits.threshold:
        why = f"{failures} consecutive transient failures: {error}".strip(": ")
        return _open(replace(b, failures=failures), now, limits.cooldown, why), Change(
            "breaker_opened", why
        )
    return replace(b, failures=failures), None


def _open(b: Breaker, now: datetime, cooldown: float | None, why: str) -> Breaker:
    until = None if cooldown is None else now + timedelta(seconds=cooldown)
    return replace(
        b,
        state=State.OPEN,
        until=until,
        reason=why,
        # a failed probe re-opens: still the same opening (its escalate_after runs on)
        opened_at=(
            b.opened_at
            if b.state in (State.OPEN, State.HALF_OPEN) and b.opened_at is not None
            else now
        ),
    )


def pause(b: Breaker, now: datetime, seconds: float | None, reason: str) -> tuple[Breaker, Change]:
    """A person's pause, for ``seconds`` (``None``: until resumed)."""
    until = None if seconds is None else now + timedelta(seconds=seconds)
    words = "until resumed" if until is None else f"for {seconds:g}s"
    message = f"paused {words}" + (f": {reason}" if reason else "")
    return replace(b, state=State.PAUSED, until=until, reason=reason), Change("paused", message)


def resume(b: Breaker, reason: str = "") -> tuple[Breaker, Change]:
    """A person's resume: ``closed``, failures forgotten, whatever the state was."""
    message = f"resumed from {b.state}" + (f": {reason}" if reason else "")
    return (
        replace(
            b,
            state=State.CLOSED,
            until=None,
            reason="",
            failures=0,
            probe="",
            probe_until=None,
            opened_at=None,
        ),
        Change("resumed", message),
    )


def kind_of(decision: Decision) -> Kind:
    """A finished attempt in a connector's words: auth, a transient failure (5xx, 429, a
    timeout: counted), a handler that never ran (config: like a return), or an answer (done,
    skipped, a permanent failure: the downstream is up)."""
    if decision.error_class is ErrorClass.AUTH:
        return Kind.AUTH
    if decision.error_class is ErrorClass.CONFIG:
        return Kind.RELEASE
    if decision.counts_for_breaker or decision.error_class is ErrorClass.UNKNOWN:
        return Kind.FAIL
    return Kind.OK


def owed(b: Breaker, told: str, now: datetime, escalate_after: float) -> str:
    """The alert a connector owes (docs/design.md §13), ``""`` for none, given what Telegram
    was last told (``told``: ``""``, ``opened``, ``escalated`` or ``closed``): ``opened``
    when it is open (or half-open) and that was not said; ``escalated`` when it has been open
    for ``escalate_after`` seconds (since ``opened_at``) and that was not said (an opening
    not yet announced then is announced that way, once); ``closed`` when it is closed again
    after its opening was announced. A pause owes nothing (a person's own doing)."""
    if b.state in (State.OPEN, State.HALF_OPEN):
        since = b.opened_at
        if told != "escalated" and since and since + timedelta(seconds=escalate_after) <= now:
            return "escalated"
        return "" if told in ("opened", "escalated") else "opened"
    if b.state is State.CLOSED and told in ("opened", "escalated"):
        return "closed"
    return ""


def alert_text(alert: Mapping[str, Any], where: str) -> str:
    """One connector alert's plain text from ``alert`` (``name``, ``kind`` — ``opened``,
    ``escalated`` or ``closed`` —, ``until``, ``opened_at``, ``reason``, ``last_error``,
    ``waiting``): what happened, since when, why, the last error and how many tasks wait
    (docs/design.md §13)."""
    name = str(alert["name"])
    kind = str(alert["kind"])
    until = alert["until"]
    if kind == "closed":
        head = f"connector {name} closed again: tasks are starting"
    else:
        since = alert["opened_at"]
        opened = f" since {format_ts(since)}" if since else ""
        verb = "still open" if kind == "escalated" else "opened"
        head = f"connector {name} {verb}{opened}"
        head += (
            f"; it tries one task at {format_ts(until)}"
            if until
            else "; it stays open until a person runs `sheetq connector resume " + name + "`"
        )
    lines = [f"sheetq {where}: {head}"]
    if kind != "closed":
        if alert["reason"]:
            lines.append(f"why: {alert['reason']}")
        if alert["last_error"] and alert["last_error"] not in str(alert["reason"]):
            lines.append(f"last error: {alert['last_error']}")
        lines.append(f"{int(alert['waiting'])} task(s) wait for it")
    return "\n".join(lines)


def why_waiting(b: Breaker, now: datetime, limits: Limits) -> str:
    """Why a connector's due tasks wait at ``now``, in a person's words (``process
    --dry-run``): open or paused until when and why, half-open, its slots taken, its rate
    limit's next start."""
    concurrency = limits.concurrency
    state = effective(b, now)
    if state in (State.OPEN, State.PAUSED):
        until = f" until {format_ts(b.until)}" if b.until else " until resumed"
        return f"{state}{until}" + (f": {b.reason}" if b.reason else "")
    if state is State.HALF_OPEN:
        if b.probe and b.probe_until is not None and b.probe_until > now:
            return f"half-open: its one probe ({b.probe}) is running"
        return "half-open: one probe at a time"
    free = sum(1 for until in b.slots.values() if until > now)
    if concurrency is not None and free >= concurrency:
        return f"all {concurrency} slot(s) taken"
    if b.next_at is not None and b.next_at > now:
        return f"its rate limit's next start is at {format_ts(b.next_at)}"
    return f"its rate limit starts one task every {limits.interval:g}s"
