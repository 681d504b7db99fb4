"""The ``python`` handler's call (sheetq/handlers/python.py): a helper thread per calling
thread, reused from task to task; a call that outlives its timeout is abandoned and the
next call gets a new helper, not a queue behind the abandoned one."""

from __future__ import annotations

import sys
import threading
from pathlib import Path

import pytest

from sheetq.handlers.python import call_function
from sheetq.model import Task
from sheetq.retry import Outcome

MODULE = """
import threading

seen = []
release = threading.Event()
calls = threading.local()

def where(task):
    calls.n = getattr(calls, "n", 0) + 1  # calls so far on this thread
    return f"{threading.get_ident()}/{calls.n}"

def stuck(task):
    release.wait(30)
    seen.append("stuck returned")
    return "late"

def boom(task):
    raise KeyboardInterrupt("not the worker's")
"""


@pytest.fixture
def module(tmp_path: Path) -> object:
    (tmp_path / "py_handler_mod.py").write_text(MODULE, encoding="utf-8")
    sys.modules.pop("py_handler_mod", None)
    yield tmp_path
    loaded = sys.modules.pop("py_handler_mod", None)
    if loaded is not None:
        loaded.release.set()  # type: ignore[attr-defined]


def _task(n: int) -> Task:
    return Task(f"t_{n}", "job", {"n": n}, f"job:{n}", 1, None)


def _call(cwd: object, name: str, n: int, timeout: float = 5.0) -> Outcome:
    assert isinstance(cwd, Path)
    return call_function(f"py_handler_mod:{name}", _task(n), timeout=timeout, cwd=cwd)


def test_calls_from_one_thread_reuse_one_helper_thread(module: object) -> None:
    first = _call(module, "where", 1)
    second = _call(module, "where", 2)
    assert (first.result.split("/")[1], second.result.split("/")[1]) == ("1", "2")
    assert first.result.split("/")[0] != str(threading.get_ident())  # not the caller's


def test_each_calling_thread_has_its_own_helper(module: object) -> None:
    answers: list[str] = []

    def caller() -> None:
        answers.append(_call(module, "where", 3).result or "")

    threads = [threading.Thread(target=caller) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len({a.split("/")[0] for a in answers}) == 2


def test_a_timed_out_call_is_abandoned_and_the_next_gets_a_new_helper(module: object) -> None:
    before = _call(module, "where", 4).result
    stuck = _call(module, "stuck", 5, timeout=0.05)
    assert stuck.error_class == "unknown" and "abandoned" in stuck.message
    after = _call(module, "where", 6)  # not queued behind the stuck call
    assert after.result.endswith("/1")  # the first call on a new helper thread
    assert after.result.split("/")[0] != before.split("/")[0]  # the stuck one is still busy
    mod = sys.modules["py_handler_mod"]
    mod.release.set()  # type: ignore[attr-defined]


def test_a_base_exception_in_the_handler_is_its_outcome_not_the_callers(module: object) -> None:
    outcome = _call(module, "boom", 7)
    assert outcome.error_class == "transient" and "KeyboardInterrupt" in outcome.message
    assert _call(module, "where", 8).result  # the helper still serves
