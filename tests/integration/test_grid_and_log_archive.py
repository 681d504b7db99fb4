"""Issue 12: `init` sizes the grids to their columns, `archive --log-older-than` moves old
QueueLog rows to QueueLogArchive, and `status` reports the spreadsheet's cells."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tests.conftest import Book, GoogleBook, make_google, run_cli

T0 = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
LOG = ["ts", "task_id", "type", "event", "status", "retry_count", "message", "run_id"]


def _at(monkeypatch: pytest.MonkeyPatch, when: datetime) -> None:
    monkeypatch.setenv("SHEETQ_NOW", when.strftime("%Y-%m-%dT%H:%M:%SZ"))


def _columns(book: GoogleBook, title: str) -> int:
    props = book.emulator.sheet_properties(book.key, title)
    return int(props["gridProperties"]["columnCount"])


# --- 1. init sizes the grids -------------------------------------------------------------


@pytest.mark.google
def test_init_creates_grids_exactly_as_wide_as_their_columns(
    sheets_emulator: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """New worksheets get exactly the columns sheetq needs, not Google's default 26."""
    book = make_google(sheets_emulator, monkeypatch)
    assert run_cli(["init"]).code == 0
    assert _columns(book, "Queue") == 17
    assert _columns(book, "QueueArchive") == 17
    assert _columns(book, "QueueLog") == 9
    assert _columns(book, "QueueLogArchive") == 9


@pytest.mark.google
def test_init_trims_only_empty_trailing_columns_and_changes_nothing_twice(
    sheets_emulator: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Existing 26-wide sheets lose their empty tail; a manager's named column and an
    unnamed column holding a value are kept; a second init sends no write."""
    book = make_google(sheets_emulator, monkeypatch)
    emu = sheets_emulator
    emu.add_sheet(book.key, "Queue", cols=26)
    emu.add_sheet(book.key, "QueueLog", cols=26)
    header = [
        "task_id",
        "created_at",
        "type",
        "payload_json",
        "status",
        "retry_count",
        "next_retry_at",
        "last_error",
        "idempotency_key",
        "notes",
    ]
    emu.set_values(book.key, "Queue", [header], "A1")
    # a value without a header far right (column U, index 20), on row 7
    emu.set_values(book.key, "Queue", [["call back"]], "U7")
    emu.set_values(book.key, "QueueLog", [["=1+1"]], "M3")  # a formula beyond the header
    r = run_cli(["init"])
    assert r.code == 0, r.stderr
    queue_header = [str(h) for h in book.grid("Queue")[0]]
    assert queue_header[9] == "notes"  # kept where it was; sheetq's columns after it
    assert _columns(book, "Queue") == 21  # up to U, which holds a value
    assert book.grid("Queue")[6][20] == "call back"
    assert _columns(book, "QueueLog") == 13  # up to M, which holds a formula
    assert "grid trimmed" in r.stdout
    emu.reset_counts()
    r2 = run_cli(["init"])
    assert r2.code == 0, r2.stderr
    assert "grid trimmed" not in r2.stdout
    assert _columns(book, "Queue") == 21
    assert emu.count("spreadsheets.batchUpdate:deleteDimension") == 0
