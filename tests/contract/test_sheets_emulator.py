"""Contract tests for tests/fakes/sheets_emulator.py, driven through gspread 6 like sheetq is.

The last two tests replay every Sheets API request recorded in
shared/reference/gspread-cassettes/ against a fresh emulated spreadsheet and compare the
answers with Google's; the per-cassette result is kept in tests/fakes/CONFORMANCE.md.
Regenerate that table with ``python tests/contract/test_sheets_emulator.py --write-conformance``.
"""

from __future__ import annotations

import datetime as dt
import http.client
import importlib.util
import json
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import gspread
import pytest
import requests
from gspread.exceptions import APIError, SpreadsheetNotFound
from gspread.utils import (
    DateTimeOption,
    InsertDataOption,
    ValidationConditionType,
    ValueRenderOption,
)

try:
    from tests.fakes.sheets_emulator import RecordedRequest, SheetsEmulator
except ModuleNotFoundError:  # plain `pytest` without the repository root on sys.path
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from tests.fakes.sheets_emulator import RecordedRequest, SheetsEmulator

ROOT = Path(__file__).resolve().parents[2]
SHARED = ROOT.parent / "shared"
CASSETTES = SHARED / "reference" / "gspread-cassettes"
PAIRS_TOOL = SHARED / "tools" / "cassette_pairs.py"
CONFORMANCE_DOC = ROOT / "tests" / "fakes" / "CONFORMANCE.md"
GOOGLE = "https://sheets.googleapis.com"

# 2026-01-05 as a Sheets serial number (days since 1899-12-30)
SERIAL_2026_01_05 = (dt.date(2026, 1, 5) - dt.date(1899, 12, 30)).days


class EmulatorSession(requests.Session):
    """A requests.Session that sends gspread's Sheets API calls to the emulator."""

    def __init__(self, base_url: str) -> None:
        super().__init__()
        self.base_url = base_url
        self.trust_env = False  # no proxy settings from the developer's shell

    def request(
        self, method: str | bytes, url: str | bytes, *args: Any, **kwargs: Any
    ) -> requests.Response:
        if isinstance(url, str) and url.startswith(GOOGLE):
            url = self.base_url + url[len(GOOGLE) :]
        return super().request(method, url, *args, **kwargs)


@pytest.fixture(scope="module")
def server() -> Iterator[SheetsEmulator]:
    with SheetsEmulator(seed=20260105) as emulator:
        yield emulator


@pytest.fixture
def emu(server: SheetsEmulator) -> Iterator[SheetsEmulator]:
    server.clear_faults()
    server.reset_counts()
    server.errors.clear()
    yield server
    server.clear_faults()
    assert server.errors == []


@pytest.fixture
def session(emu: SheetsEmulator) -> Iterator[EmulatorSession]:
    with EmulatorSession(emu.base_url) as s:
        yield s


@pytest.fixture
def gc(session: EmulatorSession) -> gspread.Client:
    client = gspread.Client(auth=None, session=session)
    client.set_timeout(10)
    return client


@pytest.fixture
def key(emu: SheetsEmulator) -> str:
    return emu.create_spreadsheet(sheets=("Queue", "QueueLog"))


@pytest.fixture
def sh(gc: gspread.Client, key: str) -> gspread.Spreadsheet:
    return gc.open_by_key(key)


@pytest.fixture
def ws(sh: gspread.Spreadsheet) -> gspread.Worksheet:
    return sh.worksheet("Queue")


def _error(exc_info: pytest.ExceptionInfo[APIError]) -> dict[str, Any]:
    return dict(exc_info.value.error)


# ---------------------------------------------------------------------------------------
# Opening, metadata, access
# ---------------------------------------------------------------------------------------


def test_open_by_key_reads_metadata_like_google(
    emu: SheetsEmulator, gc: gspread.Client, key: str
) -> None:
    """open_by_key + worksheets() cost 2 reads and see Google's metadata shape."""
    sh = gc.open_by_key(key)
    sheets = sh.worksheets()
    assert (sh.title, sh.locale, sh.timezone) == ("sheetq test", "en_US", "Etc/GMT")
    assert [w.title for w in sheets] == ["Queue", "QueueLog"]
    assert sheets[0].id == 0 and 0 < sheets[1].id < 2**31
    assert emu.count() == 2
    meta = sh.fetch_sheet_metadata()
    assert meta["spreadsheetUrl"] == f"https://docs.google.com/spreadsheets/d/{key}/edit"
    assert meta["sheets"][0]["properties"] == {
        "sheetId": 0,
        "title": "Queue",
        "index": 0,
        "sheetType": "GRID",
        "gridProperties": {"rowCount": 1000, "columnCount": 26},
    }
    assert "namedRanges" not in meta and meta["properties"]["autoRecalc"] == "ON_CHANGE"
    assert meta == emu.metadata(key)
    assert len(key) == 44 and re.fullmatch(r"[A-Za-z0-9_-]+", key)


def test_unknown_key_is_spreadsheet_not_found(emu: SheetsEmulator, gc: gspread.Client) -> None:
    """An unknown id answers Google's 404 envelope (gspread: SpreadsheetNotFound)."""
    with pytest.raises(SpreadsheetNotFound):
        gc.open_by_key("no-such-spreadsheet")
    with pytest.raises(APIError) as info:
        gc.http_client.values_get("no-such-spreadsheet", "A1")
    assert _error(info) == {
        "code": 404,
        "message": "Requested entity was not found.",
        "status": "NOT_FOUND",
    }


def test_access_modes_none_and_reader(emu: SheetsEmulator, gc: gspread.Client, key: str) -> None:
    """set_access: "none" refuses everything with 403, "reader" refuses only writes."""
    emu.set_values(key, "Queue", [["kept"]])
    emu.set_access(key, "none")
    with pytest.raises(PermissionError):
        gc.open_by_key(key)
    emu.set_access(key, "reader")
    ws = gc.open_by_key(key).sheet1
    assert ws.get("A1") == [["kept"]]
    with pytest.raises(APIError) as info:
        ws.update([["changed"]], "A1")
    assert _error(info) == {
        "code": 403,
        "message": "The caller does not have permission",
        "status": "PERMISSION_DENIED",
    }
    assert emu.values(key, "Queue") == [["kept"]]
    emu.set_access(key, "owner")
    ws.update([["changed"]], "A1")
    assert emu.values(key, "Queue") == [["changed"]]


# ---------------------------------------------------------------------------------------
# RAW and USER_ENTERED
# ---------------------------------------------------------------------------------------

RAW_STRINGS = [
    "=1+1",
    "+380501234567",
    "007",
    "2026-01-05",
    "TRUE",
    "line 1\nline 2",
    "Артур Іваненко",
    "🌵🍇",
    "'apostrophe",
    "3_1_0",
]


def test_raw_strings_round_trip_unchanged(
    emu: SheetsEmulator, key: str, ws: gspread.Worksheet
) -> None:
    """RAW stores every string as text: formulas, phone numbers, leading zeros, dates."""
    reply = ws.update([RAW_STRINGS], "A1")
    assert reply["updatedRange"] == "Queue!A1:J1" and reply["updatedCells"] == 10
    for render in ValueRenderOption:
        assert ws.get("A1:J1", value_render_option=render) == [RAW_STRINGS]
    assert emu.cell(key, "Queue", "A1")["userEnteredValue"] == {"stringValue": "=1+1"}
    assert emu.cell(key, "Queue", "I1")["formattedValue"] == "'apostrophe"


def test_raw_numbers_and_booleans_stay_typed(ws: gspread.Worksheet) -> None:
    """JSON numbers/booleans are stored typed; integral numbers print without ".0"."""
    ws.update([[1, 2.5, True, 0.12, 42.0, -3]], "A1")
    assert ws.get("A1:F1") == [["1", "2.5", "TRUE", "0.12", "42", "-3"]]
    unformatted = ws.get("A1:F1", value_render_option=ValueRenderOption.unformatted)[0]
    assert unformatted == [1, 2.5, True, 0.12, 42, -3]
    assert [type(v) for v in unformatted] == [int, float, bool, float, int, int]


def test_user_entered_parses_like_the_sheets_ui(ws: gspread.Worksheet) -> None:
    """USER_ENTERED: formulas evaluate, digits become numbers, dates become serials."""
    typed = [
        "=1+1",
        "=4/2",
        "=3/2",
        "0042",
        "+380501234567",
        "2026-01-05",
        "TRUE",
        "'007",
        "1/5/2026",
        "12%",
    ]
    ws.update([typed], "A1", raw=False)
    assert ws.get("A1:J1") == [
        ["2", "2", "1.5", "42", "380501234567", "2026-01-05", "TRUE", "007", "1/5/2026", "12%"]
    ]
    assert ws.get("A1:J1", value_render_option=ValueRenderOption.unformatted) == [
        [2, 2, 1.5, 42, 380501234567, SERIAL_2026_01_05, True, "007", SERIAL_2026_01_05, 0.12]
    ]
    assert ws.get("A1:J1", value_render_option=ValueRenderOption.formula) == [
        [
            "=1+1",
            "=4/2",
            "=3/2",
            42,
            380501234567,
            SERIAL_2026_01_05,
            True,
            "007",
            SERIAL_2026_01_05,
            0.12,
        ]
    ]
    as_strings = ws.get(
        "F1:I1",
        value_render_option=ValueRenderOption.unformatted,
        date_time_render_option=DateTimeOption.formatted_string,
    )
    assert as_strings == [["2026-01-05", True, "007", "1/5/2026"]]


def test_user_entered_numbers_with_formats_display_as_typed(ws: gspread.Worksheet) -> None:
    """Scientific, currency, grouped numbers, times and date-times get a display format."""
    ws.update(
        [["1e3", "$1,234.5", "2,000,000.01", "9:30", "2026-01-05 09:30", "-0.5"]], "A1", raw=False
    )
    assert ws.get("A1:F1") == [
        ["1.00E+03", "$1,234.50", "2,000,000.01", "9:30:00 AM", "2026-01-05 9:30:00", "-0.5"]
    ]
    values = ws.get("A1:F1", value_render_option=ValueRenderOption.unformatted)[0]
    assert values == [
        1000,
        1234.5,
        2000000.01,
        pytest.approx(9.5 / 24),
        pytest.approx(SERIAL_2026_01_05 + 9.5 / 24),
        -0.5,
    ]


