"""`sheetq process --dry-run` and connectors, on every backend (docs/design.md §13): a
paused connector's due tasks are not in "would claim", and a note says how many wait for
which connector and why, in the same words everywhere."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from tests.cli_helpers import set_now
from tests.conftest import Book, handler_script, run_cli, write_config

ON_POSTGRES = True  # the behavioural suite: also runs on PostgreSQL

OK = "import sys\nsys.stdin.read()\nprint('ok')\n"


def _enqueue(n: int, task_type: str) -> list[str]:
    text = "\n".join(json.dumps({"n": i}) for i in range(n))
    r = run_cli(["enqueue", task_type, "--jsonl", "-", "--json"], input=text)
    assert r.code == 0, r.stderr
    return [x["task_id"] for x in r.json()["results"]]


def test_dry_run_names_a_paused_connectors_waiting_tasks(
    book: Book, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """crm paused by `connector pause --reason`: the dry run would claim the mail task only,
    with the note "2 due task(s) would wait for connector 'crm' (paused until resumed: CRM
    maintenance): ID, ID"; the real run then claims just that task."""
    set_now(monkeypatch, datetime(2026, 1, 5, 9, 0, tzinfo=UTC))
    handler = handler_script(tmp_path, "ok", OK)
    write_config(
        "[connectors.crm]\nconcurrency = 1\n"
        f'[types.lead]\ncommand = {handler}\nconnector = "crm"\n'
        f"[types.mail]\ncommand = {handler}\n"
    )
    assert run_cli(["init", "--no-format"]).code == 0
    lead = _enqueue(2, "lead")
    mail = _enqueue(1, "mail")
    assert run_cli(["connector", "pause", "crm", "--reason", "CRM maintenance"]).code == 0
    r = run_cli(["process", "--dry-run", "--json"])
    assert r.code == 0, r.stderr
    doc: dict[str, Any] = r.json()
    assert [w["task_id"] for w in doc.get("would_claim", [])] == mail
    (note,) = [n for n in doc["notes"] if "would wait" in n]
    assert note.startswith(
        "2 due task(s) would wait for connector 'crm' (paused until resumed: CRM maintenance): "
    )
    assert all(t in note for t in lead)
    real = run_cli(["process", "--json"]).json()
    assert real["claimed"] == 1 and real["done"] == 1
