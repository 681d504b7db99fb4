"""Enqueue at its limits (DESIGN.md §4): encoded derived keys, racing same-key enqueues on the
local backend, `--jsonl` split under Google's 10 MB request cap, SHEETQ_ENQUEUE_TIMEOUT."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import Book, LocalBook, run_cli, run_proc, write_config


def test_values_with_separators_are_two_tasks(book: Book) -> None:
    """{"a":"x:b=y","b":"z"} and {"a":"x","b":"y:b=z"} with key_fields a, b: two keys, both
    enqueued (exit 0), no conflict."""
    write_config('[types.pair]\nkey_fields = ["a", "b"]\n')
    first: dict[str, Any] = {"a": "x:b=y", "b": "z"}
    second: dict[str, Any] = {"a": "x", "b": "y:b=z"}
    one = run_cli(["enqueue", "pair", json.dumps(first), "--json"])
    two = run_cli(["enqueue", "pair", json.dumps(second), "--json"])
    assert (one.code, two.code) == (0, 0), one.stderr + two.stderr
    assert one.json()["outcome"] == two.json()["outcome"] == "enqueued"
    assert one.json()["idempotency_key"] == "pair:a=x%3Ab%3Dy:b=z"
    assert two.json()["idempotency_key"] == "pair:a=x:b=y%3Ab%3Dz"
    assert len(book.records()) == 2
    again = run_cli(["enqueue", "pair", json.dumps(second), "--json"])
    assert again.code == 0 and again.json()["outcome"] == "duplicate"


# --- racing enqueues on the local backend --------------------------------------------------


# Each racer imports sheetq, then waits for the start signal, so all 20 read the keys at
# once (started one by one, the interpreters' start-up would space them out).
_RACER = """
import pathlib, sys, time
from sheetq.cli import app
go = pathlib.Path(sys.argv[1])
while not go.exists():
    time.sleep(0.005)
sys.exit(app.main(sys.argv[2:]))
"""


@pytest.mark.slow
def test_twenty_racing_same_key_enqueues_give_one_task(tmp_path: Path) -> None:
    """20 processes enqueue order_id CONF with different payloads at once on one local file:
    exactly one exits 0 (enqueued), 19 exit 3 (conflict), and Queue holds one row."""
    book = LocalBook(tmp_path / "race.db")
    env = {**os.environ, "SHEETQ_SPREADSHEET": book.spreadsheet}
    assert run_proc(["init"], env=env).code == 0
    go = tmp_path / "go"
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _RACER, str(go), "enqueue", "w", json.dumps(payload)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for payload in ({"order_id": "CONF", "v": n} for n in range(20))
    ]
    time.sleep(1.0)  # let the interpreters load sheetq; then release them together
    go.touch()
    outcomes = [(p.wait(timeout=120), *p.communicate()) for p in procs]
    codes = sorted(code for code, _, _ in outcomes)
    assert codes == [0] + [3] * 19, [(c, o, e) for c, o, e in outcomes]
    rows = book.records()
    assert len(rows) == 1 and rows[0]["idempotency_key"] == "w:order_id=CONF"
    events = sorted(r["event"] for r in book.log())
    assert events == ["conflict"] * 19 + ["enqueued"]
