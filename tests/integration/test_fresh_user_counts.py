"""What a fresh user saw disagree (docs/connectors.md, docs/order.md): one connector's
waiting count the same in `status`, `connector list` and `process --dry-run`; a grouped
type refusing a payload without its group field; the Connectors worksheet's typos and
no-op commands said plainly; `status`'s due-by-priority line without blocked tasks."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from tests.cli_helpers import enqueue_task, set_now
from tests.conftest import Book, handler_script, run_cli, write_config
from tests.sheet_only import sheet_only

ON_POSTGRES = True  # the behavioural suite: also runs on PostgreSQL

NOW = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
EXITS = """
import os, sys
sys.stdin.read()
sys.exit(int(os.environ.get("EXIT", "0")))
"""


def _setup(tmp_path: Path) -> None:
    handler = handler_script(tmp_path, "h", EXITS)
    write_config(
        "[connectors.crm]\nbreaker_threshold = 10\n"
        f'[types.lead]\ncommand = {handler}\nconnector = "crm"\nbackoff = ["1m"]\njitter = 0\n'
        f'[types.deal]\ncommand = {handler}\ngroup_fields = ["deal_id"]\n'
        "priority = 5\n"
        "group_blocks_on_failure = true\nmax_attempts = 1\n"
    )
    r = run_cli(["init", "--no-format"])
    assert r.code == 0, r.stderr


def test_status_connector_list_and_dry_run_count_one_connectors_waiting_alike(
    book: Book, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """2 pending and 2 due retries of a paused connector's type: `connector list`,
    `status` (text and --json) and `process --dry-run` all say 4 wait."""
    _setup(tmp_path)
    set_now(monkeypatch, NOW)
    monkeypatch.setenv("EXIT", "75")
    for i in range(2):
        enqueue_task({"n": i}, "lead")
    doc = run_cli(["process", "--json"]).json()
    assert doc["retry"] == 2
    monkeypatch.setenv("EXIT", "0")
    for i in range(2, 4):
        enqueue_task({"n": i}, "lead")
    set_now(monkeypatch, datetime(2026, 1, 5, 9, 30, tzinfo=UTC))  # the retries are due
    assert run_cli(["connector", "pause", "crm"]).code == 0
    listed = run_cli(["connector", "list", "--json"]).json()["connectors"]
    assert [c["waiting"] for c in listed if c["name"] == "crm"] == [4]
    status = run_cli(["status", "--json"]).json()
    assert [c["waiting"] for c in status["connectors"] if c["name"] == "crm"] == [4]
    assert "0 running, 4 waiting" in run_cli(["status"]).stdout
    dry = run_cli(["process", "--dry-run"])
    assert dry.code == 0, dry.stderr
    assert "4 due task(s) would wait for connector 'crm'" in dry.stdout + dry.stderr


@pytest.mark.parametrize("payload", ['{"amount": 5}', '{"deal_id": null, "amount": 5}'])
def test_a_grouped_types_payload_without_its_group_field_is_refused(
    book: Book, tmp_path: Path, payload: str
) -> None:
    """group_fields = ["deal_id"]: a payload without deal_id (or null) is refused in one line
    naming the field and the type, nothing written; `--group G` still enqueues it."""
    _setup(tmp_path)
    r = run_cli(["enqueue", "deal", payload])
    assert r.code == 2, (r.stdout, r.stderr)
    (line,) = r.stderr.strip().splitlines()
    assert "'deal_id'" in line and "'deal'" in line
    assert book.records() == [] and book.log() == []
    r = run_cli(["enqueue", "deal", payload, "--group", "deal_id=7", "--json"])
    assert r.code == 0, r.stderr
    assert book.row_of(r.json()["task_id"])["group"] == "deal_id=7"


def test_a_jsonl_line_without_the_group_field_is_named_and_nothing_is_written(
    book: Book, tmp_path: Path
) -> None:
    _setup(tmp_path)
    lines = '{"deal_id": 1}\n{"amount": 2}\n'
    r = run_cli(["enqueue", "deal", "--jsonl"], input=lines)
    assert r.code == 2, (r.stdout, r.stderr)
    (line,) = r.stderr.strip().splitlines()
    assert "line 2" in line and "'deal_id'" in line and "'deal'" in line
    assert book.records() == []


def test_an_empty_group_field_name_is_refused_at_load(book: Book, tmp_path: Path) -> None:
    handler = handler_script(tmp_path, "h", EXITS)
    write_config(f'[types.deal]\ncommand = {handler}\ngroup_fields = [""]\n')
    r = run_cli(["enqueue", "deal", '{"deal_id": 1}'])
    assert r.code == 2, (r.stdout, r.stderr)
    assert "group_fields: an empty field name" in r.stderr
    assert book.records() == []


def _connector_log(book: Book, name: str) -> list[str]:
    return [r["event"] for r in book.log() if r["task_id"] == "" and r["type"] == name]


def test_an_unknown_state_typed_into_the_connectors_sheet_is_named_by_process_and_status(
    book: Book, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A manager types `stopped`: `process` and `status` each print one note naming the row
    and the value, and that sheetq keeps the previous state (closed: the task runs)."""
    sheet_only(book, "a person typing into the Connectors worksheet")
    _setup(tmp_path)
    set_now(monkeypatch, NOW)
    task = enqueue_task({"n": 1}, "lead")
    number = 2 + [r["name"] for r in book.records("Connectors")].index("crm")
    book.set_cell("Connectors", number, "state", "stopped")
    want = f"'Connectors' row {number} (crm): state 'stopped' is not one sheetq knows"
    status = run_cli(["status"])
    assert [x for x in status.stderr.splitlines() if want in x] != []
    assert "keeps its previous state (closed)" in status.stderr
    assert want in run_cli(["status", "--json"]).stderr
    r = run_cli(["process", "--json"])
    assert r.code == 0, r.stderr
    assert want in r.stderr and "keeps its previous state (closed)" in r.stderr
    assert book.row_of(task)["status"] == "done"


