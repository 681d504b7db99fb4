"""The queue port: what the commands ask of a queue, wherever it is stored (docs/design.md).

``QueuePort`` is a protocol, shaped like what a queue does (enqueue a batch, run: claim,
execute, settle, recover; requeue / skip / archive by filter; owe and mark alerts; the
reads behind ``status``, ``list``, ``show`` and ``stats``), and the dataclasses below are
the values that cross it. Two engines implement it, neither built on the other: the sheet
engine (``sheetq.sheet.engine.SheetQueue``: a Google spreadsheet or a ``local:`` workbook)
and PostgreSQL (``sheetq.postgres.engine.PgQueue``). ``sheetq.backends.open_queue`` is the
one place that turns a configuration into one of them.

This module imports no backend, and nothing here does I/O. Errors are the CLI's
(``sheetq.errors``): ``SchemaError`` (exit 2) when ``init`` has not prepared the store,
``StoreUnavailable`` (exit 1) when it cannot be reached, ``UsageError`` (exit 2) for an
operation the backend does not have (``worker`` on a sheet, ``--dashboard`` on a database).
"""

from __future__ import annotations

import random
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, tzinfo
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from sheetq.model import Row, Status

if TYPE_CHECKING:
    from sheetq.accept import Enqueued, NewTask
    from sheetq.checks import Check
    from sheetq.clock import Clock
    from sheetq.config import Settings
    from sheetq.migrate import Source, Written
    from sheetq.stats import Stats
    from sheetq.summary import RunOptions, RunSummary

NotBefore = Callable[[str], "datetime | None"]  # the tasks' not-before time, given a time zone
Say = Callable[[str], None]  # one line of what was done
# Sends owed alerts as one message: (items, where the queue is) → (covered, the delivery)
Send = Callable[[list["AlertItem"], str], "tuple[AlertReport, Delivery]"]


# --- alerts ---------------------------------------------------------------------------------


@dataclass
class Delivery:
    """What happened to one message.

    ``problem`` is ``""`` when delivered, else one word: ``network`` (unreachable, 5xx,
    timeout, deadline), ``flood`` (429 beyond the wait budget), ``token`` (401/404),
    ``forbidden`` (403), ``rejected`` (400 even as plain text), ``error`` (anything
    else). ``notes`` are token-free lines for stderr.
    """

    sent: bool = False
    problem: str = ""
    notes: list[str] = field(default_factory=list)
    message_id: int | None = None
    plain: bool = False  # delivered by the plain-text fallback
    new_chat_id: int | None = None  # the group was migrated to this id
    waited: float = 0.0  # seconds spent honouring 429s


@dataclass
class AlertItem:
    """One owed failure alert. ``row`` is where the task was last seen in a sheet (0: it
    has no sheet row); ``link`` where a person finds it (a URL for Google, the task id for
    local, ``sheetq show ID`` for PostgreSQL)."""

    task_id: str
    type: str
    error_class: str
    attempts: int
    error: str
    row: int
    owner: str = ""
    link: str = ""


@dataclass
class AlertReport:
    """What the notifier did: ``covered`` task ids are to be marked ``alerted_at``."""

    covered: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


# Sends the owed alerts as one message: (items, where the queue is: its title) → what it covered
Notifier = Callable[[list[AlertItem], str], AlertReport]


# --- a claimed task ---------------------------------------------------------------------------


class Claimed(Protocol):
    """What a run knows of a task it claimed, as ``sheetq.execute.Executor`` runs it:
    identity, attempts so far, key, owner, creation time (UTC), and ``row``, its sheet row
    for an alert's link (0 where it has none)."""

    @property
    def task_id(self) -> str: ...

    @property
    def type(self) -> str: ...

    @property
    def retry_count(self) -> int: ...

    @property
    def idempotency_key(self) -> str: ...

    @property
    def owner(self) -> str: ...

    @property
    def row(self) -> int: ...

    @property
    def created(self) -> datetime | None: ...


# --- the reads ------------------------------------------------------------------------------


@dataclass
class BlockedGroup:
    """A group held by a failed task whose type says ``group_blocks_on_failure``
    (docs/design.md §14): the group, the task holding it (id, type, status, error class),
    how many tasks wait behind it, and how long the longest-due of them has been due
    (seconds; ``None``: none due yet)."""

    group: str
    task_id: str
    type: str
    status: str
    error_class: str
    waiting: int
    oldest: float | None = None

    def as_json(self) -> dict[str, Any]:
        return {
            "group": self.group,
            "task_id": self.task_id,
            "type": self.type,
            "status": self.status,
            "error_class": self.error_class,
            "waiting": self.waiting,
            "oldest_waiting_seconds": None if self.oldest is None else round(self.oldest),
        }