def test_user_entered_formulas_beyond_arithmetic_keep_their_text(ws: gspread.Worksheet) -> None:
    """Only constant arithmetic is evaluated; other formulas show #NAME?, 1/0 shows #DIV/0!."""
    ws.update([["=SUM(B1:B2)", "=1/0", '="a"&"b"', "=2^3*(1+1)"]], "A1", raw=False)
    assert ws.get("A1:D1") == [["#NAME?", "#DIV/0!", "ab", "16"]]
    assert ws.get("A1:D1", value_render_option=ValueRenderOption.formula) == [
        ["=SUM(B1:B2)", "=1/0", '="a"&"b"', "=2^3*(1+1)"]
    ]


def test_update_acell_is_always_user_entered(ws: gspread.Worksheet) -> None:
    """gspread's update_acell sends USER_ENTERED: "0042" loses its zeros (the hazard of 5)."""
    ws.update_acell("B2", "0042")
    assert ws.acell("B2").value == "42"


def test_plain_text_format_keeps_typed_text(ws: gspread.Worksheet) -> None:
    """A cell formatted as plain text keeps what a person types as text."""
    ws.format("A1:A5", {"numberFormat": {"type": "TEXT"}})
    ws.update([["0042"], ["2026-01-05"], ["=1+1"]], "A1", raw=False)
    assert ws.get("A1:A3", value_render_option=ValueRenderOption.unformatted) == [
        ["0042"],
        ["2026-01-05"],
        ["=1+1"],
    ]


def test_typed_date_format_sticks_to_the_cell(
    emu: SheetsEmulator, key: str, ws: gspread.Worksheet
) -> None:
    """A typed date leaves a date format behind: a later RAW number displays as a date."""
    emu.set_values(key, "Queue", [["2026-01-05"]])
    assert emu.cell(key, "Queue", "A1")["userEnteredFormat"] == {
        "numberFormat": {"type": "DATE", "pattern": "yyyy-mm-dd"}
    }
    ws.update([[SERIAL_2026_01_05 + 1]], "A1")
    assert ws.acell("A1").value == "2026-01-06"


# ---------------------------------------------------------------------------------------
# Reading quirks and ranges
# ---------------------------------------------------------------------------------------

GRID_4X4 = [["A1", "B1", "", "D1"], ["", "b2", "", ""], ["", "", "", ""], ["A4", "B4", "", "D4"]]


def test_reads_trim_empties_and_echo_normalised_ranges(
    sh: gspread.Spreadsheet, ws: gspread.Worksheet
) -> None:
    """Trailing empties are trimmed, empty ranges omit values, echoes are clipped A1."""
    ws.update(GRID_4X4, "A1")
    assert sh.values_get("'Queue'!A1:D4") == {
        "range": "Queue!A1:D4",
        "majorDimension": "ROWS",
        "values": [["A1", "B1", "", "D1"], ["", "b2"], [], ["A4", "B4", "", "D4"]],
    }
    assert sh.values_get("'Queue'!A5:D9") == {"range": "Queue!A5:D9", "majorDimension": "ROWS"}
    assert sh.values_get("'Queue'!A1:D4", params={"majorDimension": "COLUMNS"})["values"] == [
        ["A1", "", "", "A4"],
        ["B1", "b2", "", "B4"],
        [],
        ["D1", "", "", "D4"],
    ]
    assert ws.get("A1:C").range == "Queue!A1:C1000"
    assert sh.values_get("'Queue'!2:3")["range"] == "Queue!A2:Z3"
    assert sh.values_get("'Queue'!A1:1")["range"] == "Queue!A1:Z1"
    assert sh.values_get("'Queue'!B:B")["range"] == "Queue!B1:B1000"
    assert sh.values_get("'Queue'")["range"] == "Queue!A1:Z1000"
    assert sh.values_get("'Queue'!D4:A1")["range"] == "Queue!A1:D4"
    assert ws.get_all_values() == [
        ["A1", "B1", "", "D1"],
        ["", "b2", "", ""],
        ["", "", "", ""],
        ["A4", "B4", "", "D4"],
    ]


def test_titles_with_spaces_quotes_cyrillic_and_cell_names(
    emu: SheetsEmulator, key: str, sh: gspread.Spreadsheet
) -> None:
    """Quoted, unquoted, cell-like and Cyrillic titles resolve; echoes quote only when needed."""
    for title in ("Jon's Queue", "CRM26", "My Queue", "Очередь", "Queue_2"):
        emu.add_sheet(key, title, rows=10, cols=5)
        emu.set_values(key, title, [[title, "x"]])
    reply = sh.values_batch_get(
        ["'Jon''s Queue'!A1:B2", "'CRM26'!A1", "My Queue!A:A", "'Очередь'", "Queue_2!1:1"]
    )
    ranges = [vr["range"] for vr in reply["valueRanges"]]
    assert ranges == [
        "'Jon''s Queue'!A1:B2",
        "'CRM26'!A1",
        "'My Queue'!A1:A10",
        "'Очередь'!A1:E10",
        "Queue_2!A1:E1",
    ]
    assert [vr["values"][0][0] for vr in reply["valueRanges"]] == [
        "Jon's Queue",
        "CRM26",
        "My Queue",
        "Очередь",
        "Queue_2",
    ]
    jon = sh.worksheet("Jon's Queue")
    assert jon.batch_get(["A1:B1", "B1"]) == [[["Jon's Queue", "x"]], [["x"]]]
    assert jon.update([["y"]], "B1")["updatedRange"] == "'Jon''s Queue'!B1"


def test_unquoted_cell_like_title_is_read_as_a_cell(
    emu: SheetsEmulator, key: str, sh: gspread.Spreadsheet
) -> None:
    """An unquoted "D3" is cell D3 of the first sheet, not the sheet named D3."""
    emu.add_sheet(key, "D3", rows=5, cols=5)
    emu.set_values(key, "D3", [["in sheet D3"]])
    emu.set_values(key, "Queue", [["in Queue!D3"]], "D3")
    assert sh.values_get("D3") == {
        "range": "Queue!D3",
        "majorDimension": "ROWS",
        "values": [["in Queue!D3"]],
    }
    assert sh.values_get("'D3'")["values"] == [["in sheet D3"]]
    assert sh.values_get("'D3'")["range"] == "'D3'!A1:E5"


def test_unknown_sheet_is_unable_to_parse_range(sh: gspread.Spreadsheet) -> None:
    """A range naming no sheet answers 400 "Unable to parse range: <range>"."""
    for text in ("'Nope'!A1", "Nope!A1:B2", "'Queue'!A1:B2:C3", "'Queue'!"):
        with pytest.raises(APIError) as info:
            sh.values_get(text)
        assert _error(info) == {
            "code": 400,
            "message": f"Unable to parse range: {text}",
            "status": "INVALID_ARGUMENT",
        }


def test_writes_beyond_the_grid_are_rejected(
    emu: SheetsEmulator, key: str, sh: gspread.Spreadsheet, ws: gspread.Worksheet
) -> None:
    """values.update outside the grid: 400 "Range (...) exceeds grid limits"."""
    with pytest.raises(APIError) as info:
        ws.update([["a", "b", "c"]], "Y1")
    assert _error(info)["message"] == (
        "Range (Queue!AA1) exceeds grid limits. Max rows: 1000, max columns: 26"
    )
    log = sh.worksheet("QueueLog")
    log.resize(rows=2)
    with pytest.raises(APIError) as info:
        log.update([["x"]], "A3")
    assert _error(info)["message"] == (
        "Range (QueueLog!A3) exceeds grid limits. Max rows: 2, max columns: 26"
    )
    with pytest.raises(APIError) as info:
        ws.get("A1:AA2")
    assert _error(info)["code"] == 400
    assert emu.values(key, "Queue") == []


def test_writing_more_than_a_bounded_range_is_rejected(ws: gspread.Worksheet) -> None:
    """A multi-cell range bounds the write; a single cell is only an anchor."""
    with pytest.raises(APIError) as info:
        ws.update([["a", "b", "c"]], "A1:B1")
    assert _error(info)["message"] == (
        "Requested writing within range ['Queue'!A1:B1], but tried writing to column [C]"
    )
    with pytest.raises(APIError) as info:
        ws.update([["a"], ["b"]], "A1:A1")
    assert "tried writing to row [2]" in _error(info)["message"]
    assert ws.update([["a", "b"], ["c", "d"]], "B2")["updatedRange"] == "Queue!B2:C3"


def test_update_skips_nulls_and_clears_empty_strings(
    emu: SheetsEmulator, key: str, ws: gspread.Worksheet
) -> None:
    """null leaves a cell alone and is not counted; "" clears it and is counted."""
    emu.set_values(key, "Queue", [["a1", "b1"], ["a2", "b2"]])
    reply = ws.update([[None, "x"], ["", None]], "A1:B2")
    assert {
        k: reply[k] for k in ("updatedRange", "updatedRows", "updatedColumns", "updatedCells")
    } == {"updatedRange": "Queue!A1:B2", "updatedRows": 2, "updatedColumns": 2, "updatedCells": 2}
    assert emu.values(key, "Queue") == [["a1", "x"], ["", "b2"]]


def test_malformed_values_are_rejected_like_google(sh: gspread.Spreadsheet) -> None:
    """A non-list values field answers the recorded INVALID_ARGUMENT with fieldViolations."""
    with pytest.raises(APIError) as info:
        sh.values_update("'Queue'!A1", params={"valueInputOption": "RAW"}, body={"values": "X"})
    message = (
        "Invalid value at 'data.values' (type.googleapis.com/google.protobuf.ListValue), \"X\""
    )
    assert _error(info) == {
        "code": 400,
        "message": message,
        "status": "INVALID_ARGUMENT",
        "details": [
            {
                "@type": "type.googleapis.com/google.rpc.BadRequest",
                "fieldViolations": [{"field": "data.values", "description": message}],
            }
        ],
    }
    with pytest.raises(APIError) as info:
        sh.values_update("'Queue'!A1", body={"values": [["x"]]})
    assert _error(info)["message"] == "'valueInputOption' is required but not specified"


