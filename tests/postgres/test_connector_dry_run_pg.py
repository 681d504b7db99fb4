"""`sheetq process --dry-run` on PostgreSQL by the claim's connector rules (docs/design.md
§13): tasks a paused connector, a taken slot or a rate limit's next start would hold back
are not in "would claim", and a note says how many wait for which connector and why."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest

from tests.cli_helpers import set_now
from tests.conftest import handler_script, run_cli, write_config

pytestmark = [pytest.mark.postgres]

OK = "import sys\nsys.stdin.read()\nprint('ok')\n"
NOW = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)


def _enqueue(n: int, task_type: str) -> list[str]:
    text = "\n".join(json.dumps({"n": i}) for i in range(n))
    r = run_cli(["enqueue", task_type, "--jsonl", "-", "--json"], input=text)
    assert r.code == 0, r.stderr
    return [x["task_id"] for x in r.json()["results"]]


def _dry(*args: str) -> dict[str, Any]:
    r = run_cli(["process", "--dry-run", "--json", *args])
    assert r.code == 0, r.stderr
    doc: dict[str, Any] = r.json()
    return doc


def _would(doc: dict[str, Any]) -> list[str]:
    return [w["task_id"] for w in doc.get("would_claim", [])]


def test_dry_run_leaves_out_a_paused_connectors_tasks_and_says_why(
    pg_url: str, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """crm paused: the dry run would claim the mail task only and notes that 2 lead tasks
    wait for crm (paused, with the reason); the real run claims exactly that task."""
    set_now(monkeypatch, NOW)
    handler = handler_script(tmp_path, "ok", OK)
    write_config(
        '[connectors.crm]\nrate_limit = "1/min"\n'
        f'[types.lead]\ncommand = {handler}\nconnector = "crm"\n'
        f"[types.mail]\ncommand = {handler}\n"
    )
    lead = _enqueue(2, "lead")
    mail = _enqueue(1, "mail")
    assert run_cli(["connector", "pause", "crm", "--reason", "CRM maintenance"]).code == 0
    doc = _dry()
    assert _would(doc) == mail
    (note,) = [n for n in doc["notes"] if "would wait" in n]
    assert "2 due task(s) would wait for connector 'crm'" in note
    assert "paused until resumed: CRM maintenance" in note
    assert all(t in note for t in lead)
    real = run_cli(["process", "--json"]).json()
    assert real["claimed"] == 1 and real["done"] == 1


def test_dry_run_takes_one_start_of_a_rate_limit_then_none_until_its_next_start(
    pg_url: str, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """rate_limit = "1/min": the dry run would claim one of three lead tasks (the claim
    takes one start) and notes the two others; after a real start, none until the next
    start, which the note names."""
    set_now(monkeypatch, NOW)
    handler = handler_script(tmp_path, "ok", OK)
    write_config(
        '[connectors.crm]\nrate_limit = "1/min"\n'
        f'[types.lead]\ncommand = {handler}\nconnector = "crm"\n'
    )
    lead = _enqueue(3, "lead")
    doc = _dry()
    assert _would(doc) == lead[:1]
    assert any("2 due task(s) would wait for connector 'crm'" in n for n in doc["notes"])
    r = run_cli(["process", "--batch-size", "1", "--max-batches", "1", "--json"])
    assert r.code == 0 and r.json()["done"] == 1, r.stderr
    doc = _dry()
    assert _would(doc) == []
    (note,) = [n for n in doc["notes"] if "would wait" in n]
    assert "its rate limit's next start is at 2026-01-05T09:01:00Z" in note
