"""The Connectors worksheet on Google within the request budgets of docs/design.md §6: its
rows ride in the run's first scan and in its last write, and in `status`'s one read."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import make_google, run_cli, write_config

pytestmark = pytest.mark.google


def test_connectors_cost_no_request_of_their_own(
    sheets_emulator: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With a connector configured (rate limit, breaker): one batch ≤ 6 requests, two
    batches ≤ 9, `status` ≤ 2, a run with nothing to claim ≤ 2; the breaker the run opens
    is in the Connectors row afterwards."""
    book = make_google(sheets_emulator, monkeypatch)
    (Path.cwd() / "gconn_handlers.py").write_text(
        "import sheetq\n"
        "def ok(task):\n    return 'ok'\n"
        "def down(task):\n    raise sheetq.RetryTask('CRM answered 503')\n",
        encoding="utf-8",
    )
    write_config(
        '[connectors.crm]\nrate_limit = "1000/s"\nbreaker_threshold = 2\n'
        '[types.job]\npython = "gconn_handlers:ok"\nconnector = "crm"\n'
        '[types.down]\npython = "gconn_handlers:down"\nbreaker_threshold = 2\n'
    )
    assert run_cli(["init"]).code == 0
    emu = book.emulator
    lines = "\n".join(json.dumps({"n": i}) for i in range(30))
    assert run_cli(["enqueue", "job", "--jsonl"], input=lines).code == 0
    emu.reset_counts()
    doc = run_cli(["process", "--batch-size", "10", "--json"]).json()
    assert doc["done"] == 10
    assert emu.count() <= 6, [r.op for r in emu.requests]
    emu.reset_counts()
    doc = run_cli(["process", "--batch-size", "10", "--max-batches", "2", "--json"]).json()
    assert doc["done"] == 20
    assert emu.count() <= 3 * 2 + 3, [r.op for r in emu.requests]
    assert run_cli(["enqueue", "down", '{"n": 1}']).code == 0
    assert run_cli(["enqueue", "down", '{"n": 2}']).code == 0
    doc = run_cli(["process", "--json"]).json()
    assert doc["retry"] == 2
    (row,) = [r for r in book.records("Connectors") if r["name"] == "down"]
    assert row["state"] == "open"
    emu.reset_counts()
    status = run_cli(["status", "--json"]).json()
    assert [c["name"] for c in status["connectors"]] == ["down"]
    assert emu.count() <= 2, [r.op for r in emu.requests]
    emu.reset_counts()
    assert run_cli(["process", "--json"]).json()["claimed"] == 0
    assert emu.count() <= 2, [r.op for r in emu.requests]
