"""Group commit for ``sheetq serve`` (docs/design.md §15): the tasks of concurrent requests
share one check of the keys and one write.

Each request hands its task to ``Committer.submit`` and waits. One loop takes the first
waiting task, then, on Google, every task that arrives within ``window`` seconds of it (the
Sheets API allows about 60 writes a minute: a burst of 200 webhooks is a few writes, not
200), and writes them with one ``QueuePort.enqueue`` on the store's own thread; the local
workbook and PostgreSQL write at once, taking every task that arrived while the previous
write was under way. Each request is answered from its own outcome (enqueued, duplicate,
conflict: ``sheetq.accept.decide_keys`` also sees earlier tasks of the same batch), and only
after the write returned: a task answered ``enqueued`` is durable. A write that fails fails
every request of its batch with the error (the senders retry; their keys make it safe), and
the store is opened afresh for the next.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from sheetq.accept import Enqueued, NewTask
from sheetq.clock import Clock
from sheetq.port import QueuePort

log = logging.getLogger("sheetq.serve")

MAX_BATCH = 500  # tasks per write (a sheet's write is split further under Google's body cap)


@dataclass
class Stats:
    """What the committer did, for ``/metrics``: writes, tasks written per outcome, failed
    writes, and the wall time of the last write (seconds)."""

    writes: int = 0
    failed: int = 0
    batch_sizes: list[int] = field(default_factory=list)
    last_error: str = ""
    last_write_at: float = 0.0


class Committer:
    """Writes submitted tasks in batches through ``open_store()`` (a ``QueuePort``, opened
    per batch when ``reopen``, else kept until a write fails), on one thread of its own (a
    store is used from one thread only)."""

    def __init__(
        self,
        open_store: Callable[[], QueuePort],
        *,
        clock: Clock,
        window: float,
        reopen: bool,
        on_batch: Callable[[int, float, bool], None] | None = None,
    ) -> None:
        self._open = open_store
        self._clock = clock
        self._window = window
        self._reopen = reopen
        self._on_batch = on_batch
        self._store: QueuePort | None = None
        self._pending: asyncio.Queue[tuple[NewTask, asyncio.Future[Enqueued]] | None] = (
            asyncio.Queue()
        )
        self._thread = ThreadPoolExecutor(1, thread_name_prefix="sheetq-write")
        self._loop_task: asyncio.Task[None] | None = None
        self.stats = Stats()

    def start(self) -> None:
        self._loop_task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        """Write what is waiting, then stop and let the store go."""
        if self._loop_task is not None:
            await self._pending.put(None)
            await self._loop_task
            self._loop_task = None
        await asyncio.get_running_loop().run_in_executor(self._thread, self._close)
        self._thread.shutdown(wait=True)

    async def submit(self, task: NewTask) -> Enqueued:
        """The task's outcome once its batch is written; raises what the write raised."""
        future: asyncio.Future[Enqueued] = asyncio.get_running_loop().create_future()
        await self._pending.put((task, future))
        return await future

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        stopping = False
        while not stopping:
            first = await self._pending.get()
            if first is None:
                break
            batch = [first]
            deadline = loop.time() + self._window
            while len(batch) < MAX_BATCH and self._window > 0:
                left = deadline - loop.time()
                if left <= 0:
                    break
                try:
                    item = await asyncio.wait_for(self._pending.get(), left)
                except TimeoutError:
                    break
                if item is None:
                    stopping = True
                    break
                batch.append(item)
            while len(batch) < MAX_BATCH and not self._pending.empty():
                item = self._pending.get_nowait()
                if item is None:
                    stopping = True
                    break
                batch.append(item)
            await self._commit(batch)

    async def _commit(self, batch: list[tuple[NewTask, asyncio.Future[Enqueued]]]) -> None:
        began = time.monotonic()
        tasks = [task for task, _ in batch]
        try:
            results = await asyncio.get_running_loop().run_in_executor(
                self._thread, self._write, tasks
            )
        except Exception as exc:
            self.stats.failed += 1
            self.stats.last_error = type(exc).__name__
            if self._on_batch is not None:
                self._on_batch(len(batch), time.monotonic() - began, False)
            for _, future in batch:
                if not future.done():
                    future.set_exception(exc)
            return
        self.stats.writes += 1
        self.stats.last_error = ""
        self.stats.last_write_at = time.time()
        if self._on_batch is not None:
            self._on_batch(len(batch), time.monotonic() - began, True)
        for (_, future), result in zip(batch, results, strict=True):
            if not future.done():
                future.set_result(result)

    def _write(self, tasks: list[NewTask]) -> list[Enqueued]:
        """On the store's thread: one enqueue of the batch."""
        if self._store is None:
            self._store = self._open()
        try:
            return self._store.enqueue(tasks, clock=self._clock, not_before=lambda _zone: None)
        except BaseException as exc:
            log.warning(
                "a write of %d task(s) failed: %s", len(tasks), getattr(exc, "message", exc)
            )
            self._close()
            raise
        finally:
            if self._reopen:
                self._close()

    def _close(self) -> None:
        if self._store is not None:
            with contextlib.suppress(Exception):
                self._store.close()
            self._store = None
