"""Queue semantics: read rows, decide, return change sets. No I/O here.

Every function takes parsed rows and the time, and returns a ``ChangeSet``
(cell updates re-located by ``task_id``, QueueLog appends) plus counts. The
runner and the CLI apply the change sets through the storage port, so the
Queue change and its QueueLog rows always land in one atomic write.
"""

from __future__ import annotations

import random
from collections import Counter, defaultdict
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta, tzinfo
from typing import Any, Generic, TypeVar, overload

from sheetq.config import Settings, TypeConfig
from sheetq.model import (
    FINISHED,
    MAX_ERROR_CHARS,
    MAX_RESULT_CHARS,
    RETRYABLE,
    WAITING,
    ErrorClass,
    Event,
    Status,
    parse_priority,
)
from sheetq.order import Member, claimable
from sheetq.policy import due_since, expiry, is_due, log_values, outcome_message, recover
from sheetq.redact import printable, shorten
from sheetq.retry import Decision
from sheetq.sheet.store import AppendRow, CellValue, ChangeSet, Row, UpdateRow, cell_text
from sheetq.times import Unparseable, format_not_before, format_ts, parse_ts

# Columns a `process` scan needs: everything but the large text cells.
SCAN_COLUMNS = (
    "task_id",
    "created_at",
    "type",
    "status",
    "retry_count",
    "next_retry_at",
    "idempotency_key",
    "error_class",
    "lease_owner",
    "lease_until",
    "alerted_at",
    "owner",
    "last_error",
    "updated_at",
    "priority",
    "group",
)
STATUS_COLUMNS = (
    "task_id",
    "created_at",
    "type",
    "status",
    "next_retry_at",
    "alerted_at",
    "error_class",
    "lease_until",
    "lease_owner",
    "priority",
    "group",
)
KEY_COLUMNS = ("task_id", "idempotency_key", "payload_hash", "status")
_FAR_FUTURE = datetime.max.replace(tzinfo=None)
_MAY_HOLD = frozenset({Status.PENDING, Status.PROCESSING, Status.RETRY, Status.FAILED})
_LATE_STATUSES = frozenset(
    {
        ErrorClass.PERMANENT,
        ErrorClass.AUTH,
        ErrorClass.EXPIRED,
        ErrorClass.DUPLICATE,
        ErrorClass.CONFIG,
    }
)


def as_int(value: CellValue) -> int:
    """A counter cell as people leave it: ``3``, ``3.0``, ``"3"``, ``""`` → int."""
    if value is None or value == "" or isinstance(value, bool):
        return 0
    if isinstance(value, int | float):
        return int(value)
    try:
        return int(float(str(value).strip()))
    except ValueError:
        return 0


T = TypeVar("T")


class cached_property(Generic[T]):
    """``functools.cached_property`` without its lock: Python 3.11 takes a lock on every
    first read, and a batch plan reads several properties of every row it scans."""

    def __init__(self, compute: Callable[[Any], T]) -> None:
        self._compute = compute
        self._name = compute.__name__

    @overload
    def __get__(self, row: None, owner: type) -> cached_property[T]: ...
    @overload
    def __get__(self, row: object, owner: type) -> T: ...
    def __get__(self, row: object, owner: type) -> T | cached_property[T]:
        if row is None:
            return self
        value = row.__dict__[self._name] = self._compute(row)
        return value


