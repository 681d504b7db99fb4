"""Running one claimed task and deciding its outcome (docs/design.md §5, §7), whatever the store.

The sheet runner (``sheetq.sheet.runner``) claims a batch, then hands each task here; the
PostgreSQL worker (docs/design.md §11) does the same with up to N handlers at once, in threads.
What is here is backend-neutral: the rate limit wait, the ``Task`` built from the claimed
row and its ``payload_json``, the handler (``run_task``), ``on_unknown`` and reconcile, the
retry decision and redaction, the duration, the run's counts, the circuit breaker's
streaks and this run's failures for the alert digest. Writing the outcome is the caller's.

It never imports gspread, sqlite3, psycopg or telegram.
"""

from __future__ import annotations

import logging
import random
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sheetq.clock import Clock
from sheetq.config import ConnectorConfig, Settings, TypeConfig
from sheetq.connectors import (
    Breaker,
    Change,
    Limits,
    State,
    after,
    effective,
    kind_of,
    resume,
    take,
)
from sheetq.handlers import groups, run_reconcile, run_task
from sheetq.handlers.python import Watch, timed_out
from sheetq.idempotency import parse_payload
from sheetq.model import ErrorClass, Event, Status, Task
from sheetq.policy import result_cut
from sheetq.port import AlertItem, Claimed
from sheetq.redact import own_secrets, redact
from sheetq.retry import Decision, Outcome, decide
from sheetq.summary import RunSummary
from sheetq.times import format_not_before, format_ts

# The per-task lines keep the logger they always had, so filters on it keep working.
log = logging.getLogger("sheetq.runner")


@dataclass(frozen=True)
class Executed:
    """One task's handler run: the decision to write, how long it took (milliseconds, on the
    injected clock's monotonic time), and ``Event.RECOVERED`` after a reconcile, else
    ``None`` (the log row's event; ``sheetq.sheet.plan.complete`` takes both)."""

    decision: Decision
    duration_ms: int
    event: Event | None  # Event.RECOVERED after a reconcile, else None


