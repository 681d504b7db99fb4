"""``sheetq.execute.Executor``: one claimed task's handler and outcome, from several threads."""

from __future__ import annotations

import random
import threading
from datetime import UTC, datetime
from pathlib import Path

from sheetq.clock import FakeClock
from sheetq.config import Settings, load_settings
from sheetq.execute import Executed, Executor
from sheetq.model import ErrorClass, Event, Status
from sheetq.sheet.plan import QueueRow
from sheetq.sheet.store import Row
from sheetq.summary import RunSummary
from tests.conftest import handler_script

NOW = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)


def _settings(tmp_path: Path, types: str) -> Settings:
    """Settings loaded from a real ``sheetq.toml`` in ``tmp_path`` (handlers relative to it)."""
    path = tmp_path / "sheetq.toml"
    path.write_text(types, encoding="utf-8")
    return load_settings(config=str(path), env={}, require_spreadsheet=False)


def _row(task_id: str, number: int, task_type: str = "job", retry_count: int = 0) -> QueueRow:
    raw = Row(
        number,
        {"task_id": task_id, "type": task_type, "status": "processing", "retry_count": retry_count},
    )
    return QueueRow(raw, task_id, "processing", UTC, "en_US")


def _executor(settings: Settings, clock: FakeClock) -> tuple[Executor, RunSummary, list[str]]:
    summary = RunSummary("run_test")
    notes: list[str] = []
    executor = Executor(
        settings, clock=clock, rng=random.Random(1), summary=summary, note=notes.append
    )
    return executor, summary, notes


def _run_threads(*targets: object) -> None:
    threads = [threading.Thread(target=t) for t in targets]  # type: ignore[arg-type]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
        assert not thread.is_alive()


def test_concurrent_handlers_run_at_once_and_count_correctly(tmp_path: Path) -> None:
    """Four handlers in four threads run at the same time; each outcome is counted once."""
    (tmp_path / "exec_meet.py").write_text(
        "import threading\n"
        "from sheetq.errors import FailTask, RetryTask, SkipTask\n"
        "MEET = threading.Barrier(4, timeout=10)\n"
        "def run(task):\n"
        "    MEET.wait()  # breaks (and the task retries) unless all four run at once\n"
        "    kind = task.payload['kind']\n"
        "    if kind == 'fail':\n"
        "        raise FailTask('bad data ' + task.task_id)\n"
        "    if kind == 'retry':\n"
        "        raise RetryTask('busy')\n"
        "    if kind == 'skip':\n"
        "        raise SkipTask('nothing to do')\n"
        "    return 'ok ' + task.task_id\n",
        encoding="utf-8",
    )
    settings = _settings(tmp_path, '[types.job]\npython = "exec_meet:run"\n')
    executor, summary, _notes = _executor(settings, FakeClock(NOW))
    config = settings.type_config("job")
    got: dict[str, Executed] = {}

    def one(task_id: str, number: int, kind: str) -> None:
        row = _row(task_id, number)
        got[task_id] = executor.execute(row, f'{{"kind": "{kind}"}}', config, reconcile=False)

    _run_threads(
        lambda: one("t_done", 2, "done"),
        lambda: one("t_fail", 3, "fail"),
        lambda: one("t_retry", 4, "retry"),
        lambda: one("t_skip", 5, "skip"),
    )
    assert {k: v.decision.status for k, v in got.items()} == {
        "t_done": Status.DONE,
        "t_fail": Status.FAILED,
        "t_retry": Status.RETRY,
        "t_skip": Status.SKIPPED,
    }
    assert got["t_done"].decision.result == "ok t_done"
    assert all(v.event is None for v in got.values())
    assert (summary.done, summary.failed, summary.retry, summary.skipped) == (1, 1, 1, 1)
    assert list(executor.failures) == ["t_fail"]
    assert executor.failures["t_fail"].row == 3
    assert executor.failures["t_fail"].error == "bad data t_fail"
    assert executor.open_circuits == {}


def test_breaker_opens_after_threshold_transient_failures(tmp_path: Path) -> None:
    """breaker_threshold = 2: one transient failure leaves the circuit shut, the second opens it."""
    command = handler_script(tmp_path, "busy", "import sys\nsys.stdin.read()\nsys.exit(75)\n")
    settings = _settings(tmp_path, f"[types.job]\ncommand = {command}\nbreaker_threshold = 2\n")
    clock = FakeClock(NOW)
    executor, summary, _notes = _executor(settings, clock)
    config = settings.type_config("job")
    lease_until = datetime(2026, 1, 5, 10, 0, tzinfo=UTC)

    first = executor.execute(_row("t_1", 2), "{}", config, reconcile=False)
    assert (first.decision.status, first.decision.error_class) == (
        Status.RETRY,
        ErrorClass.TRANSIENT,
    )
    assert executor.open_circuits == {}
    assert executor.cannot_start(_row("t_2", 3), config, lease_until, False) == ""

    executor.execute(_row("t_2", 3), "{}", config, reconcile=False)
    assert executor.open_circuits == {"job": "2 consecutive transient failures"}
    assert executor.cannot_start(_row("t_3", 4), config, lease_until, False) == (
        "circuit open for type 'job': 2 consecutive transient failures"
    )
    assert summary.retry == 2 and executor.failures == {}