class QueueRow:
    """One Queue row, parsed leniently and lazily (a 50,000-row scan only parses what the
    decision reads). ``status`` is ``None`` for text sheetq does not know."""

    def __init__(self, raw: Row, task_id: str, status_text: str, tz: tzinfo, locale: str) -> None:
        self.raw = raw
        self.row = raw.number
        self.task_id = task_id
        self.status_text = status_text
        self.status = Status.parse(status_text)
        self._tz = tz
        self._locale = locale

    def _get(self, column: str) -> str:
        return cell_text(self.raw.values.get(column)).strip()

    def _time(self, column: str) -> datetime | Unparseable | None:
        return parse_ts(self.raw.values.get(column), self._tz, self._locale)

    @cached_property
    def type(self) -> str:
        return self._get("type")

    @cached_property
    def idempotency_key(self) -> str:
        return self._get("idempotency_key")

    @cached_property
    def error_class(self) -> str:
        return self._get("error_class").lower()

    @cached_property
    def lease_owner(self) -> str:
        return self._get("lease_owner")

    @cached_property
    def alerted_at(self) -> str:
        return self._get("alerted_at")

    @cached_property
    def owner(self) -> str:
        return self._get("owner")

    @cached_property
    def group(self) -> str:
        """The task's group (docs/design.md §14; ``""``: none)."""
        return self._get("group")

    @cached_property
    def priority(self) -> int | None:
        """The ``priority`` cell (docs/design.md §14); ``None`` when empty or not an integer
        (then the type's priority counts: ``priority_typo`` tells a person's typo apart)."""
        return parse_priority(self.raw.values.get("priority"))

    @property
    def priority_typo(self) -> str:
        """The ``priority`` cell's text when a person typed something that is not an
        integer (``"high"``, ``1.5``); ``""`` otherwise."""
        text = self._get("priority")
        return text if text and self.priority is None else ""

    def level(self, settings: Settings) -> int:
        """The priority the task runs at: its cell's, else its type's."""
        own = self.priority
        return own if own is not None else settings.type_config(self.type).priority

    @cached_property
    def retry_count(self) -> int:
        return as_int(self.raw.values.get("retry_count"))

    @cached_property
    def created_at(self) -> datetime | Unparseable | None:
        return self._time("created_at")

    @cached_property
    def next_retry_at(self) -> datetime | Unparseable | None:
        return self._time("next_retry_at")

    @cached_property
    def lease_until(self) -> datetime | Unparseable | None:
        return self._time("lease_until")

    @property
    def created(self) -> datetime | None:
        created = self.created_at
        return created if isinstance(created, datetime) else None

    def order(self) -> tuple[Any, str]:
        """Oldest first: by ``created_at`` then ``task_id`` (ULIDs sort by time)."""
        created = self.created
        return (created.replace(tzinfo=None) if created else _FAR_FUTURE, self.task_id)

    def due_order(self) -> tuple[Any, str]:
        """The claim order: longest due first (``sheetq.policy.due_since``), then
        ``task_id``."""
        since = due_since(self.created, self.next_retry_at)
        return (since.astimezone(UTC).replace(tzinfo=None) if since else _FAR_FUTURE, self.task_id)


def parse_rows(rows: Iterable[Row], tz: tzinfo, locale: str) -> list[QueueRow]:
    """Parse Queue rows; rows without a ``task_id`` are not tasks and are left out."""
    out: list[QueueRow] = []
    for raw in rows:
        values = raw.values
        task_id = cell_text(values.get("task_id")).strip()
        if task_id:
            out.append(QueueRow(raw, task_id, cell_text(values.get("status")), tz, locale))
    return out


def log_row(
    now: datetime,
    task_id: str,
    task_type: str,
    event: Event,
    status: Status | str,
    retry_count: int,
    message: str = "",
    run_id: str = "",
    duration_ms: int | None = None,
    *,
    worksheet: str,
) -> AppendRow:
    """One QueueLog row (``sheetq.policy.log_values``) appended to ``worksheet``."""
    return AppendRow(
        worksheet,
        log_values(
            now, task_id, task_type, event, status, retry_count, message, run_id, duration_ms
        ),
    )


# --- a person's edits ------------------------------------------------------------


