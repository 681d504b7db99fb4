"""The Python API for enqueueing (docs/design.md §15): ``sheetq.enqueue``.

Two ways to call it::

    import sheetq

    # inside your own psycopg 3 transaction (the transactional outbox): the task exists
    # if and only if you commit, and workers are woken at your commit
    with psycopg.connect(url) as conn:
        conn.execute("UPDATE orders SET state = 'paid' WHERE id = %s", (order_id,))
        sheetq.enqueue(conn, "order", {"order_id": order_id})

    # on any backend (Google, local:, PostgreSQL), committed before it returns
    sheetq.enqueue("lead", {"lead_id": "L-1", "phone": "+380501234567"})

The rules are ``sheetq enqueue``'s (docs/design.md §4): the key is ``key`` or derived from
the payload; the same key and payload again is a duplicate (the existing task is returned);
the same key with another payload raises ``KeyConflict``.
"""

from __future__ import annotations

import asyncio
import functools
import json
import math
import os
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Literal, overload

from sheetq.errors import InputError, KeyConflict

if TYPE_CHECKING:
    import psycopg

    from sheetq.accept import Enqueued, NewTask
    from sheetq.clock import Clock
    from sheetq.config import Settings

# The SQLSTATE that the SQL function sheetq_enqueue raises for a conflict.
SQLSTATE_CONFLICT = "SQ409"


@dataclass(frozen=True)
class EnqueueResult:
    """What ``sheetq.enqueue`` did: ``outcome`` is ``"enqueued"`` (a new task) or
    ``"duplicate"`` (the same key and payload were enqueued before: ``task_id`` and
    ``status`` are that task's, nothing was added); ``idempotency_key`` is the key as
    stored (``TYPE:…``)."""

    outcome: Literal["enqueued", "duplicate"]
    task_id: str
    type: str
    idempotency_key: str
    status: str

    @property
    def duplicate(self) -> bool:
        """True when nothing was added: the task was already there."""
        return self.outcome == "duplicate"


@overload
def enqueue(
    conn: psycopg.Connection[Any] | None,
    type: str,
    payload: Mapping[str, Any],
    /,
    *,
    key: str | None = None,
    delay: float | timedelta | None = None,
    at: datetime | None = None,
    priority: int | None = None,
    group: str | None = None,
    queue: str | None = None,
    config: str | os.PathLike[str] | None = None,
) -> EnqueueResult: ...


@overload
def enqueue(
    type: str,
    payload: Mapping[str, Any],
    /,
    *,
    key: str | None = None,
    delay: float | timedelta | None = None,
    at: datetime | None = None,
    priority: int | None = None,
    group: str | None = None,
    queue: str | None = None,
    config: str | os.PathLike[str] | None = None,
) -> EnqueueResult: ...


def enqueue(
    *args: Any,
    key: str | None = None,
    delay: float | timedelta | None = None,
    at: datetime | None = None,
    priority: int | None = None,
    group: str | None = None,
    queue: str | None = None,
    config: str | os.PathLike[str] | None = None,
) -> EnqueueResult:
    """Add a task once (docs/design.md §4, §15). Call it as ``enqueue(conn, type, payload)``
    with a psycopg 3 connection, or ``enqueue(type, payload)`` (or ``conn=None``).

    With ``conn`` (PostgreSQL): the task is written inside the caller's transaction (a
    savepoint of it; with an autocommit connection, its own transaction, committed at
    once). It exists if and only if the caller commits; ``sheetq worker`` is woken at the
    commit. A second transaction enqueueing the same key waits for this one to end.
    Without ``conn``: the configured backend (``SHEETQ_DATABASE_URL``,
    ``SHEETQ_SPREADSHEET``, ``sheetq.toml``) is opened, the task written and committed,
    within ``SHEETQ_ENQUEUE_TIMEOUT``.

    ``type``: the task type; ``payload``: a JSON object (a mapping of str keys to JSON
    values; at most 50,000 characters as compact JSON). ``key``: the idempotency key
    (stored as ``TYPE:key``); default: the type's ``key_fields``, then ``lead_id`` /
    ``order_id`` / ``event_id``, then the payload's hash. ``delay`` (seconds, or a
    ``timedelta``) or ``at`` (a timezone-aware ``datetime``): not before then.
    ``priority`` (an integer, higher runs first; default: the type's) and ``group`` (tasks
    of one group run one at a time, in enqueue order; default: the type's
    ``group_fields``): docs/design.md §14. ``queue``: the Queue's name (default: the
    configured one, ``Queue``); ``config``: the ``sheetq.toml`` to read (default
    ``SHEETQ_CONFIG``, else ``./sheetq.toml`` if present).

    Returns an ``EnqueueResult`` (``outcome`` ``enqueued`` or ``duplicate``). Raises
    ``KeyConflict`` when the key belongs to a task with another payload (nothing added; a
    ``conflict`` log row is written, in the caller's transaction with ``conn``);
    ``InputError`` for a bad type, payload, key or time; ``ConfigError`` for a bad
    configuration; ``SchemaError`` when ``sheetq init`` has not prepared the store;
    ``StoreUnavailable`` when it cannot be reached (all are ``sheetq.SheetqError``).
    """
    conn, task_type, payload = _arguments(args)
    settings, task, clock = _task(
        task_type, payload, key, delay, at, priority, group, queue, config, conn is None
    )
    if conn is not None:
        from sheetq.postgres.enqueue import enqueue_in

        kind = settings.type_config(task_type)
        done = enqueue_in(
            conn,
            settings.queue_sheet,
            task,
            owner=kind.owner,
            group_blocks=kind.group_blocks_on_failure,
            now=clock.now(),
        )
    else:
        done = _committed(settings, task, clock)
    return _result(task_type, done)


