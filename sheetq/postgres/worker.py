"""``sheetq worker`` (DESIGN.md §11): a long-running process over a PostgreSQL queue.

Up to ``concurrency`` handlers run at once, each in its own thread with its own database
connection (psycopg connections are not for concurrent use). The main thread claims only
as many tasks as there are free handler slots (``sheetq.postgres.queue.claim``), so every
claimed task starts at once and a kill leaves only started tasks outcome-unknown. It
sleeps until a slot frees, a ``NOTIFY sheetq`` for this queue arrives (a separate
autocommit connection listens; the schema's trigger notifies when a task becomes
pending/retry), or ``poll`` seconds pass (due retries, expired leases), so an enqueued task
starts within a second.

``stop()`` (SIGTERM, SIGINT) stops claiming; running handlers finish within their timeout
and settle; a task still waiting for its rate-limit slot is released; ``run`` returns.
"""

from __future__ import annotations

import contextlib
import logging
import random
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from typing import TYPE_CHECKING, Any

from sheetq.clock import Clock, SystemClock
from sheetq.config import Settings
from sheetq.model import new_run_id
from sheetq.postgres.runner import PgTasks
from sheetq.postgres.store import PgStore
from sheetq.queue import Claim
from sheetq.summary import RunOptions, RunSummary

if TYPE_CHECKING:
    from sheetq.alerts.owed import Notifier

log = logging.getLogger("sheetq.worker")

POLL = 1.0  # seconds between claims when nothing wakes the worker (due retries, leases)
ALERT_EVERY = 10.0  # seconds between owed-alert digests, at most


class _StoppableClock:
    """The injected clock, whose real waits (a rate-limit slot) end early when the worker
    stops, so a task waiting to start is released at once on SIGTERM. A fake clock (tests)
    keeps its own instant sleep."""

    def __init__(self, clock: Clock, stop: threading.Event) -> None:
        self._clock = clock
        self._stop = stop

    def now(self) -> datetime:
        return self._clock.now()

    def monotonic(self) -> float:
        return self._clock.monotonic()

    def sleep(self, seconds: float) -> None:
        if isinstance(self._clock, SystemClock):
            self._stop.wait(max(0.0, seconds))
        else:
            self._clock.sleep(seconds)