@dataclass
class DueAtPriority:
    """Due waiting tasks of one priority (docs/design.md §14): how many, and the
    longest-due one (its id, and seconds it has been due). Tasks waiting for an earlier task
    of their group count here too; tasks of a group a failed task blocks do not (they are
    shown under ``blocked``)."""

    priority: int
    due: int
    task_id: str
    oldest: float


@dataclass
class QueueTally:
    """What ``sheetq status`` counts: by status and by type × status (unrecognised statuses
    apart, in ``strange``); ``oldest``: seconds the longest-due waiting task has been due
    (``None``: none due); ``due``: retries due now; ``owed``: failed tasks not alerted yet;
    ``unparseable``: waiting rows whose ``next_retry_at`` a person typed unreadably;
    ``bad_priorities``: waiting tasks whose ``priority`` cell a person typed as no integer,
    as (task id, the text, the type's priority they run at; docs/design.md §14);
    ``blocked``: groups a failed task holds for a person; ``by_priority``: the oldest due
    task of each priority."""

    counts: Counter[str] = field(default_factory=Counter)
    by_type: dict[str, Counter[str]] = field(default_factory=lambda: defaultdict(Counter))
    strange: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    oldest: float | None = None
    due: int = 0
    owed: int = 0
    unrecognised: int = 0
    without_handler: int = 0
    total: int = 0
    unparseable: list[str] = field(default_factory=list)
    bad_priorities: list[tuple[str, str, int]] = field(default_factory=list)
    blocked: list[BlockedGroup] = field(default_factory=list)
    by_priority: list[DueAtPriority] = field(default_factory=list)  # highest first


@dataclass
class HeldGroup:
    """``count`` processing tasks under ``run_id`` whose run is gone (crashed or killed):
    what ``status`` tells a person, and when the next run recovers them.

    ``lease_until``: the latest lease of its tasks (``None``: unreadable); ``expired``:
    recovered by the next run; ``on_unknown``: type → ``retry``/``reconcile``/``fail``;
    ``journal``: killed on this host, whose journal the next run here applies first (sheet);
    ``host``/``pid``/``kind``: where the run was and what it was (``worker`` or
    ``process``; PostgreSQL knows its runs);
    ``unknown_types``: types no run here is configured for (their recovery waits for one)."""

    run_id: str
    count: int
    lease_until: datetime | None
    expired: bool
    on_unknown: dict[str, str] = field(default_factory=dict)
    by_type: dict[str, int] = field(default_factory=dict)
    journal: bool = False
    host: str = ""
    pid: int | None = None
    unknown_types: list[str] = field(default_factory=list)
    kind: str = ""

    def as_json(self, tz: tzinfo) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "count": self.count,
            "lease_until": self.lease_until.astimezone(tz).isoformat()
            if self.lease_until
            else None,
            "lease_expired": self.expired,
            "on_unknown": self.on_unknown,
            "by_type": self.by_type,
            "host_journal": self.journal,
            "host": self.host or None,
            "pid": self.pid,
            "kind": self.kind or None,
            "not_configured_here": self.unknown_types,
        }

    def line(self, tz: tzinfo) -> str:
        """``10 processing under run R, lease ends 2026-01-05 03:12 CET (then …)``."""
        plan = ", ".join(f"{t}: {a}" for t, a in self.on_unknown.items())
        where = f" on host {self.host}" + (f" (pid {self.pid})" if self.pid else "")
        name = "worker" if self.kind == "worker" else "run"
        run = f"{name} {self.run_id or '(none)'}" + (where if self.host else "")
        head = f"{self.count} processing under {run}"
        if self.host:
            head += ", whose session is gone"
        if self.journal:
            return (
                f"{head}, killed on this host: the next `sheetq process` here applies its "
                "journal at once (finished outcomes written, unstarted tasks returned without "
                f"an attempt, a task it was running recovered per on_unknown: {plan})"
            )
        waits = ""
        if self.unknown_types:
            names = ", ".join(self.unknown_types)
            waits = f"; {names}: no run here is configured for it, a run that is recovers it"
        if self.lease_until is None:
            return (
                f"{head}, lease unreadable: the next run recovers them per on_unknown "
                f"({plan}){waits}"
            )
        when = self.lease_until.astimezone(tz).strftime("%Y-%m-%d %H:%M %Z")
        if self.expired:
            return (
                f"{head}, lease ended {when}: the next run recovers them per on_unknown "
                f"({plan}){waits}"
            )
        return f"{head}, lease ends {when} (then recovered per on_unknown: {plan}){waits}"


