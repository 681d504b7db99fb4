"""``sheetq init --dashboard``: a worksheet of live formulas over Queue and QueueLog, written
through the emulator (which cannot evaluate them: the formula text is what is pinned)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import GoogleBook, LocalBook, make_google, run_cli, write_config

ISO = '"yyyy-mm-dd""T""hh:mm:ss""Z"""'


@pytest.fixture
def gbook(sheets_emulator: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[GoogleBook]:
    """An initialised spreadsheet in the emulator, time zone Europe/Kyiv."""
    book = make_google(sheets_emulator, monkeypatch, time_zone="Europe/Kyiv")
    assert run_cli(["init", "--no-format"]).code == 0
    yield book


def build(*extra: str) -> str:
    r = run_cli(["init", "--no-format", "--dashboard", *extra])
    assert r.code == 0, r.stderr
    return r.stdout


def formulas(book: GoogleBook, title: str = "Dashboard") -> list[list[Any]]:
    return book.emulator.values(book.key, title, render="FORMULA")


def cell_at(book: GoogleBook, label: str, column: int = 1, title: str = "Dashboard") -> str:
    """The formula (or value) in ``column`` of the row whose first cell is ``label``."""
    for row in formulas(book, title):
        if row and row[0] == label:
            return str(row[column])
    raise KeyError(label)


def enqueue(task_type: str, n: int = 1) -> None:
    for i in range(n):
        assert run_cli(["enqueue", task_type, f'{{"n": {i}}}']).code == 0


@pytest.mark.google
def test_formula_cells_are_formulas_and_labels_are_data(gbook: GoogleBook) -> None:
    """Cells starting with '=' are formulaValue, others data; a typed '=…' type is a label."""
    enqueue("lead", 2)
    enqueue("order")
    gbook.set_cell("Queue", 3, "type", '=IMPORTXML("http://x","//a")')
    out = build()
    assert "Dashboard: built" in out and "types listed:" in out
    from sheetq.sheet.store import column_letter

    grid = formulas(gbook)
    kinds = {"formulaValue": 0, "data": 0}
    for r, row in enumerate(grid, start=1):
        for c, text in enumerate(row):
            if text == "":
                continue
            value = gbook.emulator.cell(gbook.key, "Dashboard", f"{column_letter(c)}{r}")
            entered = value["userEnteredValue"]
            if isinstance(text, str) and text.startswith("=") and c > 0:
                assert set(entered) == {"formulaValue"}, (r, c, entered)
                kinds["formulaValue"] += 1
            else:
                assert "formulaValue" not in entered, (r, c, entered)
                kinds["data"] += 1
    assert kinds["formulaValue"] == 7 * 5 + 11
    evil = next(row for row in grid if str(row[0]).startswith("=IMPORTXML"))
    assert evil[1] == (
        '=COUNTIFS(\'Queue\'!C:C,"==IMPORTXML(""http://x"",""//a"")",\'Queue\'!E:E,"pending")'
    )


@pytest.mark.google
def test_counts_by_type_and_status_reference_columns_by_header(gbook: GoogleBook) -> None:
    """After a manager moved `status` to A (type → D), the COUNTIFS reference A:A and D:D."""
    enqueue("lead")
    header = gbook.grid("Queue")[0]
    gbook.emulator.move_column(gbook.key, "Queue", header.index("status"), 0)
    assert gbook.grid("Queue")[0][:4] == ["status", "task_id", "created_at", "type"]
    build()
    assert cell_at(gbook, "lead", 1) == "=COUNTIFS('Queue'!D:D,\"=lead\",'Queue'!A:A,\"pending\")"
    assert cell_at(gbook, "lead", 7) == "=SUM(B2:G2)"
    assert cell_at(gbook, "all types", 4) == "=COUNTIF('Queue'!A:A,\"done\")"
    assert cell_at(gbook, "other types", 1) == "=B3-SUM(B2:B2)"
    alerted = "P"  # alerted_at was the 16th column; the move did not shift it
    assert cell_at(gbook, "failed, not yet alerted") == (
        f"=COUNTIFS('Queue'!A:A,\"failed\",'Queue'!{alerted}:{alerted},\"\")"
    )


@pytest.mark.google
def test_time_formulas_compare_sheetq_utc_text(gbook: GoogleBook) -> None:
    """24 h and age formulas compare sheetq's UTC text with NOW() minus the zone's DST offset."""
    build()
    grid = formulas(gbook)
    table = [row[9:12] for row in grid[1:] if len(row) > 9 and row[9] != ""]
    assert {row[2] for row in table} == {2, 3}
    assert table[1][0].endswith("04:00")  # spring forward: 03:00→04:00
    end = 1 + len(table)
    utc_now = f"(NOW()-VLOOKUP(NOW(),$K$2:$L${end},2,TRUE)/24)"
    assert cell_at(gbook, "now (UTC)") == f"=TEXT({utc_now},{ISO})"
    assert cell_at(gbook, "24 hours ago (UTC)") == f"=TEXT({utc_now}-1,{ISO})"
    ago = next(i for i, row in enumerate(grid, start=1) if row[0] == "24 hours ago (UTC)")
    assert cell_at(gbook, "done in the last 24 h") == (
        f"=SUMPRODUCT(('QueueLog'!A2:A>=B{ago})*('QueueLog'!E2:E=\"done\")*"
        "(('QueueLog'!D2:D=\"done\")+('QueueLog'!D2:D=\"recovered\")))"
    )
    assert "('QueueLog'!D2:D=\"expired\")" in cell_at(gbook, "failed in the last 24 h")
    since = cell_at(gbook, "oldest waiting since (UTC)")
    assert since.startswith("=IFERROR(INDEX(SORT(FILTER('Queue'!B2:B,")
    assert "('Queue'!E2:E=\"retry\")" in since
    age = cell_at(gbook, "oldest waiting age (hours)")
    assert "DATEVALUE(LEFT(B" in age and utc_now in age


@pytest.mark.google
def test_quoted_titles_and_own_dashboard_per_queue(
    sheets_emulator: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Titles with quotes or like cells are quoted; another queue gets `<queue> Dashboard`."""
    monkeypatch.setenv("SHEETQ_QUEUE_SHEET", "Jon's Queue")
    monkeypatch.setenv("SHEETQ_LOG_SHEET", "CRM26")
    book = make_google(sheets_emulator, monkeypatch)
    build()
    grid = formulas(book, "Jon's Queue Dashboard")
    texts = [str(v) for row in grid for v in row if str(v).startswith("=")]
    assert any("'Jon''s Queue'!E:E" in t for t in texts)
    assert any("'CRM26'!A2:A" in t for t in texts)
    assert not any("Jon's Queue'!" in t.replace("'Jon''s Queue'!", "") for t in texts)


@pytest.mark.google
def test_rebuild_replaces_in_place(gbook: GoogleBook) -> None:
    """Rebuilds rewrite the same cells, clear unused rows, keep other sheets and columns."""
    emu = gbook.emulator
    write_config("[types.alpha]\nowner='a'\n[types.beta]\nowner='b'\n[types.gamma]\nowner='c'\n")
    build()
    first = [row[:12] for row in formulas(gbook)]
    emu.add_sheet(gbook.key, "Notes")
    emu.set_values(gbook.key, "Notes", [["call Olena back"]])
    emu.set_values(gbook.key, "Dashboard", [["my note"]], "N5")
    titles = [s["properties"]["title"] for s in emu.metadata(gbook.key)["sheets"]]
    out = build()
    assert "rebuilt in place" in out
    assert [row[:12] for row in formulas(gbook)] == first
    write_config("[types.alpha]\nowner='a'\n")
    build()
    after = formulas(gbook)
    labels = [row[0] for row in after]
    assert "beta" not in labels and "gamma" not in labels
    assert labels[:4] == ["type", "alpha", "all types", "other types"]

    def used(grid: list[list[Any]]) -> int:
        return sum(1 for row in grid if any(v != "" for v in row[:9]))

    assert used(after) == used(first) - 2
    assert [s["properties"]["title"] for s in emu.metadata(gbook.key)["sheets"]] == titles
    assert emu.values(gbook.key, "Notes") == [["call Olena back"]]
    assert formulas(gbook)[4][13] == "my note"


def test_local_backend_builds_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Local workbook: `init --dashboard` says it needs Google Sheets, exits 0, adds nothing."""
    book = LocalBook(tmp_path / "book.db")
    monkeypatch.setenv("SHEETQ_SPREADSHEET", book.spreadsheet)
    r = run_cli(["init", "--dashboard"])
    assert r.code == 0 and "needs Google Sheets" in r.stdout
    from sheetq.sheet.sqlite import SqliteStore

    store = SqliteStore(book.path)
    assert set(store.open().sheets) == {"Queue", "QueueLog", "QueueArchive", "QueueLogArchive"}
    store.close()


# --- pure parts ---------------------------------------------------------------------------------


def test_utc_offsets_follow_daylight_saving() -> None:
    """The offset table: one row for UTC; Kyiv's 2026 DST changes at local 04:00 and 03:00."""
    from sheetq.sheet.dashboard import OFFSET_YEARS, utc_offsets

    now = datetime(2026, 6, 1, tzinfo=UTC)
    assert utc_offsets("UTC", now) == [(datetime(2025, 1, 1), 0.0)]
    kyiv = utc_offsets("Europe/Kyiv", now)
    assert (datetime(2026, 3, 29, 4, 0), 3.0) in kyiv
    assert (datetime(2026, 10, 25, 3, 0), 2.0) in kyiv
    assert len(kyiv) == 1 + 2 * (OFFSET_YEARS + 1)


def test_criteria_and_titles_are_escaped() -> None:
    """A type with wildcards or quotes matches only itself; titles double their quotes."""
    from sheetq.sheet.dashboard import _equals, quote

    assert _equals('a*b?c~"d') == '"=a~*b~?c~~""d"'
    assert quote("Jon's Queue") == "'Jon''s Queue'"