class PgWorker:
    """``sheetq worker``: claims and runs tasks until ``stop()``. Time is injected."""

    def __init__(
        self,
        settings: Settings,
        *,
        clock: Clock,
        rng: random.Random | None = None,
        notifier: Notifier | None = None,
        concurrency: int = 1,
        types: tuple[str, ...] = (),
        poll: float = POLL,
        run_id: str | None = None,
    ) -> None:
        self._stop = threading.Event()
        self.settings = settings
        self.clock: Clock = _StoppableClock(clock, self._stop)
        self.concurrency = max(1, concurrency)
        self.options = RunOptions(batch_size=self.concurrency, max_batches=None, types=types)
        self.poll = poll
        self.tasks = PgTasks(
            settings,
            clock=self.clock,
            rng=rng,
            notifier=notifier,
            run_id=run_id or new_run_id("worker"),
        )
        self.summary: RunSummary = self.tasks.summary
        self.stopped = ""  # why the worker stopped (e.g. "SIGTERM")
        self._wake = threading.Event()
        self._lock = threading.Lock()
        self._running = 0
        self._local = threading.local()
        self._stores: list[PgStore] = []

    # --- control -----------------------------------------------------------------------

    def stop(self, why: str = "stopped") -> None:
        """Stop claiming; running handlers finish. Safe to call from a signal handler."""
        if not self._stop.is_set():
            self.stopped = why
            self._stop.set()
        self._wake.set()

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    # --- the loop ------------------------------------------------------------------------

    def run(self, *, on_ready: Callable[[], None] | None = None) -> RunSummary:
        """Run until ``stop()``; returns the summary. ``on_ready`` is called once listening."""
        started = self.clock.monotonic()
        store = self._new_store()
        info = store.open()
        listener = threading.Thread(target=self._listen, name="sheetq-listen", daemon=True)
        listener.start()
        pool = ThreadPoolExecutor(self.concurrency, thread_name_prefix="sheetq-handler")
        next_alert = 0.0
        failures_seen = -1
        log.info(
            "worker %s: up to %d handler(s) on queue %r",
            self.tasks.run_id,
            self.concurrency,
            self.settings.queue_sheet,
        )
        if on_ready is not None:
            on_ready()
        try:
            while not self.stopping:
                self._wake.clear()
                more = self._claim(store, pool)
                failures = self.summary.failed
                if failures != failures_seen and self.clock.monotonic() >= next_alert:
                    self.tasks.alerts(store, info)
                    failures_seen = failures if not self.summary.alerts_owed else -1
                    next_alert = self.clock.monotonic() + ALERT_EVERY
                if more and not self.stopping:
                    continue  # slots free and tasks may still be due: claim again at once
                self._wake.wait(self.poll)
        finally:
            pool.shutdown(wait=True)  # running handlers finish (each within its timeout)
            self._wake.set()
        self.tasks.alerts(store, info)
        self.summary.seconds = self.clock.monotonic() - started
        self.summary.open_circuits = dict(self.tasks.executor.open_circuits)
        self.summary.requests = sum(s.requests_made for s in self._stores)
        self._close()
        return self.summary

    def _claim(self, store: PgStore, pool: ThreadPoolExecutor) -> bool:
        """Claim up to the free slots and hand the claims to handler threads. Returns whether
        to claim again at once."""
        with self._lock:
            free = self.concurrency - self._running
        if free <= 0:
            return False
        plan = self.tasks.claim(store, free, self.options)
        if plan.claims:
            self.summary.batches += 1
            assert plan.lease_until is not None
            with self._lock:
                self._running += len(plan.claims)
            for claim in plan.claims:
                pool.submit(self._job, claim, plan.lease_until)
        # every free slot filled: more may be due; only recoveries or expiries: tasks may be
        # due behind them. Otherwise nothing is due until a wake-up or the next poll.
        more = len(plan.claims) == free or (plan.has_work and not plan.claims)
        return more

    def _job(self, claim: Claim, lease_until: datetime) -> None:
        try:
            self.tasks.start(
                self._thread_store(), claim, lease_until, stopping=lambda: self.stopping
            )
        except Exception as exc:  # the task keeps its lease; the next claimer recovers it
            log.error("%s: %s: %s", claim.row.task_id, type(exc).__name__, exc)
            self.tasks.note(
                f"{claim.row.task_id}: outcome not written ({type(exc).__name__}); "
                "recovered when its lease ends"
            )
        finally:
            with self._lock:
                self._running -= 1
            self._wake.set()

    # --- connections -------------------------------------------------------------------------

    def _new_store(self) -> PgStore:
        store = PgStore(self.settings)
        with self._lock:
            self._stores.append(store)
        return store

    def _thread_store(self) -> PgStore:
        store: PgStore | None = getattr(self._local, "store", None)
        if store is None:
            store = self._new_store()
            self._local.store = store
        return store

    def _close(self) -> None:
        with self._lock:
            stores, self._stores = self._stores, []
        for store in stores:
            with contextlib.suppress(Exception):  # closing at exit; nothing left to save
                store.close()

    def _listen(self) -> None:
        """Wake the loop on ``NOTIFY sheetq`` naming this queue. Without a listening
        connection (it failed, or broke) the loop still polls every ``poll`` seconds."""
        from sheetq.postgres.connection import connect

        conn: Any = None
        try:
            conn = connect(self.settings.database_url, autocommit=True)
            conn.execute("LISTEN sheetq")
            while not self.stopping:
                for note in conn.notifies(timeout=0.5):
                    if note.payload == self.settings.queue_sheet:
                        self._wake.set()
        except Exception as exc:  # polling goes on without it
            if not self.stopping:
                log.warning("LISTEN sheetq stopped (%s); polling every %gs", exc, self.poll)
        finally:
            if conn is not None:
                with contextlib.suppress(Exception):  # closing at exit
                    conn.close()