def requeued_by_person(row: QueueRow) -> str | None:
    """If a person typed ``pending``/``retry`` over a finished row, the status it had; else None.

    sheetq never leaves these marks on a waiting row, so they show a hand
    edit: status text not in sheetq's exact lower-case form; a ``pending`` row
    with an error class or an ``alerted_at``; a ``retry`` row without
    ``next_retry_at``, with ``alerted_at``, or with an error class that never
    retries (permanent, auth, expired, duplicate, config).
    """
    if row.status not in WAITING:
        return None
    typed = row.status_text != str(row.status)
    late = row.error_class in _LATE_STATUSES
    if row.status is Status.PENDING:
        marked = bool(row.error_class) or bool(row.alerted_at)
    else:
        marked = row.next_retry_at is None or bool(row.alerted_at) or late
    if not (typed or marked):
        return None
    if row.alerted_at or late or (row.error_class in RETRYABLE and row.status is Status.PENDING):
        return "skipped" if row.error_class == ErrorClass.DUPLICATE else "failed"
    return "edited"


# --- process: planning a batch ------------------------------------------------


@dataclass
class Claim:
    """A row this run holds. ``reconcile``: a lost outcome to check, not a task to run."""

    row: QueueRow
    previous: Status
    reconcile: bool = False


@dataclass
class Lookahead:
    """What a batch plan leaves for the run's next batches: the due tasks it did not claim,
    in claim order (``rest``), valid until ``horizon`` (UTC; the first moment a task over the
    plan's rows becomes due, expires or has its lease run out; ``None``: never), and the
    plan's count of due tasks without a handler, by type."""

    rest: list[QueueRow]
    horizon: datetime | None
    without_handler: Counter[str]


@dataclass
class BatchPlan:
    changes: ChangeSet
    claims: list[Claim] = field(default_factory=list)
    lease_until: datetime | None = None
    recovered: int = 0
    expired: int = 0
    requeued: int = 0
    skipped: int = 0
    failed: int = 0
    unrecognised: int = 0
    without_handler: Counter[str] = field(default_factory=Counter)
    held_by_group: int = 0  # due tasks waiting for an earlier task of their group
    invalid_times: list[str] = field(default_factory=list)
    invalid_priorities: list[str] = field(default_factory=list)  # a person's typos, explained
    ahead: Lookahead | None = None  # the due tasks left for the next batches (``next_batch``)

    @property
    def has_work(self) -> bool:
        return bool(self.changes)


@dataclass
class _RowChange:
    row: QueueRow
    values: dict[str, CellValue] = field(default_factory=dict)


def _winners(rows: Sequence[QueueRow]) -> dict[str, QueueRow]:
    """Of rows sharing an idempotency key, the earliest ``created_at`` (then ``task_id``)."""
    best: dict[str, QueueRow] = {}
    for row in rows:
        if not row.idempotency_key:
            continue
        current = best.get(row.idempotency_key)
        if current is None or row.order() < current.order():
            best[row.idempotency_key] = row
    return best


def _due(row: QueueRow, now: datetime) -> bool:
    return is_due(row.next_retry_at, now)


