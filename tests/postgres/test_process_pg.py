"""`sheetq process` on PostgreSQL (docs/design.md §11): claims with SKIP LOCKED, per-task settle
fenced by the lease, recovery once, concurrent runs that never share a task."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg
import pytest

from tests.cli_helpers import assert_log_matches_queue, enqueue_task, set_now
from tests.conftest import PgBook, handler_script, run_cli, write_config

pytestmark = pytest.mark.postgres

NOW = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
VERDICT = """
import json, sys
task = json.load(sys.stdin)
print(json.dumps(task["verdict"]))
"""


def test_outcomes_commit_with_their_log_rows(
    pg_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """done / retry / failed / skipped land per task, each with a log row that agrees."""
    set_now(monkeypatch, NOW)
    write_config(f"[types.job]\ncommand = {handler_script(tmp_path, 'v', VERDICT)}\n")
    verdicts = {
        "done": {"status": "done", "result": "crm-1"},
        "retry": {"status": "retry", "error": "busy", "retry_after": 600},
        "failed": {"status": "failed", "error": "bad data"},
        "skipped": {"status": "skipped", "error": "nothing to do"},
    }
    ids = {name: enqueue_task({"verdict": v}) for name, v in verdicts.items()}
    r = run_cli(["process", "--batch-size", "10", "--json"])
    assert r.code == 0, r.stderr
    doc = r.json()
    assert (doc["claimed"], doc["done"], doc["retry"], doc["failed"], doc["skipped"]) == (
        4,
        1,
        1,
        1,
        1,
    )
    assert doc["batches"] == 1 and doc["alerts_owed"] == 1
    book = PgBook(pg_url)
    for name, task in ids.items():
        row = book.row_of(task)
        assert (row["status"], row["lease_owner"], row["lease_until"]) == (name, "", "")
        assert [e["event"] for e in book.log(task)] == ["enqueued", "claimed", name]
    assert book.row_of(ids["done"])["result"] == "crm-1"
    assert book.row_of(ids["retry"])["next_retry_at"] == "2026-01-05T09:10:00Z"
    assert_log_matches_queue(book)


def test_expired_lease_is_recovered_once(
    pg_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A processing row whose lease ran out (a dead run) is recovered by one run, once."""
    set_now(monkeypatch, NOW)
    ok = handler_script(tmp_path, "ok", "import sys\nsys.stdin.read()\n")
    write_config(f"[types.job]\ncommand = {ok}\nidempotent = true\n")
    task = enqueue_task({"n": 1})
    with psycopg.connect(pg_url) as conn:
        conn.execute(
            "UPDATE sheetq_tasks SET status = 'processing', lease_owner = 'run_dead',"
            " lease_until = %s WHERE task_id = %s",
            (NOW + timedelta(minutes=10), task),
        )
    assert run_cli(["process", "--json"]).json()["recovered"] == 0  # lease still good
    set_now(monkeypatch, NOW + timedelta(minutes=11))
    first = run_cli(["process", "--json"]).json()
    second = run_cli(["process", "--json"]).json()
    assert (first["recovered"], second["recovered"]) == (1, 0)
    book = PgBook(pg_url)
    row = book.row_of(task)
    assert (row["status"], row["error_class"], row["retry_count"]) == ("retry", "unknown", "1")
    assert [e["event"] for e in book.log(task)].count("recovered") == 1
    assert_log_matches_queue(book)


