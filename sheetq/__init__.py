"""sheetq: a job queue whose store is a spreadsheet managers can see.

Enqueue from Python (docs/design.md §15), inside your own PostgreSQL transaction or on any
backend::

    import sheetq

    sheetq.enqueue(conn, "order", {"order_id": "A-1001"})   # in conn's transaction
    sheetq.enqueue("lead", {"lead_id": "L-1"})               # the configured backend

It returns a ``sheetq.EnqueueResult`` (``outcome`` ``"enqueued"`` or ``"duplicate"``) and
raises ``sheetq.KeyConflict`` when the key belongs to a task with another payload; every
error is a ``sheetq.SheetqError``.

The API for Python handlers (``[types.X] python = "module:function"``)::

    from sheetq import Task, RetryTask, FailTask, SkipTask, OutcomeUnknown

    def push_lead(task: Task) -> str:
        if not task.payload.get("phone"):
            raise FailTask("lead has no phone number")
        return crm.create(task.payload, idempotency_key=task.idempotency_key)

Everything else is internal and may change between releases.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sheetq.errors import (
    ConfigError,
    ConflictError,
    FailTask,
    HandlerSignal,
    InputError,
    KeyConflict,
    OutcomeUnknown,
    RetryTask,
    SchemaError,
    SheetqError,
    SkipTask,
    StoreError,
    StoreUnavailable,
    UsageError,
)
from sheetq.model import Task

if TYPE_CHECKING:
    from sheetq.api import SQLSTATE_CONFLICT, EnqueueResult, enqueue, enqueue_async

__all__ = [
    "SQLSTATE_CONFLICT",
    "ConfigError",
    "ConflictError",
    "EnqueueResult",
    "FailTask",
    "HandlerSignal",
    "InputError",
    "KeyConflict",
    "OutcomeUnknown",
    "RetryTask",
    "SchemaError",
    "SheetqError",
    "SkipTask",
    "StoreError",
    "StoreUnavailable",
    "Task",
    "UsageError",
    "enqueue",
    "enqueue_async",
]
__version__ = "0.1.0"

_LAZY = {"enqueue", "enqueue_async", "EnqueueResult", "SQLSTATE_CONFLICT"}


def __getattr__(name: str) -> Any:
    """``sheetq.enqueue`` and its result type load on first use, so that ``import sheetq``
    (every command's start) stays light."""
    if name in _LAZY:
        from sheetq import api

        return getattr(api, name)
    raise AttributeError(f"module 'sheetq' has no attribute {name!r}")