@pytest.mark.parametrize("reason", ["CRM\nmaintenance", "CRM\x1b[31m"])
def test_a_pause_reason_with_a_control_character_is_refused(
    book: Book, tmp_path: Path, reason: str
) -> None:
    _setup(tmp_path)
    r = run_cli(["connector", "pause", "crm", "--reason", reason])
    assert r.code == 2, (r.stdout, r.stderr)
    (line,) = r.stderr.strip().splitlines()
    assert "--reason: contains the control character" in line
    assert _connector_log(book, "crm") == []
    listed = run_cli(["connector", "list", "--json"]).json()["connectors"]
    assert [c["state"] for c in listed if c["name"] == "crm"] == ["closed"]


def test_resuming_a_closed_connector_says_so_and_logs_nothing(book: Book, tmp_path: Path) -> None:
    _setup(tmp_path)
    r = run_cli(["connector", "resume", "crm"])
    assert r.code == 0, r.stderr
    assert "connector crm was already closed" in r.stdout
    assert _connector_log(book, "crm") == []
    assert run_cli(["connector", "pause", "crm"]).code == 0
    assert run_cli(["connector", "resume", "crm"]).code == 0
    assert run_cli(["connector", "resume", "crm"]).code == 0
    assert _connector_log(book, "crm") == ["paused", "resumed"]


def test_due_by_priority_leaves_out_the_tasks_behind_a_blocked_group(
    book: Book, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """deal_id=7's update failed for good and blocks its group: its two later updates are
    shown under the blocked group, not as due by priority; deal_id=8's one is due."""
    _setup(tmp_path)
    set_now(monkeypatch, NOW)
    monkeypatch.setenv("EXIT", "1")
    enqueue_task({"deal_id": 7}, "deal")
    assert run_cli(["process", "--json"]).json()["failed"] == 1
    set_now(monkeypatch, datetime(2026, 1, 5, 9, 5, tzinfo=UTC))
    enqueue_task({"deal_id": 7, "n": 2}, "deal")
    enqueue_task({"deal_id": 7, "n": 3}, "deal")
    free = enqueue_task({"deal_id": 8}, "deal")
    set_now(monkeypatch, datetime(2026, 1, 5, 9, 10, tzinfo=UTC))
    doc = run_cli(["status", "--json"]).json()
    assert [(b["group"], b["waiting"]) for b in doc["blocked_groups"]] == [("deal_id=7", 2)]
    assert [(p["priority"], p["due"], p["task_id"]) for p in doc["oldest_due_by_priority"]] == [
        (5, 1, free)
    ]
    assert f"due by priority: 5: 1, oldest {free}" in run_cli(["status"]).stdout
