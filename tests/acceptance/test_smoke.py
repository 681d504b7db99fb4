"""The CLI end to end on a fresh workbook: init, enqueue, process, status."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from tests.conftest import Book, handler_script, run_cli, write_config


def test_enqueue_process_done(book: Book, tmp_path: Path) -> None:
    """A task enqueued once runs once and ends done with the handler's last line as result."""
    cmd = handler_script(
        tmp_path, "ok", "import sys, json\nd = json.load(sys.stdin)\nprint('crm-' + d['lead_id'])\n"
    )
    write_config(f"[types.lead]\ncommand = {cmd}\n")
    r = run_cli(["enqueue", "lead", json.dumps({"lead_id": "L-1"}), "--json"])
    assert r.code == 0, r.stderr
    task_id = r.json()["task_id"]
    r = run_cli(["process", "--json"])
    assert r.code == 0, r.stderr
    doc = r.json()
    assert doc["done"] == 1 and doc["claimed"] == 1
    row = book.row_of(task_id)
    assert row["status"] == "done"
    assert row["result"] == "crm-L-1"
    assert row["lease_owner"] == "" and row["lease_until"] == ""
    events = [e["event"] for e in book.log(task_id)]
    assert events == ["enqueued", "claimed", "done"]
    assert sys.executable