def test_invalid_json_body_is_400(emu: SheetsEmulator, key: str, session: EmulatorSession) -> None:
    """A body that is not JSON answers 400 INVALID_ARGUMENT and changes nothing."""
    url = f"{GOOGLE}/v4/spreadsheets/{key}:batchUpdate"
    reply = session.post(url, data=b'{"requests": [', headers={"Content-Type": "application/json"})
    assert reply.status_code == 400
    assert reply.json()["error"]["status"] == "INVALID_ARGUMENT"
    assert reply.headers["Content-Type"] == "application/json; charset=UTF-8"
    assert emu.requests[-1].body is None and emu.requests[-1].status == 400


# ---------------------------------------------------------------------------------------
# values.batchUpdate, append, clear
# ---------------------------------------------------------------------------------------


def test_values_batch_update_totals_and_atomicity(
    emu: SheetsEmulator, key: str, sh: gspread.Spreadsheet, ws: gspread.Worksheet
) -> None:
    """values.batchUpdate reports distinct totals and applies nothing when a range fails."""
    reply = ws.batch_update(
        [
            {"range": "A1:D1", "values": [["A1", "B1", "", "D1"]]},
            {"range": "A4:D4", "values": [["A4", "B4", "", "D4"]]},
        ]
    )
    assert {k: v for k, v in reply.items() if k != "responses"} == {
        "spreadsheetId": key,
        "totalUpdatedRows": 2,
        "totalUpdatedColumns": 4,
        "totalUpdatedCells": 8,
        "totalUpdatedSheets": 1,
    }
    assert reply["responses"][1] == {
        "spreadsheetId": key,
        "updatedRange": "Queue!A4:D4",
        "updatedRows": 1,
        "updatedColumns": 4,
        "updatedCells": 4,
    }
    with pytest.raises(APIError) as info:
        sh.values_batch_update(
            {
                "valueInputOption": "RAW",
                "data": [
                    {"range": "'Queue'!A1", "values": [["changed"]]},
                    {"range": "'Nope'!A1", "values": [["x"]]},
                ],
            }
        )
    assert _error(info)["message"] == "Unable to parse range: 'Nope'!A1"
    assert emu.values(key, "Queue")[0] == ["A1", "B1", "", "D1"]


def _fresh(emu: SheetsEmulator, gc: gspread.Client, rows: list[list[Any]]) -> gspread.Worksheet:
    key = emu.create_spreadsheet()
    if rows:
        emu.set_values(key, "Sheet1", rows, user_entered=False)
    return gc.open_by_key(key).sheet1


def test_append_table_detection_matches_recorded_google(
    emu: SheetsEmulator, gc: gspread.Client
) -> None:
    """values:append finds the "table" like Google, including the column shift after a gap."""
    row = ["a", "", "c"]
    reply = _fresh(emu, gc, []).append_rows([row])
    assert "tableRange" not in reply and reply["updates"]["updatedRange"] == "Sheet1!A1:C1"
    reply = _fresh(emu, gc, [row]).append_rows([row])
    assert (reply["tableRange"], reply["updates"]["updatedRange"]) == ("Sheet1!C1", "Sheet1!C2:E2")
    reply = _fresh(emu, gc, [row]).append_rows([row], table_range="A1")
    assert (reply["tableRange"], reply["updates"]["updatedRange"]) == ("Sheet1!A1", "Sheet1!A2:C2")
    full = [[f"{c}{r}" for c in "ABCDEFGHIJ"] for r in range(1, 5)]
    reply = _fresh(emu, gc, full).append_rows([["x"] * 10])
    assert (reply["tableRange"], reply["updates"]["updatedRange"]) == (
        "Sheet1!A1:J4",
        "Sheet1!A5:J5",
    )
    reply = _fresh(emu, gc, [["h"], [""], ["x"]]).append_rows([["y"]], table_range="A2")
    assert "tableRange" not in reply and reply["updates"]["updatedRange"] == "Sheet1!A2"


def test_append_insert_rows_shifts_rows_below_and_grows_the_grid(
    emu: SheetsEmulator, key: str, sh: gspread.Spreadsheet, ws: gspread.Worksheet
) -> None:
    """INSERT_ROWS inserts rows (moving what is below); OVERWRITE at the end grows the grid."""
    emu.set_values(key, "Queue", [["id", "v"], ["1", "a"], ["2", "b"]])
    emu.set_values(key, "Queue", [["manager's note"]], "A10")
    reply = ws.append_rows(
        [["3", "c"]], insert_data_option=InsertDataOption.insert_rows, table_range="A1"
    )
    assert reply["tableRange"] == "Queue!A1:B3"
    assert reply["updates"]["updatedRange"] == "Queue!A4:B4"
    assert emu.values(key, "Queue")[10] == ["manager's note"]
    assert emu.sheet_properties(key, "Queue")["gridProperties"]["rowCount"] == 1001
    log = sh.worksheet("QueueLog")
    log.resize(rows=3)
    emu.set_values(key, "QueueLog", [["t"], ["u"], ["v"]])
    reply = log.append_rows([["w", "1"], ["x", "2"]], table_range="A1")
    assert reply["updates"]["updatedRange"] == "QueueLog!A4:B5"
    assert emu.sheet_properties(key, "QueueLog")["gridProperties"]["rowCount"] == 5


def test_concurrent_appends_lose_no_rows(emu: SheetsEmulator, key: str) -> None:
    """Concurrent INSERT_ROWS appends from several clients keep every row."""
    emu.set_values(key, "Queue", [["id", "worker"]])
    errors: list[BaseException] = []
    barrier = threading.Barrier(6)

    def worker(n: int) -> None:
        try:
            with EmulatorSession(emu.base_url) as s:
                ws = gspread.Client(auth=None, session=s).open_by_key(key).sheet1
                barrier.wait(timeout=5)
                for i in range(5):
                    ws.append_rows(
                        [[f"{n}-{i}", str(n)]],
                        table_range="A1",
                        insert_data_option=InsertDataOption.insert_rows,
                    )
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=20)
    assert errors == []
    ids = [row[0] for row in emu.values(key, "Queue")[1:]]
    assert sorted(ids) == sorted(f"{n}-{i}" for n in range(6) for i in range(5))
    assert emu.count("values.append") == 30


def test_clear_and_batch_clear_keep_formats(
    emu: SheetsEmulator, key: str, ws: gspread.Worksheet
) -> None:
    """clear/batchClear echo the cleared ranges and clear values only."""
    emu.set_values(key, "Queue", [["a", "b", "c"], ["d", "e", "f"], ["g", "h", "i"]])
    ws.format("A1", {"textFormat": {"bold": True}})
    assert ws.batch_clear(["A1:B1", "C3"]) == {
        "spreadsheetId": key,
        "clearedRanges": ["Queue!A1:B1", "Queue!C3"],
    }
    assert emu.values(key, "Queue") == [["", "", "c"], ["d", "e", "f"], ["g", "h"]]
    assert ws.clear() == {"spreadsheetId": key, "clearedRange": "Queue!A1:Z1000"}
    assert emu.values(key, "Queue") == []
    assert emu.cell(key, "Queue", "A1")["userEnteredFormat"]["textFormat"] == {"bold": True}


# ---------------------------------------------------------------------------------------
# spreadsheets.batchUpdate
# ---------------------------------------------------------------------------------------


def _update_cells(
    sheet_id: int, row: int, values: list[dict[str, Any]], fields: str = "userEnteredValue"
) -> dict[str, Any]:
    return {
        "updateCells": {
            "rows": [{"values": values}],
            "fields": fields,
            "start": {"sheetId": sheet_id, "rowIndex": row, "columnIndex": 0},
        }
    }


def _text(value: str) -> dict[str, Any]:
    return {"userEnteredValue": {"stringValue": value}}


def test_batch_update_is_atomic(emu: SheetsEmulator, key: str, sh: gspread.Spreadsheet) -> None:
    """One bad sub-request fails the whole batchUpdate (Invalid requests[i]) and applies nothing."""
    emu.set_values(key, "Queue", [["before"]])
    with pytest.raises(APIError) as info:
        sh.batch_update(
            {
                "requests": [
                    _update_cells(0, 0, [_text("after")]),
                    {"appendDimension": {"sheetId": 0, "dimension": "ROWS", "length": 5}},
                    {"deleteSheet": {"sheetId": 999}},
                ]
            }
        )
    assert _error(info) == {
        "code": 400,
        "status": "INVALID_ARGUMENT",
        "message": "Invalid requests[2].deleteSheet: No sheet with id: 999",
    }
    assert emu.values(key, "Queue") == [["before"]]
    assert emu.sheet_properties(key, "Queue")["gridProperties"]["rowCount"] == 1000
    assert emu.requests[-1].kinds == ["updateCells", "appendDimension", "deleteSheet"]
    for bad, message in (
        ({"frobnicate": {}}, 'Unknown name "frobnicate"'),
        ({"mergeCells": {}}, "not supported by sheets_emulator"),
    ):
        with pytest.raises(APIError) as info:
            sh.batch_update({"requests": [bad]})
        assert message in _error(info)["message"]


def _append_body(sheet_id: int, size: int) -> dict[str, Any]:
    """An appendCells batchUpdate whose JSON, as requests sends it, is exactly ``size`` bytes."""
    cell = 40_000

    def body(lengths: list[int]) -> dict[str, Any]:
        rows = [{"values": [_text("x" * n)]} for n in lengths]
        append = {"sheetId": sheet_id, "rows": rows, "fields": "userEnteredValue"}
        return {"requests": [{"appendCells": append}]}

    lengths: list[int] = []
    while len(json.dumps(body([*lengths, cell, 0]))) <= size:
        lengths.append(cell)
    lengths.append(0)
    lengths[-1] = size - len(json.dumps(body(lengths)))
    assert len(json.dumps(body(lengths))) == size
    return body(lengths)