def plan_batch(
    rows: Sequence[QueueRow],
    *,
    settings: Settings,
    now: datetime,
    run_id: str,
    batch_size: int,
    rng: random.Random,
    types: Sequence[str] = (),
    open_circuits: Iterable[str] = (),
    held: Collection[str] = (),
    key_holders: Mapping[str, str] | None = None,
    settled: Mapping[str, Status] | None = None,
) -> BatchPlan:
    """What one claim request writes: recoveries, expiries, a person's requeues,
    duplicate-key losers, and the claim of the oldest due rows (docs/design.md §5 steps 2–4).

    A loser is a row whose idempotency key an earlier row among ``rows`` has, or (when the
    backend sees only some rows, as PostgreSQL's claim does) whose key ``key_holders``
    (key → the task id that holds it) gives to another task.

    A task of a group is claimed only when it is the one its group lets run
    (``sheetq.order.claimable``); ``settled`` gives the statuses that ``held`` tasks' results
    (not written yet) set, so the next task of a group may ride in the same write.

    ``BatchPlan.ahead`` keeps the due tasks this batch did not take, in claim order, with the
    first moment a decision over ``rows`` may change (``next_batch``); ``None`` when the
    queue has groups or lost outcomes to reconcile, whose decisions each batch changes."""
    plan = BatchPlan(ChangeSet())
    selected = set(types)
    blocked = set(open_circuits)
    writes = _Writes(settings, now, run_id)
    change, log = writes.change, writes.log
    stamp = writes.stamp
    horizon: datetime | None = None

    winners = _winners(rows)
    free = free_in_groups(rows, settings, held=held, settled=settled or {})
    candidates: list[QueueRow] = []
    reconciles: list[QueueRow] = []
    for row in rows:
        if row.task_id in held:
            continue  # this run's results for it are not written yet (they ride in this claim)
        if row.status is None:
            plan.unrecognised += 1
            continue
        if row.status is not Status.PROCESSING and row.status not in WAITING:
            continue
        if selected and row.type not in selected:
            continue
        config = settings.type_config(row.type)
        # Step 2: a lease that ran out means the outcome of that run was lost.
        if row.status is Status.PROCESSING:
            until = row.lease_until
            if isinstance(until, datetime) and until > now:
                horizon = until if horizon is None else min(horizon, until)
                continue
            if config.on_unknown == "reconcile" and config.reconcile is not None:
                if row.type not in blocked:
                    reconciles.append(row)
                continue
            decision = recover(row.retry_count, config, now, rng)
            change(row, **decision_values(decision, row, config))
            message = outcome_message(decision)  # "unknown: lease expired …": stats reads the class
            log(row, Event.RECOVERED, decision.status, decision.retry_count, message)
            plan.recovered += 1
            plan.failed += decision.status is Status.FAILED
            continue
        if row.status not in WAITING:
            continue
        status = row.status
        was = requeued_by_person(row)
        if was is not None:
            values: dict[str, CellValue] = {
                "status": str(status),
                "alerted_at": "",
                "error_class": "",
            }
            typed_at = row.next_retry_at
            if isinstance(typed_at, datetime) and typed_at > now:
                # a time the person typed with it ("retry tomorrow at 9"): the task waits for
                # it, and the cell keeps what they typed; max_age counts from it (step 3)
                when = f"; due {format_ts(typed_at)}"
            else:
                if isinstance(typed_at, Unparseable):  # docs/design.md §2: due, with a warning
                    plan.invalid_times.append(
                        f"{row.task_id}: next_retry_at {typed_at.text!r} typed with the "
                        f"requeue (replaced by {stamp})"
                    )
                values["next_retry_at"] = stamp  # due now: max_age counts from here (step 3)
                row.next_retry_at = now
                when = ""
            change(row, **values)
            what = (
                f"requeued by a person (was {was}){when}"
                if was != "edited"
                else (f"status typed by a person as {row.status_text!r}{when}")
            )
            log(row, Event.REQUEUED, status, row.retry_count, what)
            plan.requeued += 1
            row.error_class = ""
        if isinstance(row.next_retry_at, Unparseable):
            plan.invalid_times.append(f"{row.task_id}: next_retry_at {row.next_retry_at.text!r}")
        # Step 3: too old to be worth running. Age counts from when the task became due:
        # its creation, or its not-before time (a delayed task, a backoff, a requeue).
        since = due_since(row.created, row.next_retry_at)
        message = expiry(since, now, config.policy.max_age)
        if message:
            change(
                row,
                status=str(Status.FAILED),
                error_class=str(ErrorClass.EXPIRED),
                last_error=message,
                next_retry_at="",
                alerted_at="",
                owner=row.owner or config.owner,
            )
            log(row, Event.EXPIRED, Status.FAILED, row.retry_count, message)
            plan.expired += 1
            continue
        # Two enqueues that raced with one key: only the earliest row ever runs.
        winner = winners.get(row.idempotency_key)
        first = winner.task_id if winner is not None and winner is not row else None
        if first is None and key_holders and row.idempotency_key:
            holder = key_holders.get(row.idempotency_key)
            first = holder if holder not in (None, row.task_id) else None
        if first is not None:
            message = f"duplicate of {first} (same idempotency key, created earlier)"
            change(
                row,
                status=str(Status.SKIPPED),
                error_class=str(ErrorClass.DUPLICATE),
                last_error=message,
                next_retry_at="",
            )
            log(row, Event.SKIPPED, Status.SKIPPED, row.retry_count, message)
            plan.skipped += 1
            continue
        if config.handler is None:
            plan.without_handler[row.type or "(empty)"] += 1
            continue
        if row.type in blocked:
            continue
        if not _due(row, now):
            due_at = row.next_retry_at
            if isinstance(due_at, datetime):
                horizon = due_at if horizon is None else min(horizon, due_at)
            continue
        if free and row.raw.values.get("group") and free.get(row.group) != row.task_id:
            plan.held_by_group += 1  # docs/design.md §14: an earlier task of its group first
            continue
        cell = row.raw.values.get("priority")
        if type(cell) is not int and cell not in (None, "") and row.priority_typo:
            plan.invalid_priorities.append(priority_note(row, settings))
        if since is not None and config.policy.max_age is not None:
            ends = since + timedelta(seconds=config.policy.max_age)
            horizon = ends if horizon is None else min(horizon, ends)
        candidates.append(row)

    # docs/design.md §14: highest priority first, then longest due, then task_id
    levels = {t: settings.type_config(t).priority for t in {r.type for r in candidates}}

    def claim_order(row: QueueRow) -> tuple[int, Any, str]:
        cell = row.raw.values.get("priority")  # an int as sheetq writes it: no parsing
        own = cell if type(cell) is int else row.priority
        since, task_id = row.due_order()
        return (-(own if own is not None else levels[row.type]), since, task_id)

    candidates.sort(key=claim_order)
    reconciles.sort(key=QueueRow.order)
    chosen = reconciles[:batch_size]
    taken = max(0, batch_size - len(chosen))
    chosen += candidates[:taken]
    _claim(plan, writes, chosen, reconciling={r.task_id for r in reconciles})
    grouped = bool(free) or plan.held_by_group or any(r.raw.values.get("group") for r in candidates)
    if not reconciles and not grouped:
        plan.ahead = Lookahead(candidates[taken:], horizon, Counter(plan.without_handler))
    writes.into(plan)
    return plan


