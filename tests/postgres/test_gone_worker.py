"""A gone worker is named (docs/design.md §11): a worker (or a `sheetq process` run) killed
with kill -9 mid-handler leaves a live claim, and PostgreSQL knows its session is gone:
`status`, `show` and `requeue` say "processing under worker W on host H, whose session is
gone" and when it is recovered, while recovery itself still waits for the lease. Through
the CLI on a real server."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import run_cli, write_config

pytestmark = pytest.mark.postgres

HANDLER = """
import os, time
def run(task):
    with open(os.environ["STARTS"], "a") as f:
        f.write(task.task_id + "\\n")
    while os.path.exists(os.environ["BLOCK"]):
        time.sleep(0.05)
    return "ok"
"""


def _wait_for(check: Callable[[], bool], seconds: float = 20) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(0.05)


def _gone_groups() -> list[dict[str, object]]:
    r = run_cli(["status", "--json"])
    assert r.code == 0, r.stderr
    return list(r.json()["held_by_gone_runs"])


@pytest.mark.slow
@pytest.mark.parametrize(
    ("command", "kind", "name"), [("worker", "worker", "worker"), ("process", "process", "run")]
)
def test_killed_run_is_named_by_status_show_and_requeue(
    command: str,
    kind: str,
    name: str,
    pg_url: str,
    tmp_path: Path,
    handler_module: Callable[[str, str], Path],
    sheetq_proc: Callable[..., subprocess.Popen[str]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    starts = handler_module("wh", HANDLER)
    block = tmp_path / "block"
    block.touch()
    monkeypatch.setenv("BLOCK", str(block))
    write_config('[types.job]\npython = "wh:run"\n')
    r = run_cli(["enqueue", "job", json.dumps({"n": 1}), "--json"])
    task = r.json()["task_id"]
    worker = sheetq_proc(command, log="run.log")
    _wait_for(lambda: starts.exists() and task in starts.read_text())
    assert _gone_groups() == []  # alive: its claim is simply processing

    worker.kill()  # kill -9 mid-handler
    worker.communicate(timeout=20)
    block.unlink()
    _wait_for(lambda: bool(_gone_groups()))  # the server notices the session ended
    (group,) = _gone_groups()
    assert str(group["run_id"]).startswith("worker_" if kind == "worker" else "run_")
    assert (group["count"], group["host"], group["pid"], group["kind"]) == (
        1,
        socket.gethostname(),
        worker.pid,
        kind,
    )
    assert group["lease_expired"] is False and group["on_unknown"] == {"job": "fail"}
    text = run_cli(["status"]).stdout
    assert (
        f"1 processing under {name} {group['run_id']} on host {socket.gethostname()} "
        f"(pid {worker.pid}), whose session is gone" in " ".join(text.split())
    )

    shown = run_cli(["show", task, "--json"])
    assert shown.code == 0, shown.stderr
    held = str(shown.json()["held"])
    assert held.startswith(f"processing under {kind} {group['run_id']} on host ")
    assert "whose session is gone; recovered per on_unknown (fail) at " in held
    assert "whose session is gone" in run_cli(["show", task]).stderr

    refused = run_cli(["requeue", "--task", task, "--status", "processing"])
    assert refused.code == 2
    assert f"{kind} {group['run_id']} on host {socket.gethostname()}" in refused.stderr
    assert "is gone (its database session ended), but its lease holds until" in refused.stderr
    assert "then a run recovers it per on_unknown (fail), and it can be requeued" in (
        " ".join(refused.stderr.split())
    )

    # recovery still waits for the lease: a run now leaves the task alone
    doc = run_cli(["process", "--json"]).json()
    assert doc["recovered"] == 0
    assert run_cli(["show", task, "--json"]).json()["rows"][0]["status"] == "processing"
    assert os.path.exists(starts)
