"""`status` names rows held by a run that is gone, with when and how they will be recovered."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import Book, LocalBook, make_google, run_cli, write_config

NOW = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)


def _iso(when: datetime) -> str:
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


def _config() -> None:
    write_config(
        "[types.risky]\ncommand = ['true']\n"
        "[types.safe]\ncommand = ['true']\nidempotent = true\n"
        "[types.order]\ncommand = ['true']\non_unknown = 'reconcile'\n"
        "reconcile = { command = ['true'] }\n"
    )


def _hold(book: Book, run_id: str, until: datetime, *types: str) -> list[str]:
    """Enqueue tasks and leave them as a dead run does: processing under ``run_id``."""
    ids = []
    for n, kind in enumerate(types):
        task = run_cli(["enqueue", kind, json.dumps({"r": run_id, "n": n}), "--json"]).json()
        row = int(book.row_of(task["task_id"])["_row"])
        book.set_cell("Queue", row, "status", "processing")
        book.set_cell("Queue", row, "lease_owner", run_id)
        book.set_cell("Queue", row, "lease_until", _iso(until))
        ids.append(task["task_id"])
    return ids


def _set_lease(book: LocalBook, expires: datetime) -> None:
    """What a live run holds: the queue's run lease, expiring with its rows' lease_until."""
    from sheetq.sheet.runner import lease_name, lease_token
    from sheetq.sheet.sqlite import SqliteStore
    from sheetq.sheet.store import ChangeSet, LeaseChange

    store = SqliteStore(book.path)
    try:
        store.apply(ChangeSet(lease=LeaseChange(lease_name("Queue"), lease_token(expires), None)))
    finally:
        store.close()


def test_status_names_gone_runs_and_skips_the_live_one(
    book: Book, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rows of a run without the lease, or past their lease, are listed per run with the lease
    end and each type's on_unknown; a run holding the live lease is not."""
    _config()
    monkeypatch.setenv("SHEETQ_NOW", _iso(NOW))
    until = NOW + timedelta(minutes=12)
    _hold(book, "run_gone", until, "risky", "safe", "order", "safe")
    _hold(book, "run_old", NOW - timedelta(minutes=1), "risky")
    if isinstance(book, LocalBook):
        live = NOW + timedelta(minutes=30)
        _set_lease(book, live)
        _hold(book, "run_live", live, "safe")
    doc = run_cli(["status", "--json"]).json()
    groups = {g["run_id"]: g for g in doc["held_by_gone_runs"]}
    assert set(groups) == {"run_gone", "run_old"}
    gone = groups["run_gone"]
    assert gone["count"] == 4 and gone["lease_expired"] is False
    assert datetime.fromisoformat(gone["lease_until"]) == until
    assert gone["on_unknown"] == {"order": "reconcile", "risky": "fail", "safe": "retry"}
    assert gone["by_type"] == {"order": 1, "risky": 1, "safe": 2}
    assert groups["run_old"]["lease_expired"] is True
    assert doc["counts"]["processing"] == (6 if isinstance(book, LocalBook) else 5)
    text = run_cli(["status"]).stdout
    assert "4 processing under run run_gone, lease ends 2026-01-05 09:12" in text
    assert "then recovered per on_unknown: order: reconcile, risky: fail, safe: retry" in text
    assert "1 processing under run run_old, lease ended 2026-01-05 08:59" in text
    assert "run_live" not in text


@pytest.mark.google
def test_status_shows_the_lease_end_in_the_sheet_time_zone(
    sheets_emulator: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The lease end is shown in the spreadsheet's time zone, in text and JSON."""
    book = make_google(sheets_emulator, monkeypatch, time_zone="Europe/Berlin")
    assert run_cli(["init"]).code == 0
    _config()
    monkeypatch.setenv("SHEETQ_NOW", _iso(NOW))
    _hold(book, "run_gone", NOW + timedelta(hours=2), "safe")
    doc = run_cli(["status", "--json"]).json()
    (group,) = doc["held_by_gone_runs"]
    assert group["lease_until"] == "2026-01-05T12:00:00+01:00"
    assert "lease ends 2026-01-05 12:00 CET" in run_cli(["status"]).stdout


def test_status_without_processing_rows_lists_none(
    book: Book, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No processing rows: the key is there and empty, the other keys unchanged."""
    _config()
    run_cli(["enqueue", "safe", "{}"])
    doc = run_cli(["status", "--json"]).json()
    assert doc["held_by_gone_runs"] == []
    assert {"counts", "by_type", "due_retries", "owed_alerts", "total"} <= set(doc)