def next_batch(
    ahead: Lookahead, *, settings: Settings, now: datetime, run_id: str, batch_size: int
) -> BatchPlan:
    """The next batch from what an earlier ``plan_batch`` left ``ahead``: its first
    ``batch_size`` tasks claimed, in claim order, as ``plan_batch`` over the same rows would
    claim them at ``now``.

    The caller's part: use it only while no one but this run has written to the queue since
    those rows were read, ``now`` is before ``ahead.horizon``, no circuit opened or closed,
    and every task this run claimed since has finished; otherwise plan from a new read."""
    plan = BatchPlan(ChangeSet(), without_handler=Counter(ahead.without_handler))
    writes = _Writes(settings, now, run_id)
    chosen, ahead.rest = ahead.rest[:batch_size], ahead.rest[batch_size:]
    _claim(plan, writes, chosen, reconciling=set())
    plan.ahead = ahead
    writes.into(plan)
    return plan


class _Writes:
    """The Queue cells and QueueLog rows a plan writes, one update per task."""

    def __init__(self, settings: Settings, now: datetime, run_id: str) -> None:
        self.settings = settings
        self.now = now
        self.run_id = run_id
        self.stamp = format_ts(now)
        self.changes: dict[str, _RowChange] = {}
        self.logs: list[AppendRow] = []

    def change(self, row: QueueRow, **values: CellValue) -> None:
        entry = self.changes.setdefault(row.task_id, _RowChange(row))
        entry.values.update(values)
        entry.values["updated_at"] = self.stamp

    def log(
        self,
        row: QueueRow,
        event: Event,
        status: Status | str,
        retry_count: int,
        message: str = "",
    ) -> None:
        self.logs.append(
            log_row(
                self.now,
                row.task_id,
                row.type,
                event,
                status,
                retry_count,
                message,
                self.run_id,
                worksheet=self.settings.log_sheet,
            )
        )

    def into(self, plan: BatchPlan) -> None:
        queue = self.settings.queue_sheet
        plan.changes.updates.extend(
            UpdateRow(queue, e.row.task_id, e.row.row, e.values) for e in self.changes.values()
        )
        plan.changes.appends.extend(self.logs)


