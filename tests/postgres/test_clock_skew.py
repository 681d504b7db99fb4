"""Time is the database's (docs/design.md §11): hosts whose clocks are minutes off never take
each other's running tasks, and `doctor` tells a host its offset from the server.

A host's clock is simulated, not pretended with ``SHEETQ_NOW``: the skewed `sheetq` runs with
a ``sitecustomize.py`` on its ``PYTHONPATH`` that moves ``datetime.now`` and ``time.time`` of
that process (and its handlers) by ``HOST_CLOCK_SKEW`` seconds."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from tests.conftest import PgBook, handler_script, run_cli, write_config

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

SITECUSTOMIZE = """
import datetime as _dt, os, time as _time

_SKEW = float(os.environ.get("HOST_CLOCK_SKEW") or 0)
_real = _dt.datetime


class _Meta(type):
    def __instancecheck__(cls, obj):
        return isinstance(obj, _real)

    def __subclasscheck__(cls, sub):
        return issubclass(sub, _real)


class datetime(_real, metaclass=_Meta):
    __slots__ = ()

    @classmethod
    def now(cls, tz=None):
        return _real.now(tz) + _dt.timedelta(seconds=_SKEW)

    @classmethod
    def utcnow(cls):
        return _real.utcnow() + _dt.timedelta(seconds=_SKEW)


_dt.datetime = datetime
_time_time = _time.time
_time.time = lambda: _time_time() + _SKEW
"""

HANDLER = """
import os, pathlib, sys, time
sys.stdin.read()
with open(os.environ["STARTS"], "a") as f:
    f.write(os.environ["SHEETQ_TASK_ID"] + "\\n")
pathlib.Path(os.environ["BEGAN"]).touch()
gate = pathlib.Path(os.environ["GATE"])
deadline = time.monotonic() + 30
while not gate.exists() and time.monotonic() < deadline:
    time.sleep(0.02)
"""


def _env(tmp_path: Path, skew: float) -> dict[str, str]:
    """The environment of a `sheetq` on a host whose clock is ``skew`` seconds off."""
    folder = tmp_path / "skew"
    folder.mkdir(exist_ok=True)
    (folder / "sitecustomize.py").write_text(SITECUSTOMIZE, encoding="utf-8")
    env = dict(os.environ, HOST_CLOCK_SKEW=str(skew))
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(folder), os.environ.get("PYTHONPATH", "")) if p
    )
    return env


def _sheetq(tmp_path: Path, skew: float, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "sheetq", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(tmp_path, skew),
    )


def test_the_simulated_clock_is_off_by_the_skew(tmp_path: Path) -> None:
    """The harness itself: a process with the sitecustomize reads a clock ten minutes ahead,
    and isinstance still holds for datetimes made elsewhere (psycopg's)."""
    probe = (
        "import datetime, time; from datetime import UTC; "
        "d = datetime.datetime.now(UTC) - datetime.datetime.fromtimestamp(0, UTC); "
        "print(round(d.total_seconds() - __import__('os').times().elapsed * 0 - "
        "(time.time() - 600)), isinstance(datetime.datetime.min, datetime.datetime))"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe],
        env=_env(tmp_path, 600),
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert out == ["600", "True"]


@pytest.mark.parametrize(
    ("holder", "other"),
    [(0.0, 600.0), (-600.0, 0.0)],
    ids=["a-host-ahead-finds-a-live-claim", "a-host-behind-claims-for-real"],
)
def test_a_host_whose_clock_is_off_never_takes_a_running_task(
    pg_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, holder: float, other: float
) -> None:
    """A task runs under a claim of a host whose clock is ``holder`` seconds off; a run on a
    host ``other`` seconds off meanwhile recovers nothing (its lease, 1.5 minutes, is
    compared on the server's clock, not a host's ten minutes off), and the task runs once."""
    starts, began, gate = tmp_path / "starts", tmp_path / "began", tmp_path / "gate"
    monkeypatch.setenv("STARTS", str(starts))
    monkeypatch.setenv("BEGAN", str(began))
    monkeypatch.setenv("GATE", str(gate))
    command = handler_script(tmp_path, "gated", HANDLER)
    write_config(
        f'[types.job]\ncommand = {command}\nidempotent = true\nlease = "1m"\ntimeout = "30s"\n'
    )
    enqueued = _sheetq(tmp_path, holder, "enqueue", "job", '{"n": 1}', "--json")
    out, err = enqueued.communicate(timeout=30)
    assert enqueued.returncode == 0, err
    task = json.loads(out)["task_id"]
    running = _sheetq(tmp_path, holder, "process", "--json")
    deadline = time.monotonic() + 20
    while not began.exists():
        if running.poll() is not None or time.monotonic() > deadline:
            raise AssertionError(running.communicate())
        time.sleep(0.02)
    try:
        meanwhile = _sheetq(tmp_path, other, "process", "--json")
        out, err = meanwhile.communicate(timeout=30)
        assert meanwhile.returncode == 0, err
        doc = json.loads(out)
        assert (doc["recovered"], doc["claimed"]) == (0, 0), doc
    finally:
        gate.touch()
    out, err = running.communicate(timeout=30)
    assert running.returncode == 0, err
    assert json.loads(out)["done"] == 1
    assert Counter(starts.read_text().split()) == {task: 1}
    row = PgBook(pg_url).row_of(task)
    assert (row["status"], row["retry_count"]) == ("done", "0")
    events = [e["event"] for e in PgBook(pg_url).log(task)]
    assert events == ["enqueued", "claimed", "done"]


def test_doctor_reports_the_hosts_offset_from_the_server(pg_url: str, tmp_path: Path) -> None:
    """`doctor` says how far this host's clock is from the server's: a plain line when the
    clocks agree, a warning with the fix (NTP) above a second; the exit code is unchanged."""
    assert run_cli(["init"]).code == 0
    agree = _sheetq(tmp_path, 0.0, "doctor", "--json")
    out, _ = agree.communicate(timeout=30)
    lines = {c["check"]: c for c in json.loads(out)["checks"]}
    assert lines["clock"]["ok"] and "warning" not in lines["clock"]["detail"]
    off = _sheetq(tmp_path, 600.0, "doctor", "--json")
    out, err = off.communicate(timeout=30)
    assert off.returncode == agree.returncode, err
    clock = {c["check"]: c for c in json.loads(out)["checks"]}["clock"]
    assert clock["detail"].startswith("warning: this host's clock is 600.")
    assert "ahead of the server's" in clock["detail"] and "NTP" in clock["fix"]