@pytest.mark.slow
def test_request_body_over_ten_megabytes_is_refused(
    emu: SheetsEmulator, key: str, sh: gspread.Spreadsheet
) -> None:
    """A body of 10,485,761 bytes answers 400 "Request payload size exceeds the limit:
    10485760 bytes." and applies nothing; 10,485,760 bytes exactly is accepted."""
    sheet_id = emu.sheet_id(key, "Queue")
    with pytest.raises(APIError) as info:
        sh.batch_update(_append_body(sheet_id, 10_485_761))
    assert _error(info) == {
        "code": 400,
        "status": "INVALID_ARGUMENT",
        "message": "Request payload size exceeds the limit: 10485760 bytes.",
    }
    assert emu.values(key, "Queue") == [] and emu.requests[-1].counted
    fits = _append_body(sheet_id, 10_485_760)
    sh.batch_update(fits)
    assert len(emu.values(key, "Queue")) == len(fits["requests"][0]["appendCells"]["rows"])


def test_update_cells_and_append_cells_in_one_write(
    emu: SheetsEmulator, key: str, sh: gspread.Spreadsheet
) -> None:
    """updateCells strings stay text; appendCells goes after the last row with a value."""
    log_id = emu.sheet_id(key, "QueueLog")
    emu.set_values(key, "QueueLog", [["ts", "event"], ["t1", "claimed"]])
    emu.set_values(key, "QueueLog", [["stray note"]], "D20")
    reply = sh.batch_update(
        {
            "requests": [
                _update_cells(
                    0,
                    1,
                    [
                        _text("=1+1"),
                        _text("007"),
                        _text("2026-01-05"),
                        {"userEnteredValue": {"numberValue": 5}},
                        {"userEnteredValue": {"boolValue": True}},
                        {"userEnteredValue": {"formulaValue": "=2*3"}},
                    ],
                ),
                {
                    "appendCells": {
                        "sheetId": log_id,
                        "rows": [{"values": [_text("t2"), _text("done")]}],
                        "fields": "userEnteredValue",
                    }
                },
            ]
        }
    )
    assert reply == {"spreadsheetId": key, "replies": [{}, {}]}
    assert emu.values(key, "Queue") == [[], ["=1+1", "007", "2026-01-05", "5", "TRUE", "6"]]
    log = emu.values(key, "QueueLog")
    assert len(log) == 21 and log[20] == ["t2", "done"]
    emu_log_rows = emu.sheet_properties(key, "QueueLog")["gridProperties"]["rowCount"]
    sh.batch_update(
        {
            "requests": [
                {
                    "appendCells": {
                        "sheetId": log_id,
                        "fields": "userEnteredValue",
                        "rows": [{"values": [_text(f"r{i}")]} for i in range(emu_log_rows)],
                    }
                }
            ]
        }
    )
    assert emu.sheet_properties(key, "QueueLog")["gridProperties"]["rowCount"] == 21 + 1000


def test_update_cells_masks_clear_what_they_name(
    emu: SheetsEmulator, key: str, sh: gspread.Spreadsheet
) -> None:
    """updateCells clears what its mask names but the request omits, and nothing else."""
    emu.set_values(key, "Queue", [["a", "b", "c"], ["d", "e", "f"]])
    sh.batch_update(
        {
            "requests": [
                _update_cells(0, 0, [{}, _text("B")]),
                _update_cells(0, 1, [{"note": "checked"}], fields="note"),
            ]
        }
    )
    assert emu.values(key, "Queue") == [["", "B", "c"], ["d", "e", "f"]]
    assert emu.cell(key, "Queue", "A2") == {
        "userEnteredValue": {"stringValue": "d"},
        "effectiveValue": {"stringValue": "d"},
        "formattedValue": "d",
        "note": "checked",
    }
    sh.batch_update(
        {
            "requests": [
                {
                    "updateCells": {
                        "rows": [{"values": [_text("x")]}],
                        "fields": "userEnteredValue",
                        "range": {
                            "sheetId": 0,
                            "startRowIndex": 0,
                            "endRowIndex": 2,
                            "startColumnIndex": 0,
                            "endColumnIndex": 3,
                        },
                    }
                }
            ]
        }
    )
    assert emu.values(key, "Queue") == [["x"]]
    assert emu.cell(key, "Queue", "A2") == {"note": "checked"}


def test_add_rename_hide_and_delete_sheets(
    emu: SheetsEmulator, key: str, sh: gspread.Spreadsheet
) -> None:
    """addSheet replies with properties; duplicate titles and hiding every sheet are 400."""
    archive = sh.add_worksheet("Archive", rows=10, cols=5)
    assert (archive.index, archive.row_count, archive.col_count) == (2, 10, 5)
    assert archive.id == emu.sheet_id(key, "Archive")
    with pytest.raises(APIError) as info:
        sh.add_worksheet("queue", rows=1, cols=1)
    assert _error(info)["message"] == (
        "Invalid requests[0].addSheet: A sheet with the name "
        '"queue" already exists. Please enter another name.'
    )
    archive.update_title("Archive 2026")
    assert [w.title for w in sh.worksheets()] == ["Queue", "QueueLog", "Archive 2026"]
    sh.worksheet("QueueLog").hide()
    archive.hide()
    with pytest.raises(APIError) as info:
        sh.sheet1.hide()
    assert _error(info)["message"] == (
        "Invalid requests[0].updateSheetProperties: You can't hide all the sheets in a document."
    )
    assert emu.sheet_properties(key, "QueueLog")["hidden"] is True
    sh.del_worksheet(archive)
    assert "Archive 2026" not in [w.title for w in sh.worksheets()]


def test_grid_growth_is_capped_at_ten_million_cells(sh: gspread.Spreadsheet) -> None:
    """Growing the workbook past 10,000,000 cells is refused and changes nothing."""
    with pytest.raises(APIError) as info:
        sh.add_worksheet("Huge", rows=400_000, cols=26)
    assert _error(info)["message"] == (
        "Invalid requests[0].addSheet: This action would increase the number of cells in the "
        "workbook above the limit of 10000000 cells."
    )
    with pytest.raises(APIError):
        sh.sheet1.resize(rows=390_000)
    assert sh.sheet1.row_count == 1000
    assert [w.title for w in sh.worksheets()] == ["Queue", "QueueLog"]


def test_freeze_and_resize(
    emu: SheetsEmulator, key: str, sh: gspread.Spreadsheet, ws: gspread.Worksheet
) -> None:
    """Frozen counts appear when set and vanish at 0; shrinking the grid drops data."""
    ws.freeze(rows=1, cols=2)
    grid = sh.fetch_sheet_metadata()["sheets"][0]["properties"]["gridProperties"]
    assert grid == {
        "rowCount": 1000,
        "columnCount": 26,
        "frozenRowCount": 1,
        "frozenColumnCount": 2,
    }
    ws.freeze(rows=0, cols=0)
    grid = sh.fetch_sheet_metadata()["sheets"][0]["properties"]["gridProperties"]
    assert grid == {"rowCount": 1000, "columnCount": 26}
    assert emu.sheet_properties(key, "Queue")["gridProperties"]["frozenRowCount"] == 0
    emu.set_values(key, "Queue", [["a", "b", "c"], ["d", "e", "f"], ["g", "h", "i"]])
    ws.resize(rows=2, cols=2)
    assert emu.values(key, "Queue") == [["a", "b"], ["d", "e"]]
    assert sh.values_get("'Queue'")["range"] == "Queue!A1:B2"


SORT_ROWS: list[list[Any]] = [
    ["id", "n"],
    ["r1", 10],
    ["r2", "apple"],
    ["r3", 2],
    ["r4", None],
    ["r5", "Banana"],
    ["r6", 2],
    ["r7", True],
]


def test_sort_range_orders_numbers_then_text_then_booleans(
    emu: SheetsEmulator, key: str, ws: gspread.Worksheet
) -> None:
    """sortRange is stable: numbers, then text, then booleans; blanks always last."""
    emu.set_values(key, "Queue", SORT_ROWS, user_entered=False)
    ws.sort((2, "asc"), range="A2:B8")
    assert [r[0] for r in emu.values(key, "Queue")[1:]] == [
        "r3",
        "r6",
        "r1",
        "r2",
        "r5",
        "r7",
        "r4",
    ]
    ws.sort((2, "des"), range="A2:B8")
    assert [r[0] for r in emu.values(key, "Queue")[1:]] == [
        "r7",
        "r5",
        "r2",
        "r1",
        "r3",
        "r6",
        "r4",
    ]
    with pytest.raises(APIError):
        ws.sort((5, "asc"), range="A2:B8")


def test_person_edits_between_requests(
    emu: SheetsEmulator, key: str, ws: gspread.Worksheet
) -> None:
    """before_next and the person helpers edit the grid between requests, uncounted."""
    emu.set_values(
        key,
        "Queue",
        [
            ["id", "status", "note"],
            ["t3", "done", ""],
            ["t1", "pending", "x"],
            ["t2", "running", ""],
        ],
    )
    emu.reset_counts()
    emu.before_next(lambda e: e.sort_rows(key, "Queue", 0), op="values.get")
    assert [r[0] for r in ws.get("A2:A4")] == ["t1", "t2", "t3"]
    emu.insert_rows(key, "Queue", 3, count=2)
    assert [r[0] if r else "" for r in ws.get("A1:A6")] == ["id", "t1", "", "", "t2", "t3"]
    emu.delete_rows(key, "Queue", 3, count=2)
    emu.move_column(key, "Queue", 0, 2)
    assert ws.get("A1:C1") == [["status", "note", "id"]]
    emu.move_column(key, "Queue", 2, 0)
    assert ws.get("A1:C2") == [["id", "status", "note"], ["t1", "pending", "x"]]
    assert emu.count() == 4 and emu.count("values.get") == 4