def test_cannot_start_lease_and_max_runtime(tmp_path: Path) -> None:
    """A task whose timeout outlasts the claim's lease, or after --max-runtime, does not start."""
    settings = _settings(tmp_path, '[types.job]\npython = "nowhere:run"\ntimeout = "60s"\n')
    executor, _summary, _notes = _executor(settings, FakeClock(NOW))
    config = settings.type_config("job")
    short = datetime(2026, 1, 5, 9, 0, 59, tzinfo=UTC)
    long = datetime(2026, 1, 5, 9, 1, 0, tzinfo=UTC)
    row = _row("t_1", 2)
    assert executor.cannot_start(row, config, short, False) == (
        "the batch's lease would run out before this task's timeout"
    )
    assert executor.cannot_start(row, config, long, False) == ""
    assert executor.cannot_start(row, config, long, True) == "--max-runtime reached"


def test_bad_payload_fails_without_running_and_reconcile_recovers(tmp_path: Path) -> None:
    """Unreadable payload_json fails the task (handler not run); a reconcile gives RECOVERED."""
    (tmp_path / "exec_found.py").write_text(
        "CALLS = []\n"
        "def run(task):\n"
        "    CALLS.append(task.task_id)\n"
        "def check(task):\n"
        "    return 'was sent'\n",
        encoding="utf-8",
    )
    settings = _settings(
        tmp_path,
        '[types.job]\npython = "exec_found:run"\non_unknown = "reconcile"\n'
        'reconcile = { python = "exec_found:check" }\n',
    )
    executor, summary, _notes = _executor(settings, FakeClock(NOW))
    config = settings.type_config("job")

    bad = executor.execute(_row("t_bad", 2), "{not json", config, reconcile=False)
    assert bad.decision.status is Status.FAILED
    assert bad.decision.message.endswith("; fix the cell and requeue")
    assert "t_bad" in executor.failures

    found = executor.execute(_row("t_lost", 3, retry_count=1), "{}", config, reconcile=True)
    assert (found.decision.status, found.decision.result, found.event) == (
        Status.DONE,
        "was sent",
        Event.RECOVERED,
    )
    import exec_found  # type: ignore[import-not-found]

    assert exec_found.CALLS == []  # neither the bad payload nor the reconcile ran the handler
    assert (summary.failed, summary.done, summary.recovered) == (1, 1, 1)


class _SleepLog(FakeClock):
    """A fake clock that records each sleep and does not move: every thread asks at time 0."""

    def __init__(self) -> None:
        super().__init__(NOW)
        self.sleeps: list[float] = []
        self._lock = threading.Lock()

    def sleep(self, seconds: float) -> None:
        with self._lock:
            self.sleeps.append(seconds)


def test_rate_limit_spaces_threads_by_the_interval(tmp_path: Path) -> None:
    """rate_limit = '30/min' with three threads at once: starts at 0, 2 and 4 s on the clock."""
    settings = _settings(tmp_path, "[types.job]\npython = \"nowhere:run\"\nrate_limit = '30/min'\n")
    clock = _SleepLog()
    executor, _summary, _notes = _executor(settings, clock)
    config = settings.type_config("job")
    meet = threading.Barrier(3, timeout=10)

    def start() -> None:
        meet.wait()
        executor.wait_rate_limit(config)

    _run_threads(start, start, start)
    assert sorted(clock.sleeps) == [2.0, 4.0]
    executor.wait_rate_limit(settings.type_config("other"))  # no rate limit: no wait
    assert len(clock.sleeps) == 2


def test_rate_limit_one_thread_on_a_fake_clock(tmp_path: Path) -> None:
    """One thread: the second start waits the interval; a start after a long gap does not."""
    settings = _settings(tmp_path, "[types.job]\npython = \"nowhere:run\"\nrate_limit = '1/s'\n")
    clock = FakeClock(NOW)
    executor, _summary, _notes = _executor(settings, clock)
    config = settings.type_config("job")
    executor.wait_rate_limit(config)
    assert clock.monotonic() == 0.0
    clock.advance(0.25)
    executor.wait_rate_limit(config)
    assert clock.monotonic() == 1.0
    clock.advance(5)
    executor.wait_rate_limit(config)
    assert clock.monotonic() == 6.0


def test_execute_imports_no_driver() -> None:
    """sheetq.execute (shared with the PostgreSQL worker) loads no store driver or Telegram."""
    import subprocess
    import sys

    code = (
        "import sys, sheetq.execute\n"
        "roots = ('gspread', 'sqlite3', '_sqlite3', 'psycopg', 'telegram')\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in roots\n"
        "             or m.startswith('sheetq.sheet.google') or m == 'sheetq.sheet.runner'))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
