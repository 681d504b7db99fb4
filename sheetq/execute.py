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
from sheetq.config import Settings, TypeConfig
from sheetq.handlers import groups, run_reconcile, run_task
from sheetq.idempotency import parse_payload
from sheetq.model import ErrorClass, Event, Status, Task
from sheetq.policy import result_cut
from sheetq.port import AlertItem, Claimed
from sheetq.redact import own_secrets, redact
from sheetq.retry import Decision, Outcome, decide
from sheetq.summary import RunSummary
from sheetq.times import format_ts

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
        self._last_start: dict[str, float] = {}  # type → monotonic time of its last start slot
        self._lock = threading.Lock()

    def cannot_start(
        self, row: Claimed, config: TypeConfig, lease_until: datetime, out_of_time: bool
    ) -> str:
        """Why the claimed task in ``row`` may not start now, or ``""`` if it may: its type's
        circuit is open, the claim's lease (``lease_until``) would run out before the type's
        timeout, or ``out_of_time`` (``--max-runtime`` reached)."""
        with self._lock:
            why = self.open_circuits.get(row.type)
        if why is not None:
            return f"circuit open for type {row.type!r}: {why}"
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
        """Wait until the type's next start slot (``rate_limit``: starts spaced by its
        interval, in seconds on ``clock``). Each caller reserves its slot under the lock and
        sleeps outside it, so threads start one interval apart."""
        if config.rate_limit is None:
            return
        name = config.name
        with self._lock:
            now = self.clock.monotonic()
            last = self._last_start.get(name)
            start = now if last is None else max(now, last + config.rate_limit.interval)
            self._last_start[name] = start
        if start > now:
            self.clock.sleep(start - now)
        with self._lock:
            if self._last_start.get(name) == start:  # no later slot reserved meanwhile
                self._last_start[name] = max(start, self.clock.monotonic())

    def execute(
        self, row: Claimed, payload_json: str, config: TypeConfig, *, reconcile: bool
    ) -> Executed:
        """Run the handler of the task claimed in ``row`` (``reconcile``: ask the type's
        reconcile handler whether a lost attempt happened instead) and decide its outcome.

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
                    outcome = run_task(config, task, payload_json)
                    if outcome.status is None:
                        outcome = self._on_unknown(config, task, payload_json, outcome)
        duration_ms = int((self.clock.monotonic() - started) * 1000)
        decision = self._decide(outcome, row, config, task.payload if task else None)
        then = decision.status.value  # the handler's time, then what follows from it
        if decision.status is Status.RETRY and decision.next_retry_at is not None:
            then = f"retry at {format_ts(decision.next_retry_at)}"
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
        if status is Status.DONE:
            self.summary.done += 1
            self._streak[name] = 0
        elif status is Status.SKIPPED:
            self.summary.skipped += 1
            self._streak[name] = 0
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
        if decision.open_circuit:
            why = (
                "credentials refused (auth): a person must fix them"
                if decision.error_class is ErrorClass.AUTH
                else "handler misconfigured (config)"
            )
            self.open_circuits.setdefault(name, why)
        elif decision.counts_for_breaker:
            self._streak[name] += 1
            if self._streak[name] >= config.policy.breaker_threshold:
                self.open_circuits.setdefault(
                    name, f"{self._streak[name]} consecutive transient failures"
                )
        elif status in (Status.RETRY, Status.FAILED):
            self._streak[name] = 0