@dataclass(frozen=True)
class CellUsage:
    """A Google spreadsheet's cells used (over every worksheet's grid), the limit, and when
    the limit is reached at the current rate (``None``: no tasks in the window)."""

    used: int
    limit: int
    full_at: datetime | None
    warn_at: float = 0.8  # ``status`` warns from this share of the limit

    @property
    def percent(self) -> float:
        return round(100.0 * self.used / self.limit, 1)

    @property
    def warn(self) -> bool:
        return self.used >= self.warn_at * self.limit


@dataclass
class ConnectorView:
    """One connector as ``sheetq connector list`` and ``status`` show it (docs/design.md
    §13): its state as it holds now (``closed``, ``open``, ``half-open``, ``paused``) and
    ``until`` when (``None``: until a person resumes it, or not applicable), why, the
    transient-failure streak, tasks running under a live lease and tasks due now, its
    types and limits, the last error it saw and when it last changed."""

    name: str
    state: str
    until: datetime | None = None
    reason: str = ""
    failures: int = 0
    running: int = 0
    waiting: int = 0
    types: tuple[str, ...] = ()
    rate_limit: str = ""
    concurrency: int | None = None
    last_error: str = ""
    updated_at: datetime | None = None

    @property
    def saturated(self) -> bool:
        """Every slot taken (tasks wait for one)."""
        return self.concurrency is not None and self.running >= self.concurrency

    @property
    def notable(self) -> bool:
        """Worth a line in ``status``: open, half-open, paused or saturated."""
        return self.state != "closed" or self.saturated

    def as_json(self) -> dict[str, Any]:
        """The ``connector list --json`` entry (times as UTC ISO text or ``null``)."""
        from sheetq.times import format_ts

        return {
            "name": self.name,
            "state": self.state,
            "until": format_ts(self.until) if self.until else None,
            "reason": self.reason,
            "failures": self.failures,
            "running": self.running,
            "waiting": self.waiting,
            "saturated": self.saturated,
            "types": list(self.types),
            "rate_limit": self.rate_limit or None,
            "concurrency": self.concurrency,
            "last_error": self.last_error,
            "updated_at": format_ts(self.updated_at) if self.updated_at else None,
        }


@dataclass
class StatusReport:
    """What ``sheetq status`` prints, as of ``now``: where the queue is (``title``; its
    ``time_zone`` for times a person reads), the tally, the tasks held by runs that are
    gone, and (Google) how full the spreadsheet is."""

    title: str
    time_zone: str
    tally: QueueTally
    gone: list[HeldGroup]
    now: datetime
    cells: CellUsage | None = None
    connectors: list[ConnectorView] = field(default_factory=list)  # the notable ones
    notes: list[str] = field(default_factory=list)  # what a person typed that sheetq ignores


@dataclass
class ShowReport:
    """What ``sheetq show`` prints: the task's rows as (worksheet, row) (Queue first, then
    QueueArchive) and its history, oldest first: the first ``log_archived`` rows from
    QueueLogArchive (moved there by ``archive --log-older-than``), the rest from QueueLog;
    ``held``: what holds the task when the run processing it is gone ("" otherwise)."""

    found: list[tuple[str, Row]]
    history: list[Row]
    log_archived: int = 0
    held: str = ""


# --- the changes ------------------------------------------------------------------------------


@dataclass
class TaskState:
    """A task as ``requeue``/``skip`` report it: its identity, status (``None``: text sheetq
    does not know, kept in ``status_text``), attempts, error class and the lease that holds
    it (``held``: why it may not be taken now, when its run is gone: e.g. "its worker's
    session is gone; recovered at T")."""

    task_id: str
    type: str
    status: Status | None
    status_text: str
    retry_count: int
    error_class: str
    lease_owner: str = ""
    lease_until: str = ""
    held: str = ""


@dataclass
class ChangeReport:
    """What ``requeue``/``skip`` did (or, dry run, would do): the tasks changed, the named
    task ids not in the queue, the named ones left alone, and every named task by id (to
    say why a named one was refused)."""

    picked: list[TaskState]
    unknown: list[str]
    refused: list[str]
    by_id: dict[str, TaskState]


