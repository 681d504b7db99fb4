"""Connectors through `sheetq process` on every backend (docs/design.md §13): several types
calling one downstream share its rate limit and its breaker; a type without a connector
keeps its per-type rate limit and breaker, as before."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from tests.cli_helpers import enqueue_task, set_now
from tests.conftest import Book, handler_script, run_cli, write_config
from tests.sheet_only import sheet_only

ON_POSTGRES = True  # the behavioural suite: also runs on PostgreSQL

NOW = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
STARTS = """
import os, sys, pathlib
sys.stdin.read()
with pathlib.Path(os.environ["CALLS"]).open("a") as f:
    f.write(os.environ["SHEETQ_TASK_ID"] + "\\n")
sys.exit(int(os.environ.get("EXIT", "0")))
"""


def _fake_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    from sheetq.clock import FakeClock

    clock = FakeClock(NOW)
    monkeypatch.setattr("sheetq.cli._context.clock_from_env", lambda: clock)


def test_two_types_on_one_connector_share_its_rate_limit(
    book: Book, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """[connectors.crm] rate_limit = "30/min" with two types calling it: their four starts
    are spaced 2 s apart between them (on the injected clock), not per type."""
    _fake_clock(monkeypatch)
    monkeypatch.setenv("CALLS", str(tmp_path / "calls.txt"))
    handler = handler_script(tmp_path, "h", STARTS)
    write_config(
        '[connectors.crm]\nrate_limit = "30/min"\n'
        f'[types.lead]\ncommand = {handler}\nconnector = "crm"\n'
        f'[types.deal]\ncommand = {handler}\nconnector = "crm"\n'
    )
    for i in range(2):
        enqueue_task({"n": i}, "lead")
        enqueue_task({"n": i}, "deal")
    doc = run_cli(["process", "--batch-size", "4", "--until-empty", "--json"]).json()
    assert doc["done"] == 4
    assert doc["seconds"] >= 6.0  # three waits of 2 s: one budget, not one per type


def test_failures_of_two_types_open_their_connectors_breaker_for_both(
    book: Book, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """breaker_threshold = 2 on the connector: one transient failure of each type opens it,
    and the other tasks of both types wait with their status and attempts."""
    set_now(monkeypatch, NOW)
    monkeypatch.setenv("CALLS", str(tmp_path / "calls.txt"))
    monkeypatch.setenv("EXIT", "75")
    handler = handler_script(tmp_path, "h", STARTS)
    write_config(
        "[connectors.crm]\nbreaker_threshold = 2\n"
        f'[types.lead]\ncommand = {handler}\nconnector = "crm"\n'
        f'[types.deal]\ncommand = {handler}\nconnector = "crm"\n'
    )
    ids = []
    for i in range(3):
        ids.append(enqueue_task({"n": i}, "lead"))
        ids.append(enqueue_task({"n": i}, "deal"))
    doc = run_cli(["process", "--batch-size", "10", "--json"]).json()
    assert doc["retry"] == 2
    assert "consecutive transient failures" in doc["open_circuits"]["lead"]
    assert "deal" in doc["open_circuits"]
    ran = (tmp_path / "calls.txt").read_text().split()
    assert sorted(ran) == sorted(ids[:2])
    for task in ids[2:]:
        row = book.row_of(task)
        assert (row["status"], row["retry_count"]) == ("pending", "0")


def _sheet_setup(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, extra: str = "") -> None:
    monkeypatch.setenv("CALLS", str(tmp_path / "calls.txt"))
    handler = handler_script(tmp_path, "h", STARTS)
    write_config(
        '[connectors.crm]\nbreaker_threshold = 2\nbreaker_cooldown = "1h"\n' + extra + "\n"
        f'[types.lead]\ncommand = {handler}\nconnector = "crm"\nbackoff = ["1m"]\njitter = 0\n'
        f"[types.mail]\ncommand = {handler}\n"
    )
    r = run_cli(["init", "--no-format"])
    assert r.code == 0, r.stderr
    assert "Connectors" in r.stdout


def _calls(tmp_path: Path) -> list[str]:
    path = tmp_path / "calls.txt"
    return path.read_text().split() if path.exists() else []


def _connector_log(book: Book, name: str) -> list[str]:
    return [r["event"] for r in book.log() if r["task_id"] == "" and r["type"] == name]


def test_a_sheets_breaker_persists_across_runs_and_probes_once_after_the_cooldown(
    book: Book, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a sheet the breaker lives in the Connectors worksheet: opened by one run (logged,
    its row open until the cooldown's end with the reason), it holds a run a minute later;
    after the cooldown one probe runs, its success closes it (logged) and the rest run."""
    sheet_only(book, "the Connectors worksheet; PostgreSQL keeps it in a table")
    _sheet_setup(tmp_path, monkeypatch)
    set_now(monkeypatch, NOW)
    monkeypatch.setenv("EXIT", "75")
    ids = [enqueue_task({"n": i}, "lead") for i in range(4)]
    doc = run_cli(["process", "--json"]).json()
    assert doc["retry"] == 2 and len(_calls(tmp_path)) == 2
    (row,) = [r for r in book.records("Connectors") if r["name"] == "crm"]
    assert row["state"] == "open" and row["until"] == "2026-01-05T10:00:00Z"
    assert row["reason"].startswith("open: 2 consecutive transient failures")
    assert row["failures"] == "2"
    assert _connector_log(book, "crm") == ["breaker_opened"]
    set_now(monkeypatch, datetime(2026, 1, 5, 9, 30, tzinfo=UTC))  # retries due, still open
    doc = run_cli(["process", "--json"]).json()
    assert doc["claimed"] in (0, 2) and len(_calls(tmp_path)) == 2  # nothing of crm started
    status = run_cli(["status"]).stdout
    assert "connector crm: open until 2026-01-05T10:00:00Z" in status
    monkeypatch.setenv("EXIT", "0")  # the CRM is back
    set_now(monkeypatch, datetime(2026, 1, 5, 10, 1, tzinfo=UTC))
    doc = run_cli(["process", "--json"]).json()
    assert doc["done"] >= 1
    assert _connector_log(book, "crm") == ["breaker_opened", "breaker_closed"]
    run_cli(["process", "--until-empty", "--json"])
    assert {book.row_of(t)["status"] for t in ids} == {"done"}
    (row,) = [r for r in book.records("Connectors") if r["name"] == "crm"]
    assert (row["state"], row["reason"], row["failures"]) == ("closed", "", "0")