async def enqueue_async(
    conn: psycopg.AsyncConnection[Any] | None,
    type: str,
    payload: Mapping[str, Any],
    /,
    *,
    key: str | None = None,
    delay: float | timedelta | None = None,
    at: datetime | None = None,
    priority: int | None = None,
    group: str | None = None,
    queue: str | None = None,
    config: str | os.PathLike[str] | None = None,
) -> EnqueueResult:
    """``enqueue(conn, …)`` for asyncio applications, with the same rules, results and
    errors. With a psycopg 3 ``AsyncConnection``: the task is written inside the caller's
    transaction. With ``conn=None``: the configured backend (any of them) is opened and the
    task committed, on a worker thread (``asyncio.to_thread``), so the event loop never
    waits on the store."""
    if conn is None:
        return await asyncio.to_thread(
            functools.partial(
                enqueue,
                None,
                type,
                payload,
                key=key,
                delay=delay,
                at=at,
                priority=priority,
                group=group,
                queue=queue,
                config=config,
            )
        )
    if isinstance(conn, str):
        raise TypeError(
            "enqueue_async(): the first argument is a psycopg AsyncConnection or None "
            "(enqueue_async(None, type, payload) uses the configured backend)"
        )
    settings, task, clock = _task(type, payload, key, delay, at, priority, group, queue, config)
    from sheetq.postgres.enqueue import enqueue_in_async

    kind = settings.type_config(type)
    done = await enqueue_in_async(
        conn,
        settings.queue_sheet,
        task,
        owner=kind.owner,
        group_blocks=kind.group_blocks_on_failure,
        now=clock.now(),
    )
    return _result(type, done)


def _task(
    task_type: Any,
    payload: Any,
    key: str | None,
    delay: float | timedelta | None,
    at: datetime | None,
    priority: int | None,
    group: str | None,
    queue: str | None,
    config: str | os.PathLike[str] | None,
    need_store: bool = False,
) -> tuple[Settings, NewTask, Clock]:
    """The settings, the keyed task with its not-before time, and the clock; every input
    checked before anything is opened."""
    from sheetq.clock import clock_from_env
    from sheetq.config import load_settings

    settings = load_settings(
        config=os.fspath(config) if config is not None else None,
        require_spreadsheet=need_store,
    )
    if queue is not None:
        settings = replace(settings, queue_sheet=_queue_name(queue))
    clock = clock_from_env()
    task = _prepare(task_type, payload, key, priority, group, settings)
    task.not_before = _not_before(delay, at, clock.now())
    if settings.config_path is not None and settings.type_config(task_type).handler is None:
        warnings.warn(  # as `sheetq enqueue` warns: most often a typo in the type
            f"sheetq.enqueue: no handler is configured for type {task_type!r} in "
            f"{settings.config_path}; its tasks wait until one is",
            UserWarning,
            stacklevel=3,
        )
    return settings, task, clock


def _arguments(args: tuple[Any, ...]) -> tuple[Any, str, Any]:
    if len(args) == 3:
        conn, task_type, payload = args
    elif len(args) == 2 and isinstance(args[0], str):
        conn, (task_type, payload) = None, args
    else:
        raise TypeError(
            "enqueue() takes (conn, type, payload) or (type, payload) as positional arguments"
        )
    if conn is not None and (
        isinstance(conn, str) or not type(conn).__module__.startswith("psycopg")
    ):
        raise TypeError(
            "enqueue(): the first of three arguments is a psycopg 3 connection to the "
            f"queue's PostgreSQL, not {type(conn).__module__}.{type(conn).__qualname__}; "
            "on a sheet or a local workbook call enqueue(type, payload)"
        )
    return conn, task_type, payload


