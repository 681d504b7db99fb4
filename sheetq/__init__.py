"""sheetq: a job queue whose store is a spreadsheet managers can see.

The public API for Python handlers (``[types.X] python = "module:function"``)::

    from sheetq import Task, RetryTask, FailTask, SkipTask, OutcomeUnknown

    def push_lead(task: Task) -> str:
        if not task.payload.get("phone"):
            raise FailTask("lead has no phone number")
        return crm.create(task.payload, idempotency_key=task.idempotency_key)

Everything else is internal and may change between releases.
"""

from sheetq.errors import FailTask, HandlerSignal, OutcomeUnknown, RetryTask, SkipTask
from sheetq.model import Task

__all__ = ["FailTask", "HandlerSignal", "OutcomeUnknown", "RetryTask", "SkipTask", "Task"]
__version__ = "0.1.0"
