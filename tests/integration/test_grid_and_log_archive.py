"""Issue 12: `init` sizes the grids to their columns, `archive --log-older-than` moves old
QueueLog rows to QueueLogArchive, and `status` reports the spreadsheet's cells."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from sheetq.model import QUEUE_COLUMNS
from tests.conftest import Book, GoogleBook, make_google, run_cli

T0 = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
Q = len(QUEUE_COLUMNS)  # the Queue columns sheetq owns
LOG = ["ts", "task_id", "type", "event", "status", "retry_count", "message", "run_id"]


def _at(monkeypatch: pytest.MonkeyPatch, when: datetime) -> None:
    monkeypatch.setenv("SHEETQ_NOW", when.strftime("%Y-%m-%dT%H:%M:%SZ"))


def _grids(emulator: Any, key: str) -> int:
    """Σ rowCount × columnCount over every worksheet of the spreadsheet, as Google counts."""
    total = 0
    for sheet in emulator.metadata(key)["sheets"]:
        grid = sheet["properties"]["gridProperties"]
        total += grid["rowCount"] * grid["columnCount"]
    return total


def _columns(book: GoogleBook, title: str) -> int:
    props = book.emulator.sheet_properties(book.key, title)
    return int(props["gridProperties"]["columnCount"])


# --- 1. init sizes the grids -------------------------------------------------------------


@pytest.mark.google
def test_init_creates_grids_exactly_as_wide_as_their_columns(
    sheets_emulator: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """New worksheets end with exactly the columns sheetq needs, not Google's default 26."""
    book = make_google(sheets_emulator, monkeypatch)
    assert run_cli(["init"]).code == 0
    assert _columns(book, "Queue") == Q
    assert _columns(book, "QueueArchive") == Q
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
    header = [*QUEUE_COLUMNS[:9], "notes"]  # the Apps Script layout and a manager's column
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


# --- 3. status and the cell limit ----------------------------------------------------------


