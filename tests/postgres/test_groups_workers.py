"""Groups across workers (docs/design.md §14): four `sheetq worker` processes on one
PostgreSQL queue never run two tasks of one group at once, and run each group in enqueue
order, checked from the handlers' own start and end timestamps; tasks without a group and
of other groups run side by side."""

from __future__ import annotations

import itertools
import json
import signal
import subprocess
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from pathlib import Path

import psycopg
import pytest

from tests.conftest import run_cli, write_config

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

# Notes "start|end task_id group n time pid" (one short O_APPEND write each: lines never
# interleave), working for the payload's "sleep" seconds between the two.
HANDLER = """
import os, time
def _note(what, task):
    line = f"{what} {task.task_id} {task.payload.get('deal', '-')} {task.payload['n']} "
    line += f"{time.time():.6f} {os.getpid()}\\n"
    fd = os.open(os.environ["STARTS"], os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)

def run(task):
    _note("start", task)
    time.sleep(float(task.payload.get("sleep", 0)))
    _note("end", task)
    return "ok"
"""
GROUPS, PER_GROUP, LOOSE = 12, 8, 40


def _wait_for(check: Callable[[], bool], seconds: float = 120) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(0.1)


def _done(url: str) -> int:
    with psycopg.connect(url) as conn:
        row = conn.execute("SELECT count(*) FROM sheetq_tasks WHERE status = 'done'").fetchone()
    return int(row[0]) if row else 0


def test_four_workers_run_each_group_one_at_a_time_in_enqueue_order(
    pg_url: str,
    handler_module: Callable[[str, str], Path],
    sheetq_proc: Callable[..., subprocess.Popen[str]],
) -> None:
    """12 groups of 8 updates and 40 tasks without a group, 4 workers × 2 slots: every task
    runs once; within each group no handler starts before the previous one ended, and the
    groups' tasks start in enqueue order; groups ran side by side (some two of them
    overlapped), and the work was shared."""
    notes = handler_module("gw", HANDLER)
    write_config(
        '[types.deal]\npython = "gw:run"\ngroup_fields = ["deal"]\n'
        '[types.loose]\npython = "gw:run"\n'
    )
    # each group's updates arrive together, the first of each slow: without groups, four
    # workers would run a deal's later updates beside (and before the end of) its first
    lines = [
        {"deal": g, "n": n, "sleep": 0.2 if n == 0 else 0.02}
        for g in range(GROUPS)
        for n in range(PER_GROUP)
    ]
    r = run_cli(["enqueue", "deal", "--jsonl", "-"], input="\n".join(map(json.dumps, lines)))
    assert r.code == 0, r.stderr
    loose = "\n".join(json.dumps({"n": i, "sleep": 0.03}) for i in range(LOOSE))
    assert run_cli(["enqueue", "loose", "--jsonl", "-"], input=loose).code == 0
    total = GROUPS * PER_GROUP + LOOSE
    workers = [
        sheetq_proc("worker", "--concurrency", "2", "--poll", "0.2s", log=f"err-{i}.txt")
        for i in range(4)
    ]
    _wait_for(lambda: _done(pg_url) == total)
    for proc in workers:
        proc.send_signal(signal.SIGTERM)
    for proc in workers:
        proc.communicate(timeout=60)
        assert proc.returncode == 0
    starts: dict[str, tuple[str, int, float, int]] = {}
    ends: dict[str, float] = {}
    for line in notes.read_text().splitlines():
        what, task, deal, n, at, pid = line.split()
        if what == "start":
            assert task not in starts, f"{task} ran twice"
            starts[task] = (deal, int(n), float(at), int(pid))
        else:
            ends[task] = float(at)
    assert len(starts) == total and set(ends) == set(starts)
    by_group: dict[str, list[tuple[float, float, int]]] = defaultdict(list)
    for task, (deal, n, at, _) in starts.items():
        if deal != "-":
            by_group[deal].append((at, ends[task], n))
    assert len(by_group) == GROUPS
    for deal, runs in by_group.items():
        runs.sort()
        assert [n for _, _, n in runs] == list(range(PER_GROUP)), (deal, runs)
        for (_, end, _), (start, _, _) in itertools.pairwise(runs):
            assert start >= end, f"group {deal}: a task started before the previous ended"
    spans = sorted((min(r[0] for r in v), max(r[1] for r in v)) for v in by_group.values())
    assert any(b[0] < a[1] for a, b in itertools.pairwise(spans)), spans
    pids = Counter(pid for _, _, _, pid in starts.values())
    assert len(pids) >= 2, pids  # the work was shared