@dataclass
class ArchiveReport:
    """What an archive of finished tasks moved (or would move) and what it left alone."""

    dry_run: bool
    cutoff: datetime
    by_status: Counter[str] = field(default_factory=Counter)
    task_ids: list[str] = field(default_factory=list)
    dropped_columns: set[str] = field(default_factory=set)
    already_archived: list[str] = field(default_factory=list)
    ambiguous: list[str] = field(default_factory=list)
    undated: list[str] = field(default_factory=list)
    unalerted: list[str] = field(default_factory=list)  # moved failed, alert never sent
    vanished: list[str] = field(default_factory=list)
    put_back: list[str] = field(default_factory=list)
    writes: int = 0
    locked: str = ""

    @property
    def archived(self) -> int:
        return sum(self.by_status.values())


@dataclass
class LogArchiveReport:
    """Log rows moved (or, with ``dry_run``, that would move), writes, stray rows (newer
    rows a person's sort put under the move, carried along) and how many of those were put
    back at the end of the log."""

    cutoff: datetime
    dry_run: bool
    archived: int = 0
    writes: int = 0
    stray: int = 0
    put_back: int = 0


@dataclass
class ArchiveOutcome:
    """What ``sheetq archive`` did: the tasks' report (``None`` when a ``process`` run on
    this host held the queue past the wait: ``held_by`` names its lock file), and the log's
    report when ``--log-older-than`` was given."""

    report: ArchiveReport | None
    logs: list[LogArchiveReport] = field(default_factory=list)
    held_by: str | None = None


@dataclass
class AlertOutcome:
    """What ``sheetq alert`` did: failures owed (``None``: not looked, another sender holds
    the queue: ``locked`` says who), the delivery (``None``: nothing was sent), the ids it
    covered, whether their ``alerted_at`` was written (``mark_error`` says why not), and
    the store's requests. ``connector_sent``/``connector_unsent``: the connectors' owed
    alerts (docs/design.md §13) sent, and those Telegram did not take (still owed)."""

    owed: int | None
    delivery: Delivery | None = None
    report: AlertReport | None = None
    marked: bool = False
    mark_error: str = ""
    locked: str = ""
    requests: int = 0
    connector_sent: int = 0
    connector_unsent: int = 0


# --- the worker -----------------------------------------------------------------------------


class PassReport(Protocol):
    """What one pass of the spreadsheet mirror tells the worker that ran it."""

    warnings: list[str]

    def line(self) -> str: ...


# One mirror pass on a clock (``sheetq.mirror_run.mirror_pass`` bound to a configuration):
# the commands hand it to the worker, so a backend never imports the mirror above it.
MirrorPass = Callable[["Clock"], PassReport]


class Worker(Protocol):
    """A long-running ``sheetq worker`` (PostgreSQL): ``run`` claims and runs tasks until
    ``stop(why)`` (safe from a signal handler); ``stopped`` is the why; ``abandon()`` before
    exiting at once."""

    stopped: str

    def run(self, *, on_ready: Callable[[], None] | None = None) -> RunSummary: ...

    def stop(self, why: str = "stopped") -> None: ...

    def abandon(self) -> str:
        """Exiting at once (a second signal): end the running handlers and say in one line
        which tasks stay ``processing`` and when they recover (``""``: none ran)."""
        ...


# --- the port ---------------------------------------------------------------------------------