def test_a_manager_types_paused_then_closed_into_the_connectors_sheet(
    book: Book, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A manager typing `paused` into the crm row's state stops its tasks (other types
    run; logged `paused` once); typing `closed` resumes them (logged `resumed`)."""
    sheet_only(book, "a person typing into the Connectors worksheet")
    _sheet_setup(tmp_path, monkeypatch)
    set_now(monkeypatch, NOW)
    lead = enqueue_task({"n": 1}, "lead")
    mail = enqueue_task({"n": 2}, "mail")
    rows = book.records("Connectors")
    number = 2 + [r["name"] for r in rows].index("crm")
    book.set_cell("Connectors", number, "state", "paused")
    doc = run_cli(["process", "--until-empty", "--json"]).json()
    assert doc["done"] == 1 and _calls(tmp_path) == [mail]
    assert book.row_of(lead)["status"] == "pending" and book.row_of(lead)["retry_count"] == "0"
    run_cli(["process", "--until-empty", "--json"])
    assert _connector_log(book, "crm") == ["paused"]  # once, however many runs see it
    listed = run_cli(["connector", "list", "--json"]).json()["connectors"]
    assert [(c["state"], c["waiting"]) for c in listed if c["name"] == "crm"] == [("paused", 1)]
    book.set_cell("Connectors", number, "state", "closed")
    doc = run_cli(["process", "--until-empty", "--json"]).json()
    assert doc["done"] == 1 and book.row_of(lead)["status"] == "done"
    assert _connector_log(book, "crm") == ["paused", "resumed"]


def test_pause_and_resume_commands_on_a_sheet_and_the_rate_limit_goes_on_across_runs(
    book: Book, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`connector pause crm --for 2h` writes the row and its log row; `resume` closes it.
    A rate limit of 1/min: a run a second after another waits for the next start instead
    of starting a fresh window (on the injected clock)."""
    sheet_only(book, "the Connectors worksheet; PostgreSQL keeps it in a table")
    _sheet_setup(tmp_path, monkeypatch, extra='rate_limit = "1/min"')
    set_now(monkeypatch, NOW)
    enqueue_task({"n": 1}, "lead")
    enqueue_task({"n": 2}, "lead")
    r = run_cli(["connector", "pause", "crm", "--for", "2h", "--reason", "maintenance"])
    assert r.code == 0, r.stderr
    assert "paused until 2026-01-05T11:00:00Z" in r.stdout
    (row,) = [x for x in book.records("Connectors") if x["name"] == "crm"]
    assert (row["state"], row["until"], row["reason"]) == (
        "paused",
        "2026-01-05T11:00:00Z",
        "paused: maintenance",
    )
    assert run_cli(["process", "--json"]).json()["claimed"] == 0
    set_now(monkeypatch, datetime(2026, 1, 5, 11, 0, 1, tzinfo=UTC))  # the pause ended
    doc = run_cli(["process", "--batch-size", "1", "--max-batches", "1", "--json"]).json()
    assert doc["done"] == 1
    assert _connector_log(book, "crm") == ["paused", "resumed"]
    assert run_cli(["connector", "pause", "crm"]).code == 0  # until resumed
    assert run_cli(["process", "--json"]).json()["claimed"] == 0
    assert run_cli(["connector", "resume", "crm"]).code == 0
    assert _connector_log(book, "crm") == ["paused", "resumed", "paused", "resumed"]
    enqueue_task({"n": 3}, "lead")
    monkeypatch.delenv("SHEETQ_NOW")
    from sheetq.clock import FakeClock

    noon = FakeClock(datetime(2026, 1, 5, 12, 0, tzinfo=UTC))
    monkeypatch.setattr("sheetq.cli._context.clock_from_env", lambda: noon)
    doc = run_cli(["process", "--batch-size", "1", "--max-batches", "1", "--json"]).json()
    assert doc["done"] == 1 and doc["seconds"] < 30
    later = FakeClock(datetime(2026, 1, 5, 12, 0, 1, tzinfo=UTC))
    monkeypatch.setattr("sheetq.cli._context.clock_from_env", lambda: later)
    doc = run_cli(["process", "--batch-size", "1", "--max-batches", "1", "--json"]).json()
    assert doc["done"] == 1 and doc["seconds"] >= 58  # waited for the window, not afresh