def _claim(
    plan: BatchPlan, writes: _Writes, chosen: Sequence[QueueRow], *, reconciling: Collection[str]
) -> None:
    """Claim ``chosen`` (docs/design.md §5 step 4): one lease for the batch, long enough for
    every task's ``timeout`` one after another; ``reconciling``: lost outcomes to check."""
    if not chosen:
        return
    settings = writes.settings
    timeouts = sum(settings.type_config(r.type).policy.timeout for r in chosen)
    lease = max(settings.type_config(r.type).policy.lease for r in chosen)
    plan.lease_until = writes.now + timedelta(seconds=lease + timeouts)
    lease_text = format_ts(plan.lease_until)
    for row in chosen:
        reconcile = row.task_id in reconciling
        previous = Status.PROCESSING if reconcile else (row.status or Status.PENDING)
        earlier = writes.changes.get(row.task_id)
        if earlier is not None and "status" in earlier.values:
            previous = Status(str(earlier.values["status"]))
        writes.change(
            row, status=str(Status.PROCESSING), lease_owner=writes.run_id, lease_until=lease_text
        )
        message = "reconciling a lost outcome" if reconcile else f"attempt {row.retry_count + 1}"
        writes.log(row, Event.CLAIMED, Status.PROCESSING, row.retry_count, message)
        plan.claims.append(Claim(row, previous, reconcile=reconcile))


def group_members(
    rows: Iterable[QueueRow],
    settings: Settings,
    *,
    held: Collection[str] = (),
    settled: Mapping[str, Status] | None = None,
) -> dict[str, list[Member]]:
    """Each group's tasks as ``sheetq.order`` sees them (``held`` tasks: with the status their
    unwritten result sets, from ``settled``; still ``processing`` when it does not say)."""
    out: dict[str, list[Member]] = defaultdict(list)
    blocks: dict[str, bool] = {}
    for row in rows:
        if not row.raw.values.get("group"):
            continue  # the common case, read without parsing
        status = row.status
        if row.task_id in held:
            status = (settled or {}).get(row.task_id, Status.PROCESSING)
        if status not in _MAY_HOLD:
            continue  # done, skipped, unrecognised: they never hold a group
        group = row.group
        if not group:
            continue
        if row.type not in blocks:
            blocks[row.type] = settings.type_config(row.type).group_blocks_on_failure
        out[group].append(Member(row.task_id, row.order(), status, blocks[row.type]))
    return out


def free_in_groups(
    rows: Iterable[QueueRow],
    settings: Settings,
    *,
    held: Collection[str] = (),
    settled: Mapping[str, Status] | None = None,
) -> dict[str, str | None]:
    """Group → the task it lets run now (``None``: none; docs/design.md §14)."""
    members = group_members(rows, settings, held=held, settled=settled)
    return {group: claimable(tasks) for group, tasks in members.items()}


def priority_note(row: QueueRow, settings: Settings) -> str:
    """What ``process`` and ``status`` say of a ``priority`` cell that is not an integer."""
    return (
        f"{row.task_id}: priority {row.priority_typo!r} is not an integer; it runs at its "
        f"type's priority {settings.type_config(row.type).priority}"
    )


def decision_values(decision: Decision, row: QueueRow, config: TypeConfig) -> dict[str, CellValue]:
    """The Queue cells a decision writes. The lease is cleared; a new failure clears
    ``alerted_at`` so it is alerted again."""
    values: dict[str, CellValue] = {
        "status": str(decision.status),
        "retry_count": decision.retry_count,
        "next_retry_at": format_not_before(decision.next_retry_at)
        if decision.next_retry_at
        else "",
        "error_class": str(decision.error_class) if decision.error_class else "",
        "last_error": shorten(printable(decision.message), MAX_ERROR_CHARS)
        if decision.status is not Status.DONE
        else "",
        "lease_owner": "",
        "lease_until": "",
    }
    if decision.status in (Status.DONE, Status.SKIPPED) or decision.result:
        values["result"] = shorten(printable(decision.result), MAX_RESULT_CHARS)
    if decision.status is Status.FAILED:
        values["alerted_at"] = ""
    if not row.owner and config.owner:
        values["owner"] = config.owner
    return values


