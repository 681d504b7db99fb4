"""The worker's handler threads (docs/design.md §11): a fixed number of threads taking jobs
from one queue, where a Python handler runs on the job's own thread (no second thread to
cross per call) and a thread whose handler outlives its timeout is left behind and replaced.

Each job is two callables: ``run(watch)`` runs the task, passing ``watch`` to the Python
handler call (``sheetq.handlers.python.Watch``); ``late(started)`` finishes the task when
that call is still running at its timeout. A watchdog thread keeps the calls' deadlines
(real time): at one, it abandons the call's thread and starts a new thread, which runs
``late`` and then serves the queue in its place, so the slot is free again at once. The
abandoned thread, if its handler ever returns, gets ``Abandoned`` from the call and ends:
its result is ignored (Python cannot kill a thread; the handler runs on in the background).
"""

from __future__ import annotations

import itertools
import logging
import queue
import threading
import time
from collections.abc import Callable

from sheetq.handlers.python import Abandoned

log = logging.getLogger("sheetq.worker")

IDLE_WAKE = 1.0  # seconds the watchdog sleeps at most with no call past this horizon
Run = Callable[["CallWatch"], None]
Late = Callable[[float], None]


class CallWatch:
    """One job's ``Watch``: registers the handler call's deadline with its ``Slots``."""

    __slots__ = ("_late", "_slots", "started", "thread")

    def __init__(self, slots: Slots, late: Late) -> None:
        self._slots = slots
        self._late = late
        self.thread = threading.current_thread()  # the serving thread that runs the job
        self.started = 0.0  # the call's start, on the slots' ``started_clock``

    def start(self, timeout: float) -> None:
        """The handler call starts now: abandon this thread after ``timeout`` seconds."""
        self.started = self._slots.started_clock()
        self._slots.watch(self, time.monotonic() + max(0.0, timeout))

    def finish(self) -> bool:
        """The call returned: ``False`` if this thread was abandoned meanwhile."""
        return self._slots.unwatch(self)

    def late(self) -> None:
        """Finish the job as timed out (on the replacing thread)."""
        self._late(self.started)


class Slots:
    """``size`` handler threads serving ``submit``-ted jobs in order (daemon threads: one
    left behind never keeps the process alive). ``started_clock``: the monotonic clock the
    handler durations are measured on (handed to ``late``)."""

    def __init__(self, size: int, *, name: str, started_clock: Callable[[], float]) -> None:
        self.size = max(1, size)
        self.started_clock = started_clock
        self._name = name
        self._numbers = itertools.count(1)
        self._jobs: queue.SimpleQueue[tuple[Run, Late] | None] = queue.SimpleQueue()
        self._cond = threading.Condition()
        self._deadlines: dict[CallWatch, float] = {}
        self._next = 0.0  # when the watchdog wakes next (time.monotonic())
        self._live: set[threading.Thread] = set()  # serving threads, none left behind
        self._closed = False
        self.abandoned = 0  # threads left behind so far
        with self._cond:
            for _ in range(self.size):
                self._spawn(None)
        self._watchdog = threading.Thread(
            target=self._watch_deadlines, name=f"{name}-watchdog", daemon=True
        )
        self._watchdog.start()

    def submit(self, run: Run, late: Late) -> None:
        """Queue a job; the next free thread runs it."""
        self._jobs.put((run, late))

    def shutdown(self) -> None:
        """Wait for the queued and running jobs (a call past its timeout is abandoned and
        finished as timed out meanwhile), then end the threads; those left behind run on."""
        for _ in range(self.size):
            self._jobs.put(None)
        while True:
            with self._cond:
                if not self._live:
                    self._closed = True
                    self._cond.notify()
                    break
                thread = next(iter(self._live))
            thread.join()
        self._watchdog.join()

    # --- deadlines (called by CallWatch) ---------------------------------------------

    def watch(self, call: CallWatch, deadline: float) -> None:
        with self._cond:
            self._deadlines[call] = deadline
            if deadline < self._next:
                self._cond.notify()

    def unwatch(self, call: CallWatch) -> bool:
        with self._cond:
            return self._deadlines.pop(call, None) is not None

    # --- threads -------------------------------------------------------------------------

    def _spawn(self, first: CallWatch | None) -> None:
        """Start a serving thread (``first``: a timed-out job to finish first); lock held."""
        thread = threading.Thread(
            target=self._serve, args=(first,), name=f"{self._name}-{next(self._numbers)}"
        )
        thread.daemon = True
        self._live.add(thread)
        thread.start()

    def _serve(self, first: CallWatch | None) -> None:
        me = threading.current_thread()
        try:
            if first is not None:
                self._guarded(first.late)
            while (job := self._jobs.get()) is not None:
                run, late = job
                call = CallWatch(self, late)
                try:
                    self._guarded(lambda run=run, call=call: run(call))  # type: ignore[misc]
                except Abandoned:
                    return  # left behind at its timeout: its replacement serves on
        finally:
            with self._cond:
                self._live.discard(me)

    @staticmethod
    def _guarded(work: Callable[[], None]) -> None:
        try:
            work()
        except Exception:  # a job's own errors are its to handle; never kill a slot
            log.exception("handler thread: unexpected error")

    def _watch_deadlines(self) -> None:
        with self._cond:
            while not self._closed:
                now = time.monotonic()
                for call in [c for c, at in self._deadlines.items() if at <= now]:
                    del self._deadlines[call]
                    self._live.discard(call.thread)
                    self.abandoned += 1
                    self._spawn(call)
                # with no deadline near, wake anyway at IDLE_WAKE: a call registered meanwhile
                # (with a longer timeout) then needs no notify, so no wake-up per task
                self._next = min(self._deadlines.values(), default=now + IDLE_WAKE)
                self._cond.wait(max(0.0, self._next - now))