def test_after_hooks_run_between_the_kth_request_and_the_next(
    emu: SheetsEmulator, key: str, ws: gspread.Worksheet
) -> None:
    """after(k) edits the grid right after the k-th counted request (same numbering as
    count(), failed requests not numbered), before the next is handled; each hook runs once."""
    emu.set_values(key, "Queue", [["id"], ["t3"], ["t1"], ["t2"]])
    emu.reset_counts()
    seen: list[int] = []
    emu.after(1, lambda e: seen.append(e.count()))
    emu.after(2, lambda e: e.reverse_rows(key, "Queue"))
    emu.after(2, lambda e: seen.append(e.count()))
    emu.after(9, lambda e: seen.append(-1))
    assert emu.pending_hooks() == 4
    assert ws.get("A2:A4") == [["t3"], ["t1"], ["t2"]]  # request 1: hook 1 after the read
    assert seen == [1]
    emu.fail_next(503)  # answered 503: not numbered, no hook
    with pytest.raises(APIError):
        ws.get("A2:A4")
    assert seen == [1] and emu.count() == 1
    assert ws.get("A2:A4") == [["t3"], ["t1"], ["t2"]]  # request 2: reversed after it
    assert seen == [1, 2] and emu.count() == 2
    assert ws.get("A2:A4") == [["t2"], ["t1"], ["t3"]]  # request 3 sees the reversal
    assert emu.pending_hooks() == 1
    emu.reset_counts()  # numbering starts again; the hook for 9 is still waiting
    for _ in range(9):
        ws.get("A1")
    assert seen == [1, 2, -1] and emu.pending_hooks() == 0
    emu.after(1, lambda e: seen.append(0))
    emu.clear_faults()  # forgets hooks not run yet
    ws.get("A1")
    assert seen == [1, 2, -1]
    with pytest.raises(ValueError):
        emu.after(0, lambda e: None)


def test_reverse_rows_and_copy_spreadsheet(emu: SheetsEmulator, key: str) -> None:
    """reverse_rows reverses the data rows under the header (blank rows too); a copied
    spreadsheet is independent of its original."""
    emu.set_values(key, "Queue", [["id", "n"], ["a", "1"], ["", ""], ["c", "3"]])
    copy_key = emu.copy_spreadsheet(key)
    emu.reverse_rows(key, "Queue")
    assert emu.values(key, "Queue") == [["id", "n"], ["c", "3"], [], ["a", "1"]]
    assert emu.values(copy_key, "Queue") == [["id", "n"], ["a", "1"], [], ["c", "3"]]
    assert emu.sheet_id(copy_key, "QueueLog") == emu.sheet_id(key, "QueueLog")


def test_structural_edits_move_named_and_protected_ranges(
    emu: SheetsEmulator, key: str, sh: gspread.Spreadsheet, ws: gspread.Worksheet
) -> None:
    """Row inserts and deletes move named and protected ranges like Google."""
    ws.define_named_range("A2:B3", "Lease")
    reply = sh.batch_update(
        {
            "requests": [
                {
                    "addProtectedRange": {
                        "protectedRange": {
                            "range": {"sheetId": 0, "startRowIndex": 4, "endRowIndex": 5},
                            "warningOnly": True,
                        }
                    }
                }
            ]
        }
    )
    protected_id = reply["replies"][0]["addProtectedRange"]["protectedRange"]["protectedRangeId"]
    sh.batch_update(
        {
            "requests": [
                {
                    "insertDimension": {
                        "range": {
                            "sheetId": 0,
                            "dimension": "ROWS",
                            "startIndex": 0,
                            "endIndex": 2,
                        },
                        "inheritFromBefore": False,
                    }
                }
            ]
        }
    )
    assert emu.named_ranges(key)[0]["range"] == {
        "startRowIndex": 3,
        "endRowIndex": 5,
        "startColumnIndex": 0,
        "endColumnIndex": 2,
    }
    protected = emu.metadata(key)["sheets"][0]["protectedRanges"][0]
    assert protected["protectedRangeId"] == protected_id
    assert protected["range"] == {"startRowIndex": 6, "endRowIndex": 7}
    ws.delete_rows(4)  # 1-based row 4 = index 3: the lease shrinks to one row
    assert emu.named_ranges(key)[0]["range"]["endRowIndex"] == 4
    emu.delete_rows(key, "Queue", 4)
    assert sh.list_named_ranges() == []
    with pytest.raises(APIError) as info:
        ws.define_named_range("A1", "Lease")
    assert "already exists" in _error(info)["message"]


def test_column_inserts_deletes_and_moves_shift_cells_and_ranges(
    emu: SheetsEmulator, key: str, sh: gspread.Spreadsheet
) -> None:
    """Column insert/delete/move shift cells, formats and named ranges; the grid resizes."""
    emu.set_values(key, "Queue", [["id", "status", "note"], ["t1", "done", "x"]])
    sh.batch_update(
        {
            "requests": [
                {
                    "repeatCell": {
                        "range": {
                            "sheetId": 0,
                            "startColumnIndex": 1,
                            "endColumnIndex": 2,
                            "startRowIndex": 0,
                            "endRowIndex": 1,
                        },
                        "cell": {"userEnteredFormat": {"textFormat": {"bold": True}}},
                        "fields": "userEnteredFormat.textFormat.bold",
                    }
                },
                {
                    "addNamedRange": {
                        "namedRange": {
                            "namedRangeId": "status",
                            "name": "Status",
                            "range": {"sheetId": 0, "startColumnIndex": 1, "endColumnIndex": 2},
                        }
                    }
                },
                {
                    "insertDimension": {
                        "range": {
                            "sheetId": 0,
                            "dimension": "COLUMNS",
                            "startIndex": 0,
                            "endIndex": 2,
                        }
                    }
                },
            ]
        }
    )
    assert emu.values(key, "Queue") == [
        ["", "", "id", "status", "note"],
        ["", "", "t1", "done", "x"],
    ]
    assert emu.cell(key, "Queue", "D1")["userEnteredFormat"] == {"textFormat": {"bold": True}}
    assert emu.named_ranges(key)[0]["range"] == {"startColumnIndex": 3, "endColumnIndex": 4}
    assert emu.sheet_properties(key, "Queue")["gridProperties"]["columnCount"] == 28
    sh.batch_update(
        {
            "requests": [
                {
                    "deleteDimension": {
                        "range": {
                            "sheetId": 0,
                            "dimension": "COLUMNS",
                            "startIndex": 0,
                            "endIndex": 2,
                        }
                    }
                },
                {
                    "moveDimension": {
                        "source": {
                            "sheetId": 0,
                            "dimension": "COLUMNS",
                            "startIndex": 2,
                            "endIndex": 3,
                        },
                        "destinationIndex": 0,
                    }
                },
            ]
        }
    )
    assert emu.values(key, "Queue") == [["note", "id", "status"], ["x", "t1", "done"]]
    assert emu.named_ranges(key)[0]["range"] == {"startColumnIndex": 2, "endColumnIndex": 3}
    with pytest.raises(APIError) as info:
        sh.batch_update(
            {
                "requests": [
                    {
                        "deleteDimension": {
                            "range": {
                                "sheetId": 0,
                                "dimension": "COLUMNS",
                                "startIndex": 0,
                                "endIndex": 26,
                            }
                        }
                    }
                ]
            }
        )
    assert "You can't delete all the columns on the sheet." in _error(info)["message"]


def test_validation_conditional_format_filter_and_protection_are_stored(
    emu: SheetsEmulator, key: str, sh: gspread.Spreadsheet, ws: gspread.Worksheet
) -> None:
    """Validation, conditional formats, filters, protection are stored and listed like Google."""
    ws.add_validation(
        "C2:C5",
        ValidationConditionType.one_of_list,
        ["pending", "done"],
        strict=True,
        showCustomUi=True,
    )
    assert emu.cell(key, "Queue", "C3")["dataValidation"] == {
        "condition": {
            "type": "ONE_OF_LIST",
            "values": [{"userEnteredValue": "pending"}, {"userEnteredValue": "done"}],
        },
        "showCustomUi": True,
        "strict": True,
    }
    rule = {
        "ranges": [{"sheetId": 0, "startColumnIndex": 2, "endColumnIndex": 3}],
        "booleanRule": {
            "condition": {"type": "TEXT_EQ", "values": [{"userEnteredValue": "failed"}]},
            "format": {"backgroundColor": {"red": 1}},
        },
    }
    reply = sh.batch_update(
        {
            "requests": [
                {"addConditionalFormatRule": {"rule": rule, "index": 0}},
                {"setBasicFilter": {"filter": {"range": {"sheetId": 0, "startRowIndex": 0}}}},
                {
                    "addProtectedRange": {
                        "protectedRange": {
                            "range": {"sheetId": 0, "startRowIndex": 0, "endRowIndex": 1},
                            "description": "header",
                            "warningOnly": True,
                        }
                    }
                },
                {
                    "updateDimensionProperties": {
                        "range": {
                            "sheetId": 0,
                            "dimension": "COLUMNS",
                            "startIndex": 0,
                            "endIndex": 1,
                        },
                        "properties": {"pixelSize": 240},
                        "fields": "pixelSize",
                    }
                },
                {"autoResizeDimensions": {"dimensions": {"sheetId": 0, "dimension": "COLUMNS"}}},
            ]
        }
    )
    protected = reply["replies"][2]["addProtectedRange"]["protectedRange"]
    assert protected == {
        "protectedRangeId": protected["protectedRangeId"],
        "range": {"startRowIndex": 0, "endRowIndex": 1},
        "description": "header",
        "warningOnly": True,
        "requestingUserCanEdit": True,
        "editors": {},
    }
    sheet = emu.metadata(key)["sheets"][0]
    assert sheet["conditionalFormats"][0]["ranges"] == [
        {"startColumnIndex": 2, "endColumnIndex": 3}
    ]
    assert sheet["basicFilter"] == {"range": {"startRowIndex": 0}}
    assert sheet["protectedRanges"][0]["editors"] == {"users": [emu.caller_email]}
    grid = emu.metadata(key, include_grid_data=True)["sheets"][0]["data"][0]
    assert grid["columnMetadata"][0] == {"pixelSize": 240}
    reply = sh.batch_update(
        {
            "requests": [
                {"deleteConditionalFormatRule": {"sheetId": 0, "index": 0}},
                {"clearBasicFilter": {"sheetId": 0}},
                {"deleteProtectedRange": {"protectedRangeId": protected["protectedRangeId"]}},
            ]
        }
    )
    assert reply["replies"][0] == {
        "deleteConditionalFormatRule": {
            "rule": {**rule, "ranges": [{"startColumnIndex": 2, "endColumnIndex": 3}]}
        }
    }
    sheet = emu.metadata(key)["sheets"][0]
    assert set(sheet) == {"properties"}


