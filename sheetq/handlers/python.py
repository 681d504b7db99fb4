"""The ``python`` handler: ``module:function`` called with a ``sheetq.Task``.

The function runs in a helper thread so that a timeout can be enforced (one per calling
thread, reused from task to task); Python cannot kill a thread, so a function still
running at its timeout is abandoned (outcome unknown) and keeps running in the background
until it returns or the process exits. Handlers should honour their own timeouts.

A caller whose own thread may be abandoned (the PostgreSQL worker's handler threads) passes
a ``Watch`` instead: the function then runs on the calling thread itself, with no second
thread to cross, and the watch's owner enforces the timeout: at ``timeout`` seconds it
gives the task the timeout outcome (``timed_out``) on another thread and leaves this one
behind; when the function returns late, ``Abandoned`` unwinds this thread and its result
is ignored.

What a function prints (``print()``, ``sys.stdout.write``) goes to stderr: stdout is
sheetq's own (``process --json`` prints one JSON document there). ``sys.stdout`` is
replaced, once, by a stream that sends the writes of handler threads to ``sys.stderr`` and
everyone else's to the stdout it replaced.
"""

from __future__ import annotations

import importlib
import queue
import sys
import threading
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

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


class Abandoned(BaseException):
    """Raised in a watched thread whose call returned after its owner had abandoned it at
    its timeout: the result is ignored and the thread should end without writing."""


class Watch(Protocol):
    """The owner of a thread that may be abandoned: told when a handler call starts on it
    and when it returns."""

    def start(self, timeout: float) -> None:
        """The call starts now; abandon this thread if it still runs after ``timeout`` s."""

    def finish(self) -> bool:
        """The call returned: ``False`` if this thread was abandoned meanwhile."""


def timed_out(timeout: float) -> Outcome:
    """The outcome of a handler still running after ``timeout`` seconds (abandoned)."""
    return Outcome.unknown(f"still running after {timeout:g}s; abandoned")


_handler_threads: set[int] = set()  # idents of the threads that run handler functions


class _HandlerStdout:
    """``sys.stdout`` while handlers may run: a handler thread's writes go to ``sys.stderr``,
    every other thread's to ``stdout`` (the stream it replaced); the rest is ``stdout``'s."""

    def __init__(self, stdout: Any) -> None:
        self._stdout = stdout

    def _target(self) -> Any:
        return sys.stderr if threading.get_ident() in _handler_threads else self._stdout

    def write(self, text: str) -> int:
        return int(self._target().write(text))

    def writelines(self, lines: Any) -> None:
        self._target().writelines(lines)

    def flush(self) -> None:
        self._target().flush()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stdout, name)


def _route_prints() -> None:
    """Make ``sys.stdout`` a ``_HandlerStdout`` (again, if something replaced it since)."""
    if not isinstance(sys.stdout, _HandlerStdout):
        sys.stdout = _HandlerStdout(sys.stdout)


class _Runner:
    """A daemon thread that runs the calls its caller thread hands it, one at a time, so
    that a timeout can be enforced without starting a thread per task (about 0.1 ms of
    CPU each, a tenth of a no-op task's cost on PostgreSQL). A runner whose call outlived
    its timeout is abandoned to finish in the background; the caller gets a new one."""

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue[tuple[Callable[[], None], threading.Lock] | None] = (
            queue.SimpleQueue()
        )
        thread = threading.Thread(target=self._serve, name="sheetq-handler-call", daemon=True)
        thread.start()

    def _serve(self) -> None:
        ident = threading.get_ident()
        _handler_threads.add(ident)  # its prints go to stderr
        try:
            while (job := self._jobs.get()) is not None:
                work, done = job
                try:
                    work()
                finally:
                    done.release()
        finally:
            _handler_threads.discard(ident)  # an ident may be reused by a later thread

    def run(self, work: Callable[[], None], timeout: float) -> bool:
        """Run ``work`` on this runner; ``False`` if it was still running after ``timeout``
        seconds (the runner is then busy for good: retire it)."""
        done = threading.Lock()
        done.acquire()
        self._jobs.put((work, done))
        return done.acquire(timeout=max(0.0, timeout))

    def retire(self) -> None:
        """Let the thread exit once its abandoned call returns."""
        self._jobs.put(None)


_runners = threading.local()  # each calling thread's _Runner


def _call_here(
    func: Callable[[Task], Any], task: Task, timeout: float, watch: Watch
) -> tuple[str, Any]:
    """Call ``func`` on this thread, its timeout enforced by ``watch``'s owner; raises
    ``Abandoned`` when the call outlived it."""
    _route_prints()
    ident = threading.get_ident()
    _handler_threads.add(ident)  # its prints go to stderr
    watch.start(timeout)
    try:
        kind, value = "value", func(task)
    except BaseException as exc:
        kind, value = "error", exc
    finally:
        _handler_threads.discard(ident)
    if not watch.finish():
        raise Abandoned
    return kind, value


def _call(
    func: Callable[[Task], Any], task: Task, timeout: float, watch: Watch | None = None
) -> tuple[str, Any]:
    if watch is not None:
        return _call_here(func, task, timeout, watch)
    box: dict[str, Any] = {}

    def work() -> None:
        try:
            box["value"] = func(task)
        except BaseException as exc:
            box["error"] = exc

    _route_prints()
    runner: _Runner | None = getattr(_runners, "runner", None)
    if runner is None:
        runner = _runners.runner = _Runner()
    if not runner.run(work, timeout):
        _runners.runner = None
        runner.retire()
        return "timeout", None
    if "error" in box:
        return "error", box["error"]
    return "value", box.get("value")


def _last_line(exc: BaseException) -> str:
    lines = traceback.format_exception_only(type(exc), exc)
    return lines[-1].strip() if lines else type(exc).__name__


def call_function(
    target: str, task: Task, *, timeout: float, cwd: Path | None, watch: Watch | None = None
) -> Outcome:
    """Call the handler and classify: return → done, signals → their outcome, other → transient.
    With ``watch``: on this thread, the timeout enforced by its owner (``Abandoned`` when the
    call returns after that)."""
    func = load(target, cwd)
    kind, value = _call(func, task, timeout, watch)
    if kind == "timeout":
        return timed_out(timeout)
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
