"""One `process` run takes its next batches in the order its last read planned only while no one
else writes (docs/decisions.md "A run's next batches"): a task that another program
enqueues mid-run with a higher priority runs in the very next batch, on every backend."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from tests.cli_helpers import set_now
from tests.conftest import Book, run_cli, write_config

ON_POSTGRES = True
NOW = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
HANDLER = """
from pathlib import Path

import pytest

import sheetq

def run(task):
    n = task.payload["n"]
    with Path("ran.txt").open("a") as ran:
        ran.write(f"{n}\\n")
    if n == "0":  # another program: the Python API opens its own connection
        sheetq.enqueue("urgent", {"n": "u"})
    return n
"""
CONFIG = """
[types.job]
python = "ahead_handler:run"
[types.urgent]
python = "ahead_handler:run"
priority = 10
"""


def test_a_task_enqueued_mid_run_with_a_higher_priority_runs_next(
    book: Book, monkeypatch: pytest.MonkeyPatch
) -> None:
    Path("ahead_handler.py").write_text(HANDLER, encoding="utf-8")
    write_config(CONFIG)
    set_now(monkeypatch, NOW)
    lines = "".join(f'{{"n": "{n}"}}\n' for n in range(12))
    r = run_cli(["enqueue", "job", "--jsonl"], input=lines)
    assert r.code == 0, r.stderr
    r = run_cli(["process", "--until-empty", "--batch-size", "3", "--json"])
    assert r.code == 0, r.stderr
    assert r.json()["done"] == 13, r.json()
    ran = Path("ran.txt").read_text(encoding="utf-8").split()
    assert sorted(ran) == sorted([*map(str, range(12)), "u"])
    # batch 1 runs 0, 1, 2 (0 enqueues u); u runs before the rest, at the latest first in batch 2
    assert ran.index("u") <= 3, ran
