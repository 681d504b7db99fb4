"""One exception root for sheetq errors, and the handler signals.

Errors carry the process exit code of docs/design.md §4; only the CLI entry point
turns them into an exit. Handler signals are not errors: a Python handler
raises them to tell the runner how a task ended.
"""

from __future__ import annotations

from typing import Any

EXIT_OK = 0
EXIT_FAILURE = 1  # runtime failure: backend unreachable after retries, unexpected error
EXIT_USAGE = 2  # usage or input error: bad arguments, invalid JSON, bad configuration
EXIT_CONFLICT = 3  # idempotency conflict: same key, different payload


class SheetqError(Exception):
    """sheetq failed."""

    exit_code: int = EXIT_FAILURE

    def __init__(self, message: str | None = None) -> None:
        super().__init__(message or (self.__doc__ or "").strip())

    @property
    def message(self) -> str:
        return str(self.args[0]) if self.args else ""


class UsageError(SheetqError):
    """Bad arguments or input."""

    exit_code = EXIT_USAGE


class InputError(UsageError):
    """The input is not valid."""


class ConfigError(UsageError):
    """The configuration is not valid."""


class SchemaError(UsageError):
    """The worksheets do not have the columns sheetq needs; run `sheetq init`."""


class ConflictError(SheetqError):
    """The idempotency key is already used by a task with a different payload."""

    exit_code = EXIT_CONFLICT


class KeyConflict(ConflictError):
    """The idempotency key already belongs to a task with a different payload
    (docs/design.md §4): nothing was added. ``task_id`` is the task holding the key, ``key``
    the key (``TYPE:…``), ``status`` that task's status."""

    def __init__(self, message: str, *, task_id: str, key: str, status: str) -> None:
        super().__init__(message)
        self.task_id = task_id
        self.key = key
        self.status = status


class StoreError(SheetqError):
    """The spreadsheet could not be read or written."""


class StoreUnavailable(StoreError):
    """The spreadsheet backend did not answer, even after retries."""


class LeaseConflict(StoreError):
    """Another run holds or replaced the queue's run lease."""


class Interrupted(BaseException):
    """sheetq was asked to stop (SIGINT or SIGTERM). ``exit_code`` is 128 + the signal."""

    def __init__(self, message: str = "", exit_code: int = 130) -> None:
        super().__init__(message)
        self.message = message
        self.exit_code = exit_code
        # what the interrupted run had done (a ``sheetq.summary.RunSummary``), when it was a
        # run: ``process --json`` prints it even so (``sheetq.summary.stopped``)
        self.summary: Any = None


# --- handler signals -------------------------------------------------------


class HandlerSignal(Exception):
    """Base of the exceptions a Python handler raises to decide a task's outcome."""

    def __init__(self, message: str = "") -> None:
        super().__init__(message)
        self.message = message


class RetryTask(HandlerSignal):
    """Try again later (transient failure). ``after`` is a minimum delay in seconds."""

    def __init__(self, message: str = "", after: float | None = None) -> None:
        super().__init__(message)
        self.after = after


class FailTask(HandlerSignal):
    """Fail the task now (permanent: bad data); it goes to the dead-letter queue."""


class SkipTask(HandlerSignal):
    """Nothing to do for this task; it ends as ``skipped``."""


class OutcomeUnknown(HandlerSignal):
    """The action may or may not have happened (e.g. a timeout after the request was sent)."""