def test_late_outcome_after_recovery_is_refused_and_logged(
    pg_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A handler outliving its lease while another run recovers the task: its outcome is
    refused, logged with the row's current status, and never written over the newer state."""
    set_now(monkeypatch, NOW)
    later = (NOW + timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    # the handler itself starts a second run an hour later, which finds the lease expired
    slow = handler_script(
        tmp_path,
        "slow",
        "import os, subprocess, sys\nsys.stdin.read()\n"
        f"env = dict(os.environ, SHEETQ_NOW={later!r})\n"
        "subprocess.run([sys.executable, '-m', 'sheetq', 'process', '-q'], env=env, check=True)\n"
        "print('crm-1')\n",
    )
    given = '{ SHEETQ_DATABASE_URL = "${SHEETQ_DATABASE_URL}" }'  # not passed on unless given
    write_config(
        f"[types.job]\ncommand = {slow}\nidempotent = true\ntimeout = '60s'\nenv = {given}\n"
    )
    task = enqueue_task({"n": 1})
    r = run_cli(["process", "--json"])
    assert r.code == 0, r.stderr
    assert "late outcome(s) refused" in r.stderr
    book = PgBook(pg_url)
    row = book.row_of(task)
    assert (row["status"], row["error_class"], row["result"]) == ("retry", "unknown", "")
    events = book.log(task)
    # the refusal has an event of its own: the history never reads `done` for this task
    assert [e["event"] for e in events] == ["enqueued", "claimed", "recovered", "outcome_refused"]
    refused = events[-1]
    assert (refused["status"], refused["retry_count"]) == ("retry", "1")
    assert refused["message"].startswith("late outcome refused")
    assert_log_matches_queue(book)


@pytest.mark.slow
def test_two_runs_at_once_claim_each_task_once(pg_url: str, tmp_path: Path) -> None:
    """Two `sheetq process --until-empty` at once over 200 tasks: each runs exactly once."""
    ran = tmp_path / "ran.txt"
    Path("h200.py").write_text(
        "import os\n"
        "def run(task):\n"
        f"    with open({str(ran)!r}, 'a') as f:\n"
        "        f.write(task.task_id + '\\n')\n",
        encoding="utf-8",
    )
    write_config('[types.job]\npython = "h200:run"\n')
    lines = "\n".join(json.dumps({"n": i}) for i in range(200))
    assert run_cli(["enqueue", "job", "--jsonl", "-"], input=lines).code == 0
    cmd = [sys.executable, "-m", "sheetq", "process", "--until-empty", "--json"]
    procs = [
        subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, env=dict(os.environ))
        for _ in range(2)
    ]
    docs = [json.loads(p.communicate(timeout=120)[0]) for p in procs]
    assert all(p.returncode == 0 for p in procs)
    counts = Counter(ran.read_text().split())
    assert len(counts) == 200 and set(counts.values()) == {1}
    assert sum(d["done"] for d in docs) == 200
    assert all(d["done"] > 0 for d in docs)  # both runs took part
    book = PgBook(pg_url)
    assert {r["status"] for r in book.records()} == {"done"}


@pytest.mark.slow
def test_sigterm_ends_the_running_tasks_lease_now(
    pg_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SIGTERM mid-task: exit 143, the task's lease ends now, the next run recovers it at once."""
    set_now(monkeypatch, NOW)
    began = tmp_path / "began"
    slow = handler_script(
        tmp_path,
        "slow",
        f"import pathlib, sys, time\nsys.stdin.read()\npathlib.Path({str(began)!r}).touch()\n"
        "time.sleep(30)\n",
    )
    write_config(f"[types.job]\ncommand = {slow}\nidempotent = true\n")
    task = enqueue_task({"n": 1})
    proc = subprocess.Popen(
        [sys.executable, "-m", "sheetq", "process"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=dict(os.environ),
    )
    deadline = datetime.now(UTC) + timedelta(seconds=20)
    while not began.exists():
        assert datetime.now(UTC) < deadline and proc.poll() is None
        time.sleep(0.02)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=20)
    assert proc.returncode == 143, err
    assert task in err and "outcome is unknown" in err
    row = PgBook(pg_url).row_of(task)
    assert (row["status"], row["lease_until"]) == ("processing", "2026-01-05T09:00:00Z")
    doc = run_cli(["process", "--json"]).json()  # same instant: the lease has ended
    assert doc["recovered"] == 1
    assert PgBook(pg_url).row_of(task)["status"] == "retry"


@pytest.mark.slow
def test_a_lost_connection_loses_no_finished_outcome(pg_url: str, tmp_path: Path) -> None:
    """pg_terminate_backend of the run's connection while a 4 s handler runs: the run
    reconnects and writes the outcome it holds (still fenced by its lease): exit 0, the task
    `done` once, its history `enqueued, claimed, done`."""
    began = tmp_path / "began"
    slow = handler_script(
        tmp_path,
        "slow",
        f"import pathlib, sys, time\nsys.stdin.read()\npathlib.Path({str(began)!r}).touch()\n"
        "time.sleep(4)\nprint('crm-9')\n",
    )
    write_config(f"[types.job]\ncommand = {slow}\n")
    task = enqueue_task({"n": 1})
    proc = subprocess.Popen(
        [sys.executable, "-m", "sheetq", "-v", "process", "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=dict(os.environ),
    )
    deadline = time.monotonic() + 20
    while not began.exists():
        assert time.monotonic() < deadline and proc.poll() is None
        time.sleep(0.02)
    with psycopg.connect(pg_url, autocommit=True) as conn:
        killed = conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE application_name = 'sheetq' AND pid <> pg_backend_pid()"
        ).fetchall()
    assert killed, "the run's connection was there to be cut"
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert "lost the PostgreSQL connection" in err
    assert json.loads(out)["done"] == 1
    book = PgBook(pg_url)
    row = book.row_of(task)
    assert (row["status"], row["result"], row["lease_owner"]) == ("done", "crm-9", "")
    assert [e["event"] for e in book.log(task)] == ["enqueued", "claimed", "done"]
