"""Several `sheetq worker` processes and `sheetq process` runs on one PostgreSQL queue
(docs/design.md §11): every task runs exactly once however many share it, and a SIGKILLed
worker's running tasks are recovered by the others after their lease, per `on_unknown`,
while no other task runs twice."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import psycopg
import pytest

from tests.cli_helpers import assert_log_matches_queue
from tests.conftest import PgBook, run_cli, write_config

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

# Notes "task_id pid" when a task starts (one short O_APPEND write: lines never interleave),
# then works for the payload's "sleep" seconds.
HANDLER = """
import os, time
def run(task):
    fd = os.open(os.environ["STARTS"], os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        os.write(fd, f"{task.task_id} {os.getpid()}\\n".encode())
    finally:
        os.close(fd)
    time.sleep(float(task.payload.get("sleep", 0)))
    return "ok"
"""


@pytest.fixture
def starts(handler_module: Callable[[str, str], Path]) -> Path:
    return handler_module("wt", HANDLER)


def _starts(path: Path) -> list[tuple[str, int]]:
    if not path.exists():
        return []
    return [(t, int(p)) for t, p in (line.split() for line in path.read_text().splitlines())]


def _wait_for(check: Callable[[], bool], seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(0.05)


def _enqueue(lines: list[dict[str, object]], task_type: str) -> list[str]:
    text = "\n".join(json.dumps(line) for line in lines)
    r = run_cli(["enqueue", task_type, "--jsonl", "-", "--json"], input=text)
    assert r.code == 0, r.stderr
    return [x["task_id"] for x in r.json()["results"]]


def _statuses(url: str) -> Counter[str]:
    with psycopg.connect(url) as conn:
        return Counter(
            {s: n for s, n in conn.execute("SELECT status, count(*) FROM sheetq_tasks GROUP BY 1")}
        )


def _events(url: str) -> dict[str, Counter[str]]:
    """Per task, how many log rows of each event."""
    out: dict[str, Counter[str]] = {}
    with psycopg.connect(url) as conn:
        for task, event, n in conn.execute(
            "SELECT task_id, event, count(*) FROM sheetq_log GROUP BY 1, 2"
        ):
            out.setdefault(task, Counter())[event] = n
    return out


def test_three_workers_and_a_cron_run_run_every_task_exactly_once(
    pg_url: str, starts: Path, sheetq_proc: Callable[..., subprocess.Popen[str]]
) -> None:
    """3 workers (-c 2) and a `process --until-empty` started together over 1,500 tasks:
    every task id is run exactly once, all are done, each has one claimed and one done log
    row, and every process took part."""
    write_config('[types.job]\npython = "wt:run"\n')
    ids = _enqueue([{"n": i, "sleep": 0.01} for i in range(1500)], "job")
    workers = [
        sheetq_proc("worker", "--concurrency", "2", "--poll", "0.2s", log=f"err-{i}.txt")
        for i in range(3)
    ]
    cron = sheetq_proc("process", "--until-empty", "--batch-size", "20", "--json", log="err-3.txt")
    _wait_for(lambda: _statuses(pg_url) == Counter({"done": 1500}), seconds=240)
    cron_doc = json.loads(cron.communicate(timeout=60)[0])
    for proc in workers:
        proc.send_signal(signal.SIGTERM)
    outs = [proc.communicate(timeout=60)[0] for proc in workers]
    assert [p.returncode for p in (*workers, cron)] == [0, 0, 0, 0]
    ran = _starts(starts)
    counts = Counter(task for task, _ in ran)
    assert set(counts) == set(ids) and set(counts.values()) == {1}
    pids = Counter(pid for _, pid in ran)
    assert set(pids) == {p.pid for p in (*workers, cron)}, pids  # all four took part
    assert cron_doc["done"] == pids[cron.pid]
    worker_done = sum(int(re.search(r"(\d+) done", out)[1]) for out in outs)  # type: ignore[index]
    assert worker_done == 1500 - cron_doc["done"]
    events = _events(pg_url)
    for task in ids:
        assert events[task] == Counter(enqueued=1, claimed=1, done=1), (task, events[task])


def test_sigkill_of_one_of_three_workers_recovers_only_its_running_tasks(
    pg_url: str, tmp_path: Path, starts: Path, sheetq_proc: Callable[..., subprocess.Popen[str]]
) -> None:
    """SIGKILL one of three busy workers: the tasks it was running stay `processing` under
    its lease; when the lease ends, the two others recover each once, per `on_unknown` (an
    idempotent type runs again, another fails as `unknown` for a person); every other task
    runs exactly once, none is lost, and the log agrees with the queue."""
    write_config(
        '[defaults]\nlease = "1s"\ntimeout = "2s"\nbackoff = ["1s"]\njitter = 0\n'
        '[types.safe]\npython = "wt:run"\nidempotent = true\n'
        '[types.risky]\npython = "wt:run"\n'
    )
    ids: list[str] = []
    for chunk in range(0, 600, 10):  # both types, interleaved ten by ten, oldest first
        kind = "safe" if chunk % 20 else "risky"
        ids += _enqueue([{"n": chunk + i, "sleep": 0.03} for i in range(10)], kind)
    workers = [
        sheetq_proc("-v", "worker", "--concurrency", "2", "--poll", "0.2s", log=f"err-{i}.txt")
        for i in range(3)
    ]
    victim = workers[0]
    _wait_for(lambda: "handler(s) on queue" in (tmp_path / "err-0.txt").read_text())
    ready = re.search(r"worker (\S+): up to", (tmp_path / "err-0.txt").read_text())
    assert ready, "the victim logged its run id"
    victim_run = ready[1]

    def held_now() -> tuple[dict[str, str], int]:
        """The tasks the victim runs now (id: type), and how many wait."""
        with psycopg.connect(pg_url) as conn:
            running = {
                task: task_type
                for task, task_type in conn.execute(
                    "SELECT task_id, type FROM sheetq_tasks WHERE lease_owner = %s"
                    " AND status = 'processing'",
                    (victim_run,),
                )
            }
            (waiting,) = conn.execute(
                "SELECT count(*) FROM sheetq_tasks WHERE status = 'pending'"
            ).fetchone() or (0,)
        return running, waiting

    _wait_for(lambda: sum(1 for _, pid in _starts(starts) if pid == victim.pid) >= 20)
    # best effort: kill it while it runs one of each type; at the latest while it runs
    # something with a third of the queue still waiting (a fast server drains it in seconds)
    deadline = time.monotonic() + 5
    while True:
        running, waiting = held_now()
        if len(set(running.values())) >= 2:
            break
        if running and (waiting < 200 or time.monotonic() > deadline):
            break
        assert waiting, "the queue ran empty before the victim was seen running a task"
        assert time.monotonic() < deadline + 55, "the victim never ran a task"
        time.sleep(0.005)
    victim.kill()
    victim.communicate(timeout=30)
    # a worker claims a task only for a free handler slot and hands it over at once; a kill
    # between the claim's commit and the handler's first line leaves a held task unstarted
    victim_started = {t for t, pid in _starts(starts) if pid == victim.pid}

    def settled() -> bool:
        s = _statuses(pg_url)
        return s["done"] + s["failed"] == len(ids)

    _wait_for(settled, seconds=120)
    # what the victim held when killed, from the log once all is settled: its last row for
    # the task is its claim (read right after the kill, a claim whose commit the server was
    # still finishing for the dead victim could be missed)
    with psycopg.connect(pg_url) as conn:
        held = dict(
            conn.execute(
                "SELECT t.task_id, t.type FROM (SELECT DISTINCT ON (task_id) task_id, event"
                " FROM sheetq_log WHERE run_id = %s ORDER BY task_id, id DESC) AS last"
                " JOIN sheetq_tasks t USING (task_id) WHERE last.event = 'claimed'",
                (victim_run,),
            ).fetchall()
        )
    assert held, "the victim was running tasks when killed"
    for proc in workers[1:]:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=60)
        assert proc.returncode == 0
    counts = Counter(task for task, _ in _starts(starts))
    never_ran = {t for t, kind in held.items() if kind == "risky" and t not in victim_started}
    assert set(counts) == set(ids) - never_ran  # none lost
    book = PgBook(pg_url)
    rows = {row["task_id"]: row for row in book.records()}
    events = _events(pg_url)
    for task in ids:
        row = rows[task]
        if task not in held:
            assert counts[task] == 1 and row["status"] == "done", (task, row)
            assert events[task]["recovered"] == 0
            continue
        assert events[task]["recovered"] == 1, events[task]
        by_victim = int(task in victim_started)
        if held[task] == "safe":  # on_unknown = retry: runs again, the lost one counted
            assert counts[task] == by_victim + 1
            assert (row["status"], row["retry_count"]) == ("done", "1")
        else:  # on_unknown = fail: a person decides
            assert counts[task] == by_victim
            assert (row["status"], row["error_class"], row["retry_count"]) == (
                "failed",
                "unknown",
                "1",
            )
    assert_log_matches_queue(book)