@runtime_checkable
class QueuePort(Protocol):
    """One queue, shaped like what a queue does, not where it is stored. Every method opens
    the store on first use; ``close()`` lets it go."""

    settings: Settings
    positions: bool  # rows have sheet positions (``row`` in reports; ``null`` on PostgreSQL)

    @property
    def where(self) -> str:
        """Where the queue is, in words for a message, without I/O and never a password
        (``local workbook sheetq.db``, ``user@host:5432/db``)."""
        ...

    def init(self, *, fmt: bool, dashboard: bool, clock: Clock, say: Say) -> None:
        """Create or upgrade the queue's storage; each line of what was done goes to ``say``."""
        ...

    def enqueue(
        self, tasks: Sequence[NewTask], *, clock: Clock, not_before: NotBefore
    ) -> list[Enqueued]:
        """Add the tasks once, atomically: enqueued / duplicate / conflict per task.
        ``not_before(time_zone)`` gives their not-before time (``--delay``/``--at``; an
        ``--at`` without offset is in the store's zone)."""
        ...

    def run(
        self,
        options: RunOptions,
        *,
        clock: Clock,
        rng: random.Random,
        notifier: Notifier | None,
        on_progress: Callable[[str], None] | None,
    ) -> RunSummary:
        """One ``sheetq process`` run: claim due tasks under a lease, run their handlers,
        settle each outcome fenced by its lease, recover expired leases, send owed alerts."""
        ...

    def worker(
        self,
        *,
        concurrency: int,
        types: tuple[str, ...],
        poll: float,
        clock: Clock,
        rng: random.Random,
        notifier: Notifier | None,
        mirror: MirrorPass | None = None,
    ) -> Worker:
        """A ``sheetq worker`` for this queue; ``UsageError`` where there is none (a sheet).
        ``mirror``: a pass of the spreadsheet mirror, run every ``[mirror] interval``."""
        ...

    def requeue(
        self,
        *,
        task_ids: Sequence[str],
        statuses: Sequence[Status],
        types: Sequence[str],
        error_classes: Sequence[str],
        reset_attempts: bool,
        dry_run: bool,
        clock: Clock,
        priority: int | None = None,
    ) -> ChangeReport:
        """Send matching tasks back to pending (the dead-letter redrive), each logged
        ``requeued``, with ``priority`` when given (docs/design.md §14); a task a run holds
        is never taken from it."""
        ...

    def skip(
        self, *, task_ids: Sequence[str], reason: str, dry_run: bool, clock: Clock
    ) -> ChangeReport:
        """Mark the named waiting or failed tasks skipped, each logged with ``reason``."""
        ...

    def archive(
        self,
        *,
        clock: Clock,
        older_than: float | None,
        log_older_than: float | None,
        include_failed: bool,
        dry_run: bool,
        lock_wait: float,
        on_wait: Callable[[str], None] | None = None,
    ) -> ArchiveOutcome:
        """Move finished tasks older than ``older_than`` seconds (and log rows older than
        ``log_older_than``) to the archive; waits up to ``lock_wait`` seconds for a run that
        holds the queue where runs exclude archiving, first telling ``on_wait`` what it waits
        for (one line). The cutoffs and the log rows' time are ``clock``'s once the queue is
        free (after any wait)."""
        ...

    def send_alerts(
        self, send: Send, *, clock: Clock, text: Callable[[str], bool] | None = None
    ) -> AlertOutcome:
        """``sheetq alert``: send the owed failure alerts as one message (``send``) and mark
        the tasks it covered, one sender at a time per queue; with ``text`` (one plain
        message: whether Telegram took it), the connectors' owed alerts too."""
        ...

    def status(self, *, clock: Clock) -> StatusReport:
        """Counts, ages and gone runs for ``sheetq status``."""
        ...

    def stats(self, *, since: datetime, now: datetime, types: Sequence[str]) -> Stats:
        """The log's numbers over ``[since, now]`` for ``sheetq stats``."""
        ...

    def list_rows(self, *, statuses: set[Status], types: Sequence[str], limit: int) -> list[Row]:
        """Tasks with these statuses and types (empty: any), in queue order; at most
        ``limit`` (0: all)."""
        ...

    def show(self, task_id: str) -> ShowReport:
        """One task's rows and history."""
        ...

    def export(self, *, clock: Clock) -> Source:
        """The whole queue, checked and converted for ``sheetq migrate``; refuses
        (``UsageError``) while a run holds it."""
        ...

    def absorb(self, source: Source, *, now: datetime, run_id: str) -> Written:
        """``sheetq migrate``'s destination: copy ``source`` in, once (a rerun adds nothing)."""
        ...

    def connectors(self, *, clock: Clock) -> list[ConnectorView]:
        """Every configured connector's state (docs/design.md §13), by name."""
        ...

    def connector_pause(
        self, name: str, *, seconds: float | None, reason: str, clock: Clock
    ) -> ConnectorView:
        """A person's pause of connector ``name`` for ``seconds`` (``None``: until resumed),
        logged ``paused``; ``UsageError`` for a connector the configuration does not name."""
        ...

    def connector_resume(self, name: str, *, reason: str, clock: Clock) -> ConnectorView:
        """A person's resume of connector ``name``: ``closed``, logged ``resumed``."""
        ...

    def checks(self) -> list[Check]:
        """``sheetq doctor``'s lines for this store: reachable, prepared, writable."""
        ...

    def close(self) -> None:
        """Let the store go (connections, files)."""
        ...