def test_status_json_reports_cells_on_google_and_null_on_local(
    book: Book, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`status --json` has "cells": used = Σ rowCount × columnCount over every worksheet on
    Google (Sheet1 and QueueLogArchive too), null locally."""
    _at(monkeypatch, T0)
    assert run_cli(["enqueue", "job", '{"n": 1}']).code == 0
    r = run_cli(["status", "--json"])
    assert r.code == 0, r.stderr
    cells = r.json()["cells"]
    if not hasattr(book, "emulator"):
        assert cells is None
        return
    assert isinstance(book, GoogleBook) or hasattr(book, "key")
    used = _grids(book.emulator, book.key)
    # Queue and QueueArchive Q columns, QueueLog and QueueLogArchive 9, Sheet1 26
    assert cells["used"] == used == 1000 * Q * 2 + 1000 * 9 * 2 + 1000 * 26
    assert cells["limit"] == 10_000_000
    assert cells["percent"] == round(100 * used / 10_000_000, 1)
    assert cells["full_at"] is not None
    assert "cells" not in r.stderr


@pytest.mark.google
def test_status_warns_at_80_percent_with_the_date_and_stays_at_two_requests(
    sheets_emulator: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A grid grown to 8,200,000 cells makes `status` warn with the date it fills at the
    rate of the last 7 days, in its 2 requests."""
    book = make_google(sheets_emulator, monkeypatch)
    assert run_cli(["init"]).code == 0
    emu = sheets_emulator
    _at(monkeypatch, T0)
    for n in range(7):
        assert run_cli(["enqueue", "job", json.dumps({"n": n})]).code == 0
    # a big log: QueueLog grid of 900,000 rows × 9 columns = 8.1 M cells
    log_id = emu.sheet_id(book.key, "QueueLog")
    with emu._lock:
        sheet = emu._book(book.key).sheet_by_id(log_id)
        sheet.grid += [None] * (900_000 - sheet.rows)
        sheet.row_meta += [None] * (900_000 - sheet.rows)
        sheet.rows = 900_000
    emu.reset_counts()
    _at(monkeypatch, T0 + timedelta(days=1))
    r = run_cli(["status", "--json"])
    assert r.code == 0, r.stderr
    assert emu.count() == 2
    cells = r.json()["cells"]
    assert cells["used"] == 900_000 * 9 + 2 * 1000 * Q + 1000 * 9 + 1000 * 26
    assert cells["percent"] >= 80
    # 7 tasks a week × (Q + 3 × 9) cells each
    left = 10_000_000 - cells["used"]
    per_day = Q + 3 * 9
    expected = T0 + timedelta(days=1) + timedelta(seconds=left / (7 * per_day / (7 * 86400)))
    got = datetime.fromisoformat(cells["full_at"].replace("Z", "+00:00"))
    assert abs((got - expected).total_seconds()) < 2
    assert "cells" in r.stderr and cells["full_at"][:10] in r.stderr


@pytest.mark.google
def test_status_counts_a_managers_own_worksheet_in_its_two_requests(
    sheets_emulator: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The cells are in a manager's own worksheet (a CRM export of 8,300,000 cells): `status`
    counts every worksheet's grid, warns at 83 %, and still makes 2 requests."""
    book = make_google(sheets_emulator, monkeypatch)
    assert run_cli(["init"]).code == 0
    emu = sheets_emulator
    emu.add_sheet(book.key, "CRM export", rows=100_000, cols=83)
    _at(monkeypatch, T0)
    assert run_cli(["enqueue", "job", '{"n": 1}']).code == 0
    emu.reset_counts()
    r = run_cli(["status", "--json"])
    assert r.code == 0, r.stderr
    assert emu.count() == 2
    cells = r.json()["cells"]
    assert cells["used"] == _grids(emu, book.key) >= 8_300_000
    assert cells["percent"] >= 83
    emu.reset_counts()
    human = run_cli(["status"])
    assert human.code == 0 and emu.count() == 2
    assert "cells" in human.stderr and f"{cells['used']:,}" in human.stderr
    # a person dragged the status column: one read more to find it by name, as enqueue's
    header = [str(h) for h in emu.values(book.key, "Queue")[0]]
    emu.move_column(book.key, "Queue", header.index("status"), 0)
    emu.reset_counts()
    r = run_cli(["status", "--json"])
    assert r.code == 0 and emu.count() == 3, r.stderr
    assert r.json()["cells"]["used"] == _grids(emu, book.key)
    assert r.json()["counts"]["pending"] == 1


# --- 2. archive --log-older-than --------------------------------------------------------


def _cells(record: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in record.items() if k != "_row"}


def _old_and_new_log(monkeypatch: pytest.MonkeyPatch) -> None:
    """Four tasks enqueued and skipped at T0 (8 log rows), two enqueued 40 days later."""
    _at(monkeypatch, T0)
    for n in range(4):
        r = run_cli(["enqueue", "job", json.dumps({"n": n, "name": "Юлія"}), "--json"])
        assert r.code == 0, r.stderr
        assert run_cli(["skip", "--task", r.json()["task_id"]]).code == 0
    _at(monkeypatch, T0 + timedelta(days=40))
    for n in range(2):
        assert run_cli(["enqueue", "job", json.dumps({"n": 10 + n})]).code == 0


def test_log_older_than_moves_old_log_rows_whole_and_once(
    book: Book, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Old QueueLog rows move to QueueLogArchive whole, in order; newer ones stay; Queue
    rows are not archived without --older-than; a second run moves nothing."""
    _old_and_new_log(monkeypatch)
    before = book.records("QueueLog")
    assert len(before) == 10
    dry = run_cli(["archive", "--log-older-than", "30d", "--dry-run", "--json"])
    assert dry.code == 0, dry.stderr
    assert dry.json()["log_archived"] == 8 and len(book.records("QueueLog")) == 10
    r = run_cli(["archive", "--log-older-than", "30d", "--json"])
    assert r.code == 0, r.stderr
    doc = r.json()
    assert doc["log_archived"] == 8 and doc["log_writes"] == 1 and doc["archived"] == 0
    strip = [{k: v for k, v in rec.items() if k != "_row"} for rec in before]
    moved = [
        {k: v for k, v in rec.items() if k != "_row"} for rec in book.records("QueueLogArchive")
    ]
    kept = [{k: v for k, v in rec.items() if k != "_row"} for rec in book.records("QueueLog")]
    assert moved == strip[:8] and kept == strip[8:]
    assert len(book.records("Queue")) == 6
    again = run_cli(["archive", "--log-older-than", "30d", "--json"])
    assert again.code == 0 and again.json()["log_archived"] == 0
    assert len(book.records("QueueLogArchive")) == 8


def test_log_archive_in_several_writes_and_a_failure_between_them_is_finished_by_a_rerun(
    book: Book, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Small writes: the block goes in several atomic writes; a failure after the first
    leaves the rest in QueueLog, and running again moves them without doubling a row."""
    _old_and_new_log(monkeypatch)
    monkeypatch.setattr("sheetq.sheet.log_archive.MAX_WRITE_BYTES", 1200)
    import sheetq.sheet.google as google_store
    import sheetq.sheet.sqlite as sqlite_store

    calls = {"n": 0}
    for module, cls in ((google_store, "GoogleStore"), (sqlite_store, "SqliteStore")):
        klass = getattr(module, cls, None)
        if klass is None:
            continue
        real = klass.move_block

        def failing(self: Any, *a: Any, _real: Any = real, **k: Any) -> Any:
            calls["n"] += 1
            if calls["n"] == 2:
                from sheetq.errors import StoreError

                raise StoreError("simulated outage")
            return _real(self, *a, **k)

        monkeypatch.setattr(klass, "move_block", failing)
    r = run_cli(["archive", "--log-older-than", "30d", "--json"])
    assert r.code == 1, r.stdout
    assert "run the command again" in r.stderr
    first = len(book.records("QueueLogArchive"))
    assert 0 < first < 8 and len(book.records("QueueLog")) == 10 - first
    r = run_cli(["archive", "--log-older-than", "30d", "--json"])
    assert r.code == 0, r.stderr
    assert r.json()["log_writes"] >= 2
    assert len(book.records("QueueLogArchive")) == 8
    assert len(book.records("QueueLog")) == 2


def test_log_archive_refuses_a_log_out_of_time_order(
    book: Book, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An old row below a newer one: exit 2, the row named, nothing moved."""
    _old_and_new_log(monkeypatch)
    book.set_cell("QueueLog", 2, "ts", "2026-03-01T00:00:00Z")
    r = run_cli(["archive", "--log-older-than", "30d"])
    assert r.code == 2
    assert "not in time order" in r.stderr and "row 3" in r.stderr
    assert len(book.records("QueueLog")) == 10
    assert book.records("QueueLogArchive") == []


@pytest.mark.google
def test_log_archive_request_count_on_google(
    sheets_emulator: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One block: open, the QueueLogArchive header, a read, the write and its read-back."""
    book = make_google(sheets_emulator, monkeypatch)
    assert run_cli(["init"]).code == 0
    _old_and_new_log(monkeypatch)
    sheets_emulator.reset_counts()
    r = run_cli(["archive", "--log-older-than", "30d", "--json"])
    assert r.code == 0, r.stderr
    assert r.json()["log_archived"] == 8
    assert sheets_emulator.count() <= 6
    assert len(book.records("QueueLogArchive")) == 8


@pytest.mark.google
def test_log_rows_a_sort_carried_along_are_put_back(
    sheets_emulator: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A person reverses QueueLog between archive's read and its write: the write moves the
    top block, now holding the newest rows; those are put back at the end of QueueLog (said
    on stderr), the next write takes the old rows it missed, none is lost or doubled."""
    book = make_google(sheets_emulator, monkeypatch)
    assert run_cli(["init"]).code == 0
    _old_and_new_log(monkeypatch)
    before = sorted(tuple(sorted(_cells(r).items())) for r in book.records("QueueLog"))
    sheets_emulator.before_next(
        lambda emu: emu.reverse_rows(book.key, "QueueLog"), op="spreadsheets.batchUpdate"
    )
    r = run_cli(["archive", "--log-older-than", "30d", "--json"])
    assert r.code == 0, r.stderr
    doc = r.json()
    assert (doc["log_archived"], doc["log_stray"], doc["log_put_back"]) == (8, 2, 2)
    assert "2 newer QueueLog row(s)" in r.stderr and "put back" in r.stderr
    cutoff = (T0 + timedelta(days=10)).strftime("%Y-%m-%dT%H:%M:%SZ")
    assert len(book.records("QueueLogArchive")) == 8
    assert all(row["ts"] < cutoff for row in book.records("QueueLogArchive"))
    assert all(row["ts"] > cutoff for row in book.records("QueueLog"))
    after = sorted(
        tuple(sorted(_cells(r).items()))
        for r in book.records("QueueLog") + book.records("QueueLogArchive")
    )
    assert after == before