# ---------------------------------------------------------------------------------------
# Named ranges: the compare-and-set of section 9
# ---------------------------------------------------------------------------------------


def _lease_swap(old_id: str, new_id: str) -> dict[str, Any]:
    return {
        "requests": [
            {"deleteNamedRange": {"namedRangeId": old_id}},
            {
                "addNamedRange": {
                    "namedRange": {
                        "namedRangeId": new_id,
                        "name": "Lease",
                        "range": {
                            "sheetId": 0,
                            "startRowIndex": 0,
                            "endRowIndex": 1,
                            "startColumnIndex": 0,
                            "endColumnIndex": 1,
                        },
                    }
                }
            },
        ]
    }


def test_named_ranges_through_gspread(
    emu: SheetsEmulator, key: str, sh: gspread.Spreadsheet, ws: gspread.Worksheet
) -> None:
    """define/list/delete named ranges: ids are digit strings, sheetId 0 is omitted."""
    reply = ws.define_named_range("A1:B2", "Lease")
    named = reply["replies"][0]["addNamedRange"]["namedRange"]
    assert re.fullmatch(r"[0-9]+", named["namedRangeId"])
    assert named == {
        "namedRangeId": named["namedRangeId"],
        "name": "Lease",
        "range": {"startRowIndex": 0, "endRowIndex": 2, "startColumnIndex": 0, "endColumnIndex": 2},
    }
    assert sh.list_named_ranges() == [named] == emu.named_ranges(key)
    assert sh.fetch_sheet_metadata()["namedRanges"] == [named]
    ws.delete_named_range(named["namedRangeId"])
    assert sh.fetch_sheet_metadata(params={"fields": "namedRanges"}) == {}
    assert "namedRanges" not in sh.fetch_sheet_metadata()


def test_add_named_range_refuses_taken_ids_and_names(sh: gspread.Spreadsheet) -> None:
    """addNamedRange refuses a taken id or name; deleteNamedRange refuses an unknown id."""
    add_again = {"requests": _lease_swap("x", "v1")["requests"][1:]}
    sh.batch_update(add_again)
    with pytest.raises(APIError) as info:
        sh.batch_update(add_again)
    assert _error(info)["message"].startswith("Invalid requests[0].addNamedRange: ")
    other_name = json.loads(json.dumps(add_again).replace('"Lease"', '"Other"'))
    with pytest.raises(APIError) as info:
        sh.batch_update(other_name)
    assert "v1" in _error(info)["message"]
    with pytest.raises(APIError) as info:
        sh.batch_update(_lease_swap("unknown", "v2"))
    assert _error(info)["message"].startswith("Invalid requests[0].deleteNamedRange: ")
    assert [n["namedRangeId"] for n in sh.list_named_ranges()] == ["v1"]


def test_update_named_range_renames_and_moves(
    emu: SheetsEmulator, key: str, sh: gspread.Spreadsheet
) -> None:
    """updateNamedRange applies only the masked fields; an unknown id or a taken name is 400."""
    sh.batch_update({"requests": _lease_swap("x", "v1")["requests"][1:]})
    sh.batch_update(
        {
            "requests": [
                {
                    "addNamedRange": {
                        "namedRange": {
                            "name": "Other",
                            "range": {"sheetId": 0, "startRowIndex": 5, "endRowIndex": 6},
                        }
                    }
                }
            ]
        }
    )
    sh.batch_update(
        {
            "requests": [
                {
                    "updateNamedRange": {
                        "namedRange": {
                            "namedRangeId": "v1",
                            "name": "Lease2",
                            "range": {"sheetId": 0, "startRowIndex": 9, "endRowIndex": 10},
                        },
                        "fields": "name",
                    }
                }
            ]
        }
    )
    lease = next(n for n in emu.named_ranges(key) if n["namedRangeId"] == "v1")
    assert lease["name"] == "Lease2" and lease["range"]["startRowIndex"] == 0
    log_id = emu.sheet_id(key, "QueueLog")
    sh.batch_update(
        {
            "requests": [
                {
                    "updateNamedRange": {
                        "namedRange": {
                            "namedRangeId": "v1",
                            "range": {"sheetId": log_id, "startRowIndex": 2, "endRowIndex": 3},
                        },
                        "fields": "range",
                    }
                }
            ]
        }
    )
    lease = next(n for n in emu.named_ranges(key) if n["namedRangeId"] == "v1")
    assert lease == {
        "namedRangeId": "v1",
        "name": "Lease2",
        "range": {"sheetId": log_id, "startRowIndex": 2, "endRowIndex": 3},
    }
    for named, message in (
        ({"namedRangeId": "nope", "name": "X"}, "nope"),
        ({"namedRangeId": "v1", "name": "other"}, "already exists"),
    ):
        with pytest.raises(APIError) as info:
            sh.batch_update(
                {"requests": [{"updateNamedRange": {"namedRange": named, "fields": "name"}}]}
            )
        assert _error(info)["message"].startswith("Invalid requests[0].updateNamedRange: ")
        assert message in _error(info)["message"]