class Executor:
    """Runs one claimed task's handler and decides its outcome (docs/design.md §5, §7); shared by
    the sheet runner and the PostgreSQL worker. Thread-safe: several handlers may run at once.

    ``summary`` receives the counts (done, retry, failed, skipped, recovered); ``note`` is
    called (under the executor's lock, so it need not be thread-safe) with run notes such as
    "results over 1,000 characters are cut"; ``on_progress`` with one line per task started.
    """

    def __init__(
        self,
        settings: Settings,
        *,
        clock: Clock,
        rng: random.Random,
        summary: RunSummary,
        note: Callable[[str], None],
        on_progress: Callable[[str], None] = lambda _m: None,
    ) -> None:
        self.settings = settings
        self.clock = clock
        self.rng = rng
        # masked in every result and error: the bot token (the database password never
        # reaches a handler, and is masked only where a URL or conninfo carries it)
        self._secrets = own_secrets(settings.telegram.token)
        self.summary = summary
        self.run_id = summary.run_id
        self._groups = groups.directory_for(settings.lock_dir)
        self.note = note
        self.on_progress = on_progress
        self.open_circuits: dict[str, str] = {}  # type → why its circuit is open
        self.failures: dict[str, AlertItem] = {}  # this run's failed tasks, for the alert digest
        self._streak: Counter[str] = Counter()  # consecutive transient failures per type
        self._last_start: dict[str, float] = {}  # connector → monotonic time of its last start
        self._lock = threading.Lock()
        # connectors whose state outlives the run (a sheet's Connectors worksheet: seeded by
        # the runner, written back by it); the transitions this run made, in order
        self.shared: dict[str, Breaker] = {}
        self.changes: list[tuple[str, Change]] = []
        # False in a long-lived worker on PostgreSQL: the database's breaker (shared, with
        # its cooldown and probe) decides; a circuit opened here would last the worker's life
        self.local_breaker = True

    def seed(self, breaker: Breaker, name: str) -> None:
        """Take connector ``name``'s persisted state (its breaker, streak and next start)
        as this run's starting point (docs/design.md §13)."""
        connector = (
            self.settings.connector_of(name)
            if name not in self.settings.connectors
            else self.settings.connectors[name]
        )
        now = self.clock.now()
        with self._lock:
            if breaker.state is State.PAUSED and breaker.until is not None and breaker.until <= now:
                breaker, ended = resume(breaker, "the pause ended")
                self.changes.append((name, ended))
            self.shared[name] = breaker
            self._streak[name] = breaker.failures
            interval = connector.interval
            if interval is not None and breaker.next_at is not None:
                ahead = (breaker.next_at - now).total_seconds()
                if ahead > 0:
                    self._last_start[name] = self.clock.monotonic() + ahead - interval

    def blocked(self) -> dict[str, str]:
        """Types not to claim now: their circuit opened in this run, or their persisted
        connector is open or paused (``seed``), each with why."""
        now = self.clock.now()
        with self._lock:
            found = dict(self.open_circuits)
            for name, breaker in self.shared.items():
                state = effective(breaker, now)
                if state in (State.OPEN, State.PAUSED):
                    connector = self.settings.connectors.get(name)
                    for each in connector.types if connector else (name,):
                        found.setdefault(each, f"connector {name!r} is {state}")
        return found

    def _limits(self, connector: ConnectorConfig) -> Limits:
        return Limits(
            interval=connector.interval,
            concurrency=connector.concurrency,
            threshold=connector.breaker_threshold,
            cooldown=connector.breaker_cooldown,
        )

    def starting(self, row: Claimed, lease_until: datetime) -> None:
        """A task of a persisted connector starts now: its next start one interval later,
        and, when the connector is half-open, it is the one probe."""
        connector = self.settings.connector_of(row.type)
        with self._lock:
            found = self.shared.get(connector.name)
            if found is not None:
                self.shared[connector.name] = take(
                    found, self.clock.now(), self._limits(connector), [row.task_id], lease_until
                )

    def cannot_start(
        self, row: Claimed, config: TypeConfig, lease_until: datetime, out_of_time: bool
    ) -> str:
        """Why the claimed task in ``row`` may not start now, or ``""`` if it may: its type's
        circuit is open, the claim's lease (``lease_until``) would run out before the type's
        timeout, or ``out_of_time`` (``--max-runtime`` reached)."""
        with self._lock:
            why = self.open_circuits.get(row.type)
            connector = self.settings.connector_of(row.type)
            shared = self.shared.get(connector.name)
        if why is not None:
            return f"circuit open for type {row.type!r}: {why}"
        if shared is not None:
            state = effective(shared, self.clock.now())
            if state in (State.OPEN, State.PAUSED):
                until = f" until {format_ts(shared.until)}" if shared.until else ""
                return f"connector {connector.name!r} is {state}{until}"
            if state is State.HALF_OPEN and shared.probe:
                return f"connector {connector.name!r} is half-open: one probe at a time"
        if self.clock.now() > lease_until - timedelta(seconds=config.policy.timeout):
            return "the batch's lease would run out before this task's timeout"
        if out_of_time:
            return "--max-runtime reached"
        return ""

    def end_orphans(self) -> None:
        """End the process groups that runs killed on this host left running (each noted),
        so that no child of a lost attempt still works when its task runs again. Called
        before a run recovers or returns tasks (``sheetq.handlers.groups.end_orphans``)."""
        for line in groups.end_orphans(self._groups):
            with self._lock:
                self.note(line)

    def wait_rate_limit(self, config: TypeConfig) -> None:
        """Wait until the type's connector's next start slot (``rate_limit``: starts spaced
        by its interval, in seconds on ``clock``; a type without a connector is its own).
        Each caller reserves its slot under the lock and sleeps outside it, so threads start
        one interval apart."""
        connector = self.settings.connector_of(config.name)
        interval = connector.interval
        if interval is None:
            return
        name = connector.name
        with self._lock:
            now = self.clock.monotonic()
            last = self._last_start.get(name)
            start = now if last is None else max(now, last + interval)
            self._last_start[name] = start
        if start > now:
            self.clock.sleep(start - now)
        with self._lock:
            if self._last_start.get(name) == start:  # no later slot reserved meanwhile
                self._last_start[name] = max(start, self.clock.monotonic())

    def execute(
        self,
        row: Claimed,
        payload_json: str,
        config: TypeConfig,
        *,
        reconcile: bool,
        watch: Watch | None = None,
    ) -> Executed:
        """Run the handler of the task claimed in ``row`` (``reconcile``: ask the type's
        reconcile handler whether a lost attempt happened instead) and decide its outcome.
        ``watch``: a Python handler runs on this thread, its timeout enforced by the watch's
        owner, who then finishes the task with ``timed_out`` on another thread (this one
        raises ``sheetq.handlers.python.Abandoned`` when the handler returns late).

        Never raises for handler errors; an unreadable ``payload_json`` fails the task.
        Counts the outcome into the summary, updates the breaker and ``failures``.
        """
        from sheetq.errors import InputError

        started = self.clock.monotonic()
        event: Event | None = None
        try:
            task: Task | None = self._task(row, payload_json)
        except InputError as exc:
            outcome = Outcome.failed(f"{exc.message}; fix the cell and requeue")
            task, payload_json = None, ""
        if task is not None:
            self.on_progress(f"{task.task_id} {task.type} attempt {task.attempt}")
            # a command handler's process group is recorded on this host while it runs
            with groups.recording(
                self._groups, task_id=task.task_id, attempt=task.attempt, run_id=self.run_id
            ):
                if reconcile:
                    outcome = self._reconcile(config, task, payload_json)
                    event = Event.RECOVERED
                else:
                    outcome = run_task(config, task, payload_json, watch=watch)
                    if outcome.status is None:
                        outcome = self._on_unknown(config, task, payload_json, outcome)
        return self._finish(row, config, task, outcome, event, started)

    def timed_out(
        self, row: Claimed, payload_json: str, config: TypeConfig, *, started: float
    ) -> Executed:
        """What ``execute`` (with a ``watch``) would have decided when its Python handler,
        started at ``started`` (monotonic), was abandoned at its timeout: the timeout
        outcome, then ``on_unknown``. Runs on the thread that replaces the abandoned one."""
        task = self._task(row, payload_json)  # parsed once already: it parses again
        with groups.recording(
            self._groups, task_id=task.task_id, attempt=task.attempt, run_id=self.run_id
        ):
            outcome = self._on_unknown(config, task, payload_json, timed_out(config.policy.timeout))
        return self._finish(row, config, task, outcome, None, started)

    def _finish(
        self,
        row: Claimed,
        config: TypeConfig,
        task: Task | None,
        outcome: Outcome,
        event: Event | None,
        started: float,
    ) -> Executed:
        """Decide, log and count ``outcome`` of the handler started at ``started``."""
        duration_ms = int((self.clock.monotonic() - started) * 1000)
        decision = self._decide(outcome, row, config, task.payload if task else None)
        then = decision.status.value  # the handler's time, then what follows from it
        if decision.status is Status.RETRY and decision.next_retry_at is not None:
            then = f"retry at {format_not_before(decision.next_retry_at)}"
        log.info("%s %s: handler ran %.2fs, %s", row.task_id, row.type, duration_ms / 1000, then)
        with self._lock:
            if result_cut(decision.result):  # said once per type and run; each cut is in QueueLog
                self.note(f"{row.type}: results over 1,000 characters are cut (ending in …)")
            if event is Event.RECOVERED:
                self.summary.recovered += 1
            self._count(decision, row, config)
        return Executed(decision, duration_ms, event)

    # --- one task ------------------------------------------------------------------

    def _task(self, row: Claimed, payload_json: str) -> Task:
        payload = parse_payload(payload_json, where=f"payload_json of {row.task_id}")
        return Task(
            task_id=row.task_id,
            type=row.type,
            payload=payload,
            idempotency_key=row.idempotency_key,
            attempt=row.retry_count + 1,
            created_at=row.created,
        )

    def _on_unknown(
        self, config: TypeConfig, task: Task, payload_json: str, outcome: Outcome
    ) -> Outcome:
        """A timeout after the action may have happened: ``on_unknown`` decides at once."""
        if config.on_unknown == "retry":
            return outcome
        if config.on_unknown == "reconcile":
            checked = self._reconcile(config, task, payload_json, first=outcome.message)
            return checked
        return Outcome.failed(
            f"{outcome.message}; outcome unknown, a person must check", ErrorClass.UNKNOWN
        )

    def _reconcile(
        self,
        config: TypeConfig,
        task: Task,
        payload_json: str,
        first: str = "lease expired while processing",
    ) -> Outcome:
        answer = run_reconcile(config, task, payload_json)
        if answer.found is True:
            return Outcome.done(answer.result)
        if answer.found is False:
            return Outcome.retry(f"{first}; reconcile: not found, retrying", ErrorClass.UNKNOWN)
        return Outcome.failed(f"{first}; {answer.message}", ErrorClass.UNKNOWN)

    def _decide(
        self, outcome: Outcome, row: Claimed, config: TypeConfig, payload: dict[str, Any] | None
    ) -> Decision:
        with self._lock:  # the jitter draws from the shared rng
            decision = decide(outcome, row.retry_count, config.policy, self.clock.now(), self.rng)
        secrets = self._secrets
        message = redact(
            decision.message, payload=payload, fields=config.redact_fields, secrets=secrets
        )
        result = redact(
            decision.result, payload=payload, fields=config.redact_fields, secrets=secrets
        )
        if message != decision.message or result != decision.result:
            from dataclasses import replace

            decision = replace(decision, message=message, result=result)
        return decision

    def _count(self, decision: Decision, row: Claimed, config: TypeConfig) -> None:
        """Count ``decision`` into the summary, the breaker and ``failures`` (lock held)."""
        status = decision.status
        name = row.type
        # the breaker's streak is the connector's (docs/design.md §13): a type without one
        # is its own; an auth or config failure stops the type, a streak every type on it
        connector = self.settings.connector_of(name)
        key = connector.name
        if status is Status.DONE:
            self.summary.done += 1
            self._streak[key] = 0
        elif status is Status.SKIPPED:
            self.summary.skipped += 1
            self._streak[key] = 0
        elif status is Status.RETRY:
            self.summary.retry += 1
        else:
            self.summary.failed += 1
            self.failures[row.task_id] = AlertItem(
                task_id=row.task_id,
                type=name,
                error_class=str(decision.error_class or ""),
                attempts=decision.retry_count,
                error=decision.message,
                row=row.row,
                owner=row.owner or config.owner,
            )
        if not self.local_breaker and decision.error_class is not ErrorClass.CONFIG:
            pass  # the shared breaker counts it (docs/design.md §13)
        elif decision.open_circuit:
            why = (
                "credentials refused (auth): a person must fix them"
                if decision.error_class is ErrorClass.AUTH
                else "handler misconfigured (config)"
            )
            self.open_circuits.setdefault(name, why)
        elif decision.counts_for_breaker:
            self._streak[key] += 1
            if self._streak[key] >= connector.breaker_threshold:
                why = f"{self._streak[key]} consecutive transient failures"
                if key != name:
                    why += f" on connector {key!r}"
                for each in connector.types or (name,):
                    self.open_circuits.setdefault(each, why)
        elif status in (Status.RETRY, Status.FAILED):
            self._streak[key] = 0
        shared = self.shared.get(key)
        if shared is not None:
            shared, change = after(
                shared,
                self.clock.now(),
                self._limits(connector),
                row.task_id,
                kind_of(decision),
                decision.message,
            )
            self.shared[key] = shared
            if change is not None:
                self.changes.append((key, change))
            if shared.state is State.OPEN:
                for each in connector.types or (name,):
                    self.open_circuits.setdefault(each, shared.reason or "connector open")
