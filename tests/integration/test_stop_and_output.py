"""What `--json` prints when a run is stopped, and where a Python handler's print() goes
(docs/design.md §5 step 7, §7): stdout carries only the JSON document sheetq writes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import Book, handler_script, run_cli, run_proc, write_config

ON_POSTGRES = True

SLOW = """
import os, pathlib, sys, time
sys.stdin.read()
if os.environ["SHEETQ_TASK_TYPE"] == "slow":
    pathlib.Path(os.environ["MARK"]).write_text(os.environ["SHEETQ_TASK_ID"])
    time.sleep(30)
print("quick one done")
"""


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_an_interrupted_process_still_prints_its_json_document(
    book: Book, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sig: signal.Signals
) -> None:
    """`process --json` stopped while its second handler runs: exit 128 + the signal, and
    stdout is one JSON document of what was done (1 done) with `interrupted` naming the
    signal and the task left to recovery."""
    mark = tmp_path / "mark"
    monkeypatch.setenv("MARK", str(mark))
    script = handler_script(tmp_path, "slow", SLOW)
    write_config(f"[types.quick]\ncommand = {script}\n[types.slow]\ncommand = {script}\n")
    quick = run_cli(["enqueue", "quick", "{}", "--json"]).json()["task_id"]
    slow = run_cli(["enqueue", "slow", "{}", "--json"]).json()["task_id"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "sheetq", "process", "--batch-size", "5", "--json"],
        env=dict(os.environ),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 30
    while not mark.exists():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline
        time.sleep(0.02)
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 128 + sig, err
    doc = json.loads(out)  # the whole of stdout: one document
    assert doc["done"] == 1 and doc["claimed"] == 2, doc
    assert doc["interrupted"] == {
        "signal": sig.name,
        "exit_code": 128 + sig,
        "task_id": slow,
        "message": doc["interrupted"]["message"],
    }, doc
    assert "outcome is unknown" in doc["interrupted"]["message"]
    assert err.strip().startswith("sheetq: interrupted"), err
    assert book.row_of(quick)["result"] == "quick one done"
    assert book.row_of(slow)["status"] == "processing"


CHATTY = """
import sys

def run(task):
    print("hello from the handler", task.payload)
    print("a second line", flush=True)
    sys.stdout.write("and a write\\n")
    return "fine"
"""


def test_a_python_handlers_prints_go_to_stderr(
    book: Book, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Python handler that print()s: `process --json`'s stdout is still exactly one JSON
    document; what the handler printed is on stderr."""
    (Path.cwd() / "chatty.py").write_text(CHATTY, encoding="utf-8")
    write_config('[types.talk]\npython = "chatty:run"\n')
    task = run_cli(["enqueue", "talk", '{"n": 1}', "--json"]).json()["task_id"]
    r = run_cli(["process", "--json"])
    assert r.code == 0, r.stderr
    assert json.loads(r.stdout)["done"] == 1, r.stdout
    assert "hello from the handler {'n': 1}" in r.stderr, r.stderr
    assert "a second line" in r.stderr and "and a write" in r.stderr, r.stderr
    assert book.row_of(task)["result"] == "fine"
    print("the test's own stdout still works")


SPAWNING = """
import os
import subprocess

def run(task):
    subprocess.run(["echo", "from a child program"], check=True)
    os.write(1, b"written to descriptor 1\\n")
    return "spawned"
"""


def test_what_a_python_handlers_child_programs_print_goes_to_stderr(
    book: Book, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Python handler that starts a program, or writes to descriptor 1 itself: a real
    `sheetq process --json` process's stdout is still exactly one JSON document."""
    (Path.cwd() / "spawning.py").write_text(SPAWNING, encoding="utf-8")
    write_config('[types.spawn]\npython = "spawning:run"\n')
    task = run_cli(["enqueue", "spawn", '{"n": 1}', "--json"]).json()["task_id"]
    env = {"PYTHONPATH": os.pathsep.join([str(Path.cwd()), *sys.path])}
    r = run_proc(["process", "--json"], env=env)
    assert r.code == 0, r.stderr
    assert json.loads(r.stdout)["done"] == 1, r.stdout
    assert "from a child program" in r.stderr and "written to descriptor 1" in r.stderr, r
    assert book.row_of(task)["result"] == "spawned"


@pytest.mark.postgres
@pytest.mark.slow
def test_a_python_handlers_prints_go_to_the_workers_stderr(
    pg_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`sheetq worker`: its stdout holds only its closing summary line; the handler's
    prints are on stderr."""
    from tests.conftest import PgBook

    (Path.cwd() / "chatty.py").write_text(CHATTY, encoding="utf-8")
    write_config('[types.talk]\npython = "chatty:run"\n')
    task = run_cli(["enqueue", "talk", '{"n": 2}', "--json"]).json()["task_id"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "sheetq", "worker"],
        env=dict(os.environ),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    book = PgBook(pg_url)
    deadline = time.monotonic() + 30
    while book.row_of(task)["status"] != "done":
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    (line,) = out.splitlines()
    assert line.startswith("sheetq worker: SIGTERM: "), out
    assert "hello from the handler {'n': 2}" in err and "and a write" in err, err