def test_named_range_compare_and_set_has_exactly_one_winner(
    emu: SheetsEmulator, key: str, sh: gspread.Spreadsheet
) -> None:
    """Racing delete+add of the same named range: exactly one batchUpdate wins."""
    sh.batch_update({"requests": _lease_swap("x", "v1")["requests"][1:]})
    barrier = threading.Barrier(2)
    outcomes: dict[str, Any] = {}

    def contender(name: str) -> None:
        with EmulatorSession(emu.base_url) as s:
            client = gspread.Client(auth=None, session=s)
            barrier.wait(timeout=5)
            try:
                client.http_client.batch_update(key, _lease_swap("v1", f"v2-{name}"))
                outcomes[name] = "won"
            except APIError as exc:
                outcomes[name] = exc.error["message"]

    threads = [threading.Thread(target=contender, args=(n,)) for n in ("a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=10)
    winners = [n for n, outcome in outcomes.items() if outcome == "won"]
    assert len(outcomes) == 2 and len(winners) == 1
    loser = next(outcome for outcome in outcomes.values() if outcome != "won")
    assert loser.startswith("Invalid requests[0].deleteNamedRange: ")
    assert [n["namedRangeId"] for n in emu.named_ranges(key)] == [f"v2-{winners[0]}"]


# ---------------------------------------------------------------------------------------
# Metadata: field masks, ranges, grid data
# ---------------------------------------------------------------------------------------


def test_fields_mask_filters_the_metadata(
    emu: SheetsEmulator, key: str, sh: gspread.Spreadsheet
) -> None:
    """``fields`` is a real partial-response mask; ``ranges`` limits sheets and grid data."""
    emu.set_values(key, "Queue", [["a", "b", "c"], [1]])
    meta = sh.fetch_sheet_metadata(
        params={
            "fields": "properties(title,timeZone),sheets(properties(sheetId,title,gridProperties),"
            "data.rowData.values.formattedValue),namedRanges",
            "ranges": ["'Queue'!A1:B2"],
        }
    )
    assert meta == {
        "properties": {"title": "sheetq test", "timeZone": "Etc/GMT"},
        "sheets": [
            {
                "properties": {
                    "sheetId": 0,
                    "title": "Queue",
                    "gridProperties": {"rowCount": 1000, "columnCount": 26},
                },
                "data": [
                    {
                        "rowData": [
                            {"values": [{"formattedValue": "a"}, {"formattedValue": "b"}]},
                            {"values": [{"formattedValue": "1"}]},
                        ]
                    }
                ],
            }
        ],
    }
    assert sh.fetch_sheet_metadata(params={"fields": "sheets/properties/title"}) == {
        "sheets": [{"properties": {"title": "Queue"}}, {"properties": {"title": "QueueLog"}}]
    }
    indexes = sh.fetch_sheet_metadata(params={"fields": "spreadsheetId,sheets.properties.index"})
    assert indexes == {
        "spreadsheetId": key,
        "sheets": [{"properties": {"index": 0}}, {"properties": {"index": 1}}],
    }


def test_include_grid_data_returns_typed_cells(
    emu: SheetsEmulator, key: str, sh: gspread.Spreadsheet
) -> None:
    """includeGridData with ranges returns the named sheets' typed cells with offsets."""
    emu.set_values(key, "QueueLog", [["", "", ""], ["", "x", "=1+2"], ["", "", "TRUE"]])
    meta = sh.fetch_sheet_metadata(params={"includeGridData": "true", "ranges": "'QueueLog'!B2:C3"})
    assert [s["properties"]["title"] for s in meta["sheets"]] == ["QueueLog"]
    data = meta["sheets"][0]["data"]
    assert len(data) == 1 and (data[0]["startRow"], data[0]["startColumn"]) == (1, 1)
    cells = data[0]["rowData"][0]["values"]
    assert cells[1]["userEnteredValue"] == {"formulaValue": "=1+2"}
    assert cells[1]["effectiveValue"] == {"numberValue": 3}
    assert cells[1]["formattedValue"] == "3"
    assert data[0]["rowData"][1]["values"][0] == {}
    assert data[0]["rowData"][1]["values"][1]["effectiveValue"] == {"boolValue": True}
    assert data[0]["rowMetadata"] == [{"pixelSize": 21}] * 2
    assert data[0]["columnMetadata"] == [{"pixelSize": 100}] * 2


# ---------------------------------------------------------------------------------------
# Faults, the request log and counters
# ---------------------------------------------------------------------------------------


def test_fail_next_429_is_not_applied_nor_counted(
    emu: SheetsEmulator, key: str, ws: gspread.Worksheet
) -> None:
    """429 carries the quota envelope and Retry-After, applies nothing and is not counted."""
    emu.reset_counts()
    emu.fail_next(429, retry_after=7, op="values.update")
    with pytest.raises(APIError) as info:
        ws.update([["x"]], "A1")
    error = _error(info)
    assert (error["code"], error["status"]) == (429, "RESOURCE_EXHAUSTED")
    assert error["message"].startswith("Quota exceeded for quota metric 'Write requests'")
    assert error["details"][0]["reason"] == "RATE_LIMIT_EXCEEDED"
    assert info.value.response.headers["Retry-After"] == "7"
    assert emu.values(key, "Queue") == [] and emu.count() == 0
    ws.update([["x"]], "A1")
    assert emu.count() == 1 and emu.count("values.update") == 1
    emu.fail_next(429, op="values.get", retry_after=1.5)
    with pytest.raises(APIError) as info:
        ws.get("A1")
    assert "'Read requests'" in _error(info)["message"]
    assert info.value.response.headers["Retry-After"] == "1.5"
    assert [r.status for r in emu.requests] == [429, 200, 429]
    assert [r.counted for r in emu.requests] == [False, True, False]


def test_fail_next_5xx_envelopes_times_and_op_filter(
    emu: SheetsEmulator, ws: gspread.Worksheet
) -> None:
    """5xx faults use Google's envelopes; ``times`` and ``op`` pick the requests they hit."""
    emu.reset_counts()
    emu.fail_next(500, op="values.get")
    emu.fail_next(503, times=2, op="values.get")
    emu.fail_next(502, op="values.get", message="upstream reset")
    ws.update([["untouched by the read faults"]], "A1")
    errors = []
    for _ in range(4):
        with pytest.raises(APIError) as info:
            ws.get("A1")
        errors.append(_error(info))
    assert errors[0] == {
        "code": 500,
        "message": "Internal error encountered.",
        "status": "INTERNAL",
    }
    assert (
        errors[1]
        == errors[2]
        == {
            "code": 503,
            "status": "UNAVAILABLE",
            "message": "The service is currently unavailable.",
        }
    )
    assert errors[3]["message"] == "upstream reset"
    assert emu.pending_faults() == 0
    assert ws.get("A1") == [["untouched by the read faults"]]
    assert emu.count() == 2


def test_fault_op_can_name_a_batch_update_kind(
    emu: SheetsEmulator, key: str, sh: gspread.Spreadsheet
) -> None:
    """op="spreadsheets.batchUpdate:appendCells" only hits batches containing appendCells."""
    emu.fail_next(503, op="spreadsheets.batchUpdate:appendCells")
    sh.batch_update({"requests": [_update_cells(0, 0, [_text("ok")])]})
    append = {
        "appendCells": {
            "sheetId": 0,
            "rows": [{"values": [_text("row")]}],
            "fields": "userEnteredValue",
        }
    }
    with pytest.raises(APIError):
        sh.batch_update({"requests": [_update_cells(0, 0, [_text("no")]), append]})
    assert emu.values(key, "Queue") == [["ok"]]
    assert emu.count("spreadsheets.batchUpdate") == 1
    assert emu.count("spreadsheets.batchUpdate:updateCells") == 1
    sh.batch_update({"requests": [append]})
    assert emu.count("spreadsheets.batchUpdate:appendCells") == 1


def test_lost_replies_are_applied(
    emu: SheetsEmulator, key: str, gc: gspread.Client, ws: gspread.Worksheet
) -> None:
    """lose_reply_next applies the write, then disconnects, answers 5xx or times out."""
    emu.reset_counts()
    emu.lose_reply_next(op="values.append")
    with pytest.raises(requests.exceptions.ConnectionError):
        ws.append_rows([["a"]], table_range="A1")
    emu.lose_reply_next(op="values.append", mode="503")
    with pytest.raises(APIError) as info:
        ws.append_rows([["b"]], table_range="A1")
    assert _error(info)["status"] == "UNAVAILABLE"
    emu.lose_reply_next(op="values.append", mode="500")
    with pytest.raises(APIError) as info:
        ws.append_rows([["b2"]], table_range="A1")
    assert _error(info)["status"] == "INTERNAL"
    emu.lose_reply_next(op="values.append", mode="timeout", seconds=0.6)
    gc.set_timeout(0.25)
    with pytest.raises(requests.exceptions.ReadTimeout):
        ws.append_rows([["c"]], table_range="A1")
    gc.set_timeout(10)
    assert emu.values(key, "Queue") == [["a"], ["b"], ["b2"], ["c"]]
    appends = [r for r in emu.requests if r.op == "values.append"]
    assert [(r.status, r.counted) for r in appends] == [
        (0, False),
        (503, False),
        (500, False),
        (0, False),
    ]
    assert emu.count() == 0


def test_delay_next_slows_only_the_matching_request(
    emu: SheetsEmulator, ws: gspread.Worksheet
) -> None:
    """delay_next holds the matching request for the given time and counts it normally."""
    emu.delay_next(0.3, op="values.get")
    start = time.monotonic()
    ws.update([["x"]], "A1")
    assert time.monotonic() - start < 0.25
    start = time.monotonic()
    assert ws.get("A1") == [["x"]]
    assert time.monotonic() - start >= 0.3
    assert emu.count("values.get") == 1


def test_request_log_records_what_was_sent(
    emu: SheetsEmulator, key: str, gc: gspread.Client, ws: gspread.Worksheet
) -> None:
    """The request log keeps raw path, query, body, status and op; 4xx answers count."""
    emu.reset_counts()
    ws.batch_get(["A1:B2", "C3"])
    ws.update([["x"]], "B2")
    with pytest.raises(APIError):
        gc.open_by_key(key).values_get("'Nope'!A1")
    get, update, open_, bad = emu.requests
    assert isinstance(get, RecordedRequest)
    assert (get.method, get.op, get.path) == (
        "GET",
        "values.batchGet",
        f"/v4/spreadsheets/{key}/values:batchGet",
    )
    assert get.query == {"ranges": ["'Queue'!A1:B2", "'Queue'!C3"]} and get.body is None
    assert (update.method, update.path, update.status) == (
        "PUT",
        f"/v4/spreadsheets/{key}/values/%27Queue%27%21B2",
        200,
    )
    assert update.query == {"valueInputOption": ["RAW"]}
    assert update.body == {"values": [["x"]], "majorDimension": None}
    assert (open_.op, bad.op, bad.status, bad.counted) == (
        "spreadsheets.get",
        "values.get",
        400,
        True,
    )
    assert emu.count() == 4 and emu.count("values.get") == 1
    emu.reset_counts()
    assert emu.count() == 0 and emu.requests == []


def test_keep_alive_reuses_one_connection(emu: SheetsEmulator, ws: gspread.Worksheet) -> None:
    """HTTP/1.1 keep-alive works with requests' pool: ten calls, one new connection."""
    before = emu.connections_opened
    for i in range(10):
        ws.update([[i]], "A1")
    assert emu.connections_opened - before <= 1
    assert ws.acell("A1").value == "9"


# ---------------------------------------------------------------------------------------
# Direct state access and the command line
# ---------------------------------------------------------------------------------------


def test_direct_state_access_types_like_a_person_and_is_not_counted(emu: SheetsEmulator) -> None:
    """set_values parses like a person typing; helpers never touch the counters."""
    key = emu.create_spreadsheet(
        "helpers", sheets=("Queue",), rows=20, cols=4, spreadsheet_id="helpers-sheet"
    )
    assert key == "helpers-sheet"
    emu.set_values(key, "Queue", [["0042", "2026-01-05", "TRUE", "=1+1"]])
    emu.set_values(key, "Queue", [["0042", None, "x"]], "A2", user_entered=False)
    assert emu.values(key, "Queue", render="UNFORMATTED_VALUE") == [
        [42, SERIAL_2026_01_05, True, 2],
        ["0042", "", "x"],
    ]
    assert emu.values(key, "Queue", render="FORMULA")[0][3] == "=1+1"
    sheet_id = emu.add_sheet(key, "QueueLog", rows=5, cols=3)
    assert emu.sheet_id(key, "QueueLog") == sheet_id
    assert emu.sheet_properties(key, "QueueLog") == {
        "sheetId": sheet_id,
        "title": "QueueLog",
        "index": 1,
        "sheetType": "GRID",
        "gridProperties": {
            "rowCount": 5,
            "columnCount": 3,
            "frozenRowCount": 0,
            "frozenColumnCount": 0,
        },
    }
    assert emu.cell(key, "Queue", "B1") == {
        "userEnteredValue": {"numberValue": SERIAL_2026_01_05},
        "effectiveValue": {"numberValue": SERIAL_2026_01_05},
        "formattedValue": "2026-01-05",
        "userEnteredFormat": {"numberFormat": {"type": "DATE", "pattern": "yyyy-mm-dd"}},
    }
    assert emu.cell(key, "Queue", "D4") == {}
    with pytest.raises(ValueError):
        emu.set_values(key, "Queue", [["x"]], "E1")
    with pytest.raises(KeyError):
        emu.values(key, "Nope")
    assert emu.count() == 0 and emu.requests == []


def test_command_line_serves_until_interrupted() -> None:
    """``python -m tests.fakes.sheets_emulator --create`` prints its URL, serves, exits on ^C."""
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.fakes.sheets_emulator",
            "--port",
            "0",
            "--create",
            "KEY123:Sheet1,Queue",
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        base_url = proc.stdout.readline().strip()
        assert re.fullmatch(r"http://127\.0\.0\.1:\d+", base_url)
        with requests.Session() as s:
            s.trust_env = False
            meta = s.get(f"{base_url}/v4/spreadsheets/KEY123", timeout=5).json()
        assert [x["properties"]["title"] for x in meta["sheets"]] == ["Sheet1", "Queue"]
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=10) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()


# ---------------------------------------------------------------------------------------
# Conformance with the recorded Google traffic
# ---------------------------------------------------------------------------------------

# The recordings were made by a service account; the emulator is told to be that caller so
# the protected-range editors it lists compare equal.
RECORDED_CALLER = "telegram-budgeter@telegram-budgeter.iam.gserviceaccount.com"

# Exchanges not compared, by API method (op). Every other recorded exchange is compared.
EXCLUDED_OPS = {
    "drive.files.create": "Drive API: creates the scratch spreadsheet; replayed as "
    "create_spreadsheet() with the recorded title",
    "drive.files.get": "Drive API: old gspread read createdTime/modifiedTime; not Sheets API",
    "drive.files.delete": "Drive API: deletes the scratch spreadsheet; not Sheets API",
}
# Individual Sheets API exchanges not compared, by (cassette, interaction index): none.
EXCLUDED_EXCHANGES: dict[tuple[str, int], str] = {}

# The floor: every compared exchange must match (413 of 413 when this was written).
CONFORMANCE_FLOOR = 1.0
MIN_COMPARED = 413

_REPLY_IDS = (
    ("addSheet", ("properties", "sheetId")),
    ("addNamedRange", ("namedRange", "namedRangeId")),
    ("addProtectedRange", ("protectedRange", "protectedRangeId")),
)
_ID_KEYS = frozenset({"sheetId", "namedRangeId", "protectedRangeId"})
_TABLE_START, _TABLE_END = "<!-- conformance-table:start -->", "<!-- conformance-table:end -->"


@dataclass
class CassetteResult:
    """Outcome of replaying one cassette."""

    name: str
    recordings: int = 0
    compared: int = 0
    matched: int = 0
    excluded: list[tuple[int, str]] = field(default_factory=list)
    mismatches: list[str] = field(default_factory=list)


def _load_pairs_tool() -> ModuleType:
    spec = importlib.util.spec_from_file_location("cassette_pairs", PAIRS_TOOL)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _dig(obj: Any, *path: str) -> Any:
    for part in path:
        if not isinstance(obj, dict):
            return None
        obj = obj.get(part)
    return obj


def _map_ids(obj: Any, table: dict[Any, Any]) -> Any:
    if isinstance(obj, dict):
        return {
            k: (
                table.get(v, v)
                if k in _ID_KEYS and isinstance(v, int | str)
                else _map_ids(v, table)
            )
            for k, v in obj.items()
        }
    if isinstance(obj, list):
        return [_map_ids(x, table) for x in obj]
    return obj


def _replace(obj: Any, table: dict[str, str]) -> Any:
    if isinstance(obj, str):
        for old, new in table.items():
            obj = obj.replace(old, new)
        return obj
    if isinstance(obj, dict):
        return {k: _replace(v, table) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_replace(x, table) for x in obj]
    return obj


def replay_cassette(emu: SheetsEmulator, path: Path, tool: ModuleType) -> CassetteResult:
    """Replay one cassette's Sheets API requests in order, each recording block against a
    fresh spreadsheet, and compare status + JSON body with what Google answered. Ids Google
    chose (addSheet sheetId, namedRangeId, protectedRangeId) are mapped to the emulator's."""
    result = CassetteResult(path.name.removesuffix(".json"))
    spreadsheets: dict[str, str] = {}  # "{id}" placeholder -> emulator id
    ids: dict[Any, Any] = {}  # id Google chose -> id the emulator chose
    host, port = emu.base_url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    try:
        for rec in tool.pairs(str(path)):
            if rec["host"] != "sheets.googleapis.com":
                if rec["op"] == "drive.files.create":
                    result.recordings += 1
                    spreadsheets[rec["response_json"]["id"]] = emu.create_spreadsheet(
                        rec["request_json"]["name"]
                    )
                result.excluded.append((rec["i"], rec["op"]))
                continue
            if (result.name, rec["i"]) in EXCLUDED_EXCHANGES:
                result.excluded.append((rec["i"], "listed in EXCLUDED_EXCHANGES"))
                continue
            for placeholder in re.findall(r"\{id\d*\}", rec["path"]):
                if placeholder not in spreadsheets:  # never created here: someone else's
                    spreadsheets[placeholder] = emu.create_spreadsheet("private")
                    emu.set_access(spreadsheets[placeholder], "none")
            body = _map_ids(_replace(rec["request_json"], spreadsheets), ids)
            payload = None if body is None else json.dumps(body).encode("utf-8")
            headers = {"Content-Type": "application/json"} if payload is not None else {}
            conn.request(rec["method"], _replace(rec["path"], spreadsheets), payload, headers)
            answer = conn.getresponse()
            raw = answer.read()
            got = json.loads(raw) if raw else None
            got = _replace(got, {v: k for k, v in spreadsheets.items()})
            for kind, id_path in _REPLY_IDS:
                for want, have in zip(
                    _dig(rec["response_json"], "replies") or [],
                    _dig(got, "replies") or [],
                    strict=False,
                ):
                    recorded_id, emulator_id = (
                        _dig(want, kind, *id_path),
                        _dig(have, kind, *id_path),
                    )
                    if recorded_id is not None and emulator_id is not None:
                        ids[recorded_id] = emulator_id
            got = _map_ids(got, {v: k for k, v in ids.items()})
            result.compared += 1
            if answer.status == rec["status"] and got == rec["response_json"]:
                result.matched += 1
            else:
                result.mismatches.append(
                    f"#{rec['i']} {rec['method']} {rec['path']}: Google {rec['status']} "
                    f"{json.dumps(rec['response_json'], ensure_ascii=False)[:300]} / emulator "
                    f"{answer.status} {json.dumps(got, ensure_ascii=False)[:300]}"
                )
    finally:
        conn.close()
    return result


def run_conformance() -> list[CassetteResult]:
    tool = _load_pairs_tool()
    with SheetsEmulator(caller_email=RECORDED_CALLER, seed=1) as emu:
        results = [replay_cassette(emu, path, tool) for path in sorted(CASSETTES.glob("*.json"))]
        assert emu.errors == []
    return results


def conformance_table(results: list[CassetteResult]) -> str:
    lines = [
        "| cassette | recordings | Sheets API exchanges compared | matched | "
        "excluded (Drive API) |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for r in results:
        lines.append(
            f"| `{r.name}` | {r.recordings} | {r.compared} | {r.matched} | {len(r.excluded)} |"
        )
    compared = sum(r.compared for r in results)
    matched = sum(r.matched for r in results)
    excluded = sum(len(r.excluded) for r in results)
    lines.append(
        f"| **total ({len(results)} cassettes)** | "
        f"{sum(r.recordings for r in results)} | {compared} | {matched} | {excluded} |"
    )
    lines.append("")
    lines.append(
        f"Match rate: **{matched}/{compared} = {matched / compared:.1%}** of the "
        "recorded Sheets API exchanges (status code and JSON body equal)."
    )
    return "\n".join(lines)


@pytest.fixture(scope="module")
def conformance() -> list[CassetteResult]:
    if not CASSETTES.is_dir() or not PAIRS_TOOL.is_file():
        pytest.skip(
            f"recorded Google traffic not found at {CASSETTES} / {PAIRS_TOOL} "
            "(the shared/ reference directory is not checked out beside the repo)"
        )
    return run_conformance()


def test_conformance_with_recorded_google_traffic(conformance: list[CassetteResult]) -> None:
    """Replayed recorded requests get Google's status and JSON body (>= CONFORMANCE_FLOOR)."""
    compared = sum(r.compared for r in conformance)
    matched = sum(r.matched for r in conformance)
    print(
        f"\nsheets_emulator conformance: {matched}/{compared} = {matched / compared:.1%} of "
        f"recorded Sheets API exchanges match ({len(conformance)} cassettes)"
    )
    for r in conformance:
        print(f"  {r.name}: {r.matched}/{r.compared}")
    reasons = {why for r in conformance for _, why in r.excluded}
    unexpected = sorted(reasons - set(EXCLUDED_OPS) - {"listed in EXCLUDED_EXCHANGES"})
    assert unexpected == [], f"exchanges skipped without a listed reason: {unexpected}"
    assert len(conformance) >= 38 and compared >= MIN_COMPARED
    mismatches = [f"{r.name} {m}" for r in conformance for m in r.mismatches]
    assert matched / compared >= CONFORMANCE_FLOOR, "\n".join(mismatches)


def test_conformance_doc_is_current(conformance: list[CassetteResult]) -> None:
    """tests/fakes/CONFORMANCE.md shows the table the replay produces today."""
    text = CONFORMANCE_DOC.read_text(encoding="utf-8")
    documented = text.split(_TABLE_START, 1)[1].split(_TABLE_END, 1)[0].strip()
    assert documented == conformance_table(conformance), (
        "CONFORMANCE.md is stale: run python tests/contract/test_sheets_emulator.py "
        "--write-conformance"
    )
    counts = {
        op: sum(why == op for r in conformance for _, why in r.excluded) for op in EXCLUDED_OPS
    }
    for op, n in counts.items():
        assert f"| `{op}` | {n} |" in text, f"CONFORMANCE.md: wrong count for {op} ({n})"


def _write_conformance_doc() -> None:
    table = conformance_table(run_conformance())
    text = CONFORMANCE_DOC.read_text(encoding="utf-8")
    head, rest = text.split(_TABLE_START, 1)
    tail = rest.split(_TABLE_END, 1)[1]
    CONFORMANCE_DOC.write_text(
        f"{head}{_TABLE_START}\n{table}\n{_TABLE_END}{tail}", encoding="utf-8"
    )
    print(table)


if __name__ == "__main__":
    if sys.argv[1:] != ["--write-conformance"]:
        sys.exit("usage: python tests/contract/test_sheets_emulator.py --write-conformance")
    _write_conformance_doc()