def _queue_name(queue: str) -> str:
    if not isinstance(queue, str) or not queue.strip():
        raise InputError("enqueue: queue: expected the Queue's name, e.g. 'Queue'")
    return queue.strip()


def _prepare(
    task_type: Any,
    payload: Any,
    key: str | None,
    priority: int | None,
    group: str | None,
    settings: Settings,
) -> NewTask:
    from sheetq.accept import prepare
    from sheetq.config import TYPE_PATTERN, TYPE_RULE
    from sheetq.idempotency import parse_payload

    if not isinstance(task_type, str) or not TYPE_PATTERN.match(task_type):
        raise InputError(f"enqueue: type {task_type!r}: {TYPE_RULE}")
    if not isinstance(payload, Mapping):
        raise InputError(
            f"enqueue: payload: expected a mapping (a JSON object), got {type(payload).__name__}"
        )
    if key is not None and not isinstance(key, str):
        raise InputError(f"enqueue: key: expected a string, got {type(key).__name__}")
    if group is not None and not isinstance(group, str):
        raise InputError(f"enqueue: group: expected a string, got {type(group).__name__}")
    if priority is not None and (isinstance(priority, bool) or not isinstance(priority, int)):
        raise InputError(f"enqueue: priority: expected an integer, got {priority!r}")
    try:
        text = json.dumps(dict(payload), ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise InputError(f"enqueue: payload: not JSON: {exc}") from None
    body = parse_payload(text, where="enqueue: payload")
    try:
        (task,) = prepare(
            task_type,
            [(None, body)],
            settings,
            key=key,
            source="enqueue: payload",
            priority=priority,
            group=group,
        )
    except InputError as exc:  # the checks speak of the CLI's --key, --priority, --group
        message = exc.message
        for flag in ("--key", "--priority", "--group"):
            message = message.replace(flag, f"enqueue: {flag[2:]}", 1)
        raise InputError(message) from None
    return task


def _not_before(
    delay: float | timedelta | None, at: datetime | None, now: datetime
) -> datetime | None:
    """The not-before time: ``now + delay`` or ``at``; ``InputError`` for a negative or
    non-finite delay, a naive ``at``, or one that is not a datetime."""
    if delay is not None and at is not None:
        raise InputError("enqueue: give delay or at, not both")
    if delay is not None:
        seconds = delay.total_seconds() if isinstance(delay, timedelta) else delay
        if isinstance(seconds, bool) or not isinstance(seconds, int | float):
            raise InputError("enqueue: delay: expected seconds (a number) or a timedelta")
        if not math.isfinite(seconds) or seconds < 0:
            raise InputError(f"enqueue: delay: expected 0 or more seconds, got {seconds!r}")
        return now + timedelta(seconds=seconds)
    if at is not None:
        if not isinstance(at, datetime):
            raise InputError("enqueue: at: expected a datetime")
        if at.tzinfo is None or at.utcoffset() is None:
            raise InputError(
                "enqueue: at: a naive datetime is ambiguous; give one with a time zone "
                "(e.g. datetime(2026, 12, 1, 9, tzinfo=UTC))"
            )
        return at
    return None


def _committed(settings: Settings, task: NewTask, clock: Clock) -> Enqueued:
    from sheetq.backends import open_queue

    not_before = task.not_before
    store = open_queue(
        settings,
        time_limit=settings.enqueue_timeout,
        time_limit_name="SHEETQ_ENQUEUE_TIMEOUT",
    )
    try:
        (done,) = store.enqueue([task], clock=clock, not_before=lambda _zone: not_before)
    finally:
        store.close()
    return done


def _result(task_type: str, done: Enqueued) -> EnqueueResult:
    if done.outcome == "conflict":
        raise KeyConflict(
            f"conflict: key {done.key!r} already belongs to task {done.task_id} (status "
            f"{done.status}) with a different payload; nothing added. Use another key if "
            "this is a new operation.",
            task_id=done.task_id,
            key=done.key,
            status=str(done.status),
        )
    outcome: Literal["enqueued", "duplicate"] = (
        "duplicate" if done.outcome == "duplicate" else "enqueued"
    )
    return EnqueueResult(outcome, done.task_id, task_type, done.key, str(done.status))