def complete(
    claim: Claim,
    decision: Decision,
    *,
    config: TypeConfig,
    now: datetime,
    run_id: str,
    duration_ms: int | None,
    settings: Settings,
    event: Event | None = None,
) -> ChangeSet:
    """The Queue update and QueueLog row for one finished attempt."""
    row = claim.row
    values = decision_values(decision, row, config)
    values["updated_at"] = format_ts(now)
    event = event or Event(str(decision.status))
    message = outcome_message(decision)
    return ChangeSet(
        updates=[UpdateRow(settings.queue_sheet, row.task_id, row.row, values)],
        appends=[
            log_row(
                now,
                row.task_id,
                row.type,
                event,
                decision.status,
                decision.retry_count,
                message,
                run_id,
                duration_ms,
                worksheet=settings.log_sheet,
            )
        ],
    )


def release(
    claim: Claim, *, now: datetime, run_id: str, reason: str, settings: Settings
) -> ChangeSet:
    """Give back a claimed row that was not started: previous status, lease cleared,
    no attempt counted. Logged as ``requeued``."""
    row = claim.row
    values: dict[str, CellValue] = {
        "status": str(claim.previous),
        "lease_owner": "",
        "lease_until": "",
        "updated_at": format_ts(now),
    }
    return ChangeSet(
        updates=[UpdateRow(settings.queue_sheet, row.task_id, row.row, values)],
        appends=[
            log_row(
                now,
                row.task_id,
                row.type,
                Event.REQUEUED,
                claim.previous,
                row.retry_count,
                f"released, not started: {reason}",
                run_id,
                worksheet=settings.log_sheet,
            )
        ],
    )


def owed_alerts(rows: Iterable[QueueRow]) -> list[QueueRow]:
    """Failed rows with no ``alerted_at``: alerts still owed (docs/design.md §9)."""
    return [r for r in rows if r.status is Status.FAILED and not r.alerted_at]


def finished(status: Status | None) -> bool:
    return status in FINISHED


# --- what a batch plan reads -------------------------------------------------


def key_text(value: CellValue) -> str:
    """An idempotency key cell as the plan compares it: its text, stripped."""
    return cell_text(value).strip()


def shared_keys(rows: Iterable[Row]) -> set[str]:
    """The idempotency keys (``key_text``) that two or more of ``rows`` hold."""
    counts = Counter(key_text(r.values.get("idempotency_key")) for r in rows)
    counts.pop("", None)
    return {key for key, count in counts.items() if count > 1}


def plan_needs(values: Mapping[str, CellValue], shared: Collection[str]) -> bool:
    """Whether ``plan_batch`` or the owed alerts after it can need this Queue row.

    Every row but a finished one (``done``, ``skipped``, ``failed``, in any letter case and
    spacing of ASCII letters) that owes no alert (``failed`` with ``alerted_at`` blank), is
    not a ``failed`` task of a group (it may hold its group, docs/design.md §14) and whose
    idempotency key no other row holds (``shared``: ``shared_keys`` of every row; an earlier
    finished row still decides which row of a shared key runs). A row whose status
    sheetq does not recognise is needed (it is counted). The local backend filters with the
    same rule in SQL (``Read.planned``); a test runs both on generated queues.
    """
    status = values.get("status")
    if type(status) is not str:
        return True
    text = status.strip()
    if not text.isascii() or text.lower() not in FINISHED:
        return True
    if text.lower() == Status.FAILED:
        alerted = values.get("alerted_at")
        if alerted is None or (type(alerted) is str and not alerted.strip()):
            return True
        group = values.get("group")
        if group is not None and (type(group) is not str or group.strip()):
            return True
    key = key_text(values.get("idempotency_key"))
    return bool(key) and key in shared
