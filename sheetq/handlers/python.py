"""The ``python`` handler: ``module:function`` called with a ``sheetq.Task``.

The function runs in a worker thread so that a timeout can be enforced;
Python cannot kill a thread, so a function still running at its timeout is
abandoned (outcome unknown) and keeps running in the background until the
process exits. Handlers should honour their own timeouts.
"""

from __future__ import annotations

import importlib
import sys
import threading
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sheetq.errors import ConfigError, FailTask, OutcomeUnknown, RetryTask, SkipTask
from sheetq.handlers import ReconcileAnswer, result_text
from sheetq.model import MAX_HANDLER_TEXT, Task
from sheetq.redact import shorten
from sheetq.retry import Outcome


def load(target: str, cwd: Path | None) -> Callable[[Task], Any]:
    """Import ``module:function``; the configuration's directory is on ``sys.path``."""
    module_name, _, attr = target.partition(":")
    if cwd is not None and str(cwd) not in sys.path:
        sys.path.insert(0, str(cwd))
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # any import-time failure is a configuration problem
        raise ConfigError(f"cannot import {module_name!r}: {type(exc).__name__}: {exc}") from None
    func: Any = module
    for part in attr.split("."):
        func = getattr(func, part, None)
    if not callable(func):
        raise ConfigError(f"{target!r}: {attr!r} is not a function in {module_name!r}")
    return func  # type: ignore[no-any-return]


def _call(func: Callable[[Task], Any], task: Task, timeout: float) -> tuple[str, Any]:
    box: dict[str, Any] = {}

    def work() -> None:
        try:
            box["value"] = func(task)
        except BaseException as exc:
            box["error"] = exc

    thread = threading.Thread(target=work, name=f"sheetq-{task.task_id}", daemon=True)
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        return "timeout", None
    if "error" in box:
        return "error", box["error"]
    return "value", box.get("value")


def _last_line(exc: BaseException) -> str:
    lines = traceback.format_exception_only(type(exc), exc)
    return lines[-1].strip() if lines else type(exc).__name__


def call_function(target: str, task: Task, *, timeout: float, cwd: Path | None) -> Outcome:
    """Call the handler and classify: return → done, signals → their outcome, other → transient."""
    func = load(target, cwd)
    kind, value = _call(func, task, timeout)
    if kind == "timeout":
        return Outcome.unknown(f"still running after {timeout:g}s; abandoned")
    if kind == "value":
        return Outcome.done(shorten(result_text(value), MAX_HANDLER_TEXT))
    exc = value
    if isinstance(exc, RetryTask):
        return Outcome.retry(exc.message or "handler asked to retry", retry_after=exc.after)
    if isinstance(exc, FailTask):
        return Outcome.failed(exc.message or "handler failed the task")
    if isinstance(exc, SkipTask):
        return Outcome.skipped(exc.message)
    if isinstance(exc, OutcomeUnknown):
        return Outcome.unknown(exc.message or "handler reported an unknown outcome")
    return Outcome.retry(_last_line(exc))


def reconcile_function(
    target: str, task: Task, *, timeout: float, cwd: Path | None
) -> ReconcileAnswer:
    """A value: found; ``None``: not found; ``OutcomeUnknown``/anything else: cannot tell."""
    func = load(target, cwd)
    kind, value = _call(func, task, timeout)
    if kind == "value":
        if value is None:
            return ReconcileAnswer(False)
        return ReconcileAnswer(True, shorten(result_text(value), MAX_HANDLER_TEXT))
    if kind == "timeout":
        return ReconcileAnswer(None, message=f"reconcile check still running after {timeout:g}s")
    return ReconcileAnswer(None, message=f"reconcile check could not tell: {_last_line(value)}")
