"""The Google adapter through gspread against the loopback Sheets API emulator: request
budgets (docs/design.md §6), faults, a person editing mid-run, init formatting, errors."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sheetq.model import QUEUE_COLUMNS
from tests.conftest import GoogleBook, handler_script, make_google, run_cli, write_config
from tests.integration.test_process import assert_log_matches_queue

pytestmark = pytest.mark.google
OK = "import sys, json\nprint('ok-' + str(json.load(sys.stdin)['n']))\n"


@pytest.fixture
def gbook(sheets_emulator: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[GoogleBook]:
    """An initialised spreadsheet in the emulator, counters reset."""
    book = make_google(sheets_emulator, monkeypatch)
    assert run_cli(["init"]).code == 0
    sheets_emulator.reset_counts()
    yield book
    sheets_emulator.clear_faults()


def _ok_config(tmp_path: Path, **extra: str) -> None:
    """`job` tasks answered by an in-process Python handler (request counts do not depend on
    the handler kind, and it spares hundreds of interpreter start-ups)."""
    (Path.cwd() / "gtest_handlers.py").write_text(
        "def ok(task):\n    return 'ok-' + str(task.payload['n'])\n", encoding="utf-8"
    )
    lines = "".join(f"{k} = {v}\n" for k, v in extra.items())
    write_config(f"[types.job]\npython = 'gtest_handlers:ok'\n{lines}")


def _fill(n: int, task_type: str = "job") -> None:
    text = "\n".join(json.dumps({"n": i}) for i in range(n))
    r = run_cli(["enqueue", task_type, "--jsonl"], input=text)
    assert r.code == 0, r.stderr


# --- budgets ----------------------------------------------------------------------------


@pytest.mark.parametrize("size", [1, 10, 100])
def test_process_budget_per_batch(gbook: GoogleBook, tmp_path: Path, size: int) -> None:
    """One batch of up to 100 tasks costs at most 6 requests, opening included; a run of k
    batches at most 3k + 3 (each batch: a scan, the claimed rows read whole, one write that
    carries the previous batch's results and this claim; then the last scan and the last
    results), every write verified by its own echo."""
    emu = gbook.emulator
    _ok_config(tmp_path)
    _fill(size * 3)
    emu.reset_counts()
    doc = run_cli(["process", "--batch-size", str(size), "--json"]).json()
    assert doc["done"] == size
    assert emu.count() <= 6, [r.op for r in emu.requests]
    emu.reset_counts()
    doc = run_cli(["process", "--batch-size", str(size), "--until-empty", "--json"]).json()
    assert doc["batches"] == 2 and doc["done"] == 2 * size
    assert emu.count() <= 3 * 2 + 3, [r.op for r in emu.requests]


def test_enqueue_and_status_budgets(gbook: GoogleBook) -> None:
    """enqueue ≤ 2 requests, enqueue --jsonl of 1,000 lines ≤ 2, status ≤ 2, an empty run ≤ 2."""
    emu = gbook.emulator
    assert run_cli(["enqueue", "job", '{"n": 1}']).code == 0
    assert emu.count() <= 2, [r.op for r in emu.requests]
    emu.reset_counts()
    _fill(1000, "bulk")
    assert emu.count() <= 2, [r.op for r in emu.requests]
    assert len(gbook.records()) == 1001
    emu.reset_counts()
    assert run_cli(["status", "--json"]).json()["counts"]["pending"] == 1001
    assert emu.count() <= 2
    emu.reset_counts()
    assert run_cli(["process", "--json"]).json()["claimed"] == 0
    assert emu.count() <= 2


def _archived(gbook: GoogleBook, row: int, task_id: str, key: str, body: dict[str, Any]) -> None:
    """A finished task in QueueArchive, as `sheetq archive` leaves it (typed in directly)."""
    from sheetq.idempotency import canonical_json, payload_hash

    for column, value in (
        ("task_id", task_id),
        ("idempotency_key", key),
        ("payload_hash", payload_hash(canonical_json(body))),
        ("status", "done"),
    ):
        gbook.set_cell("QueueArchive", row, column, value)


def _enqueue(args: list[str]) -> dict[str, Any]:
    r = run_cli(["enqueue", *args, "--json"])
    assert r.code in (0, 3), r.stderr
    return {**r.json(), "code": r.code}


def test_enqueue_is_one_read_and_one_write(gbook: GoogleBook) -> None:
    """On an init-made sheet one enqueue is one spreadsheets.get (headers and key columns
    together) and one write; duplicates and conflicts, in Queue or QueueArchive, likewise."""
    emu = gbook.emulator
    _archived(gbook, 2, "t_OLD", "job:A-1", {"n": 7})
    emu.reset_counts()
    new = _enqueue(["job", '{"n": 1}', "--key", "K-1"])
    assert new["outcome"] == "enqueued" and new["code"] == 0
    assert emu.count() == 2 and emu.count("spreadsheets.get") == 1, [r.op for r in emu.requests]
    assert emu.count("values.batchGet") == 0
    for args, outcome, task, code in (
        (["job", '{"n": 1}', "--key", "K-1"], "duplicate", new["task_id"], 0),
        (["job", '{"n": 2}', "--key", "K-1"], "conflict", new["task_id"], 3),
        (["job", '{"n": 7}', "--key", "A-1"], "duplicate", "t_OLD", 0),
        (["job", '{"n": 8}', "--key", "A-1"], "conflict", "t_OLD", 3),
    ):
        emu.reset_counts()
        got = _enqueue(args)
        assert (got["outcome"], got["task_id"], got["code"]) == (outcome, task, code), args
        assert emu.count() == 2, (args, [r.op for r in emu.requests])
    assert [r["task_id"] for r in gbook.records()] == [new["task_id"]]
    events = [(r["task_id"], r["event"]) for r in gbook.log()]
    assert events == [
        (new["task_id"], "enqueued"),
        (new["task_id"], "duplicate"),
        (new["task_id"], "conflict"),
        ("t_OLD", "duplicate"),
        ("t_OLD", "conflict"),
    ]


def test_enqueue_after_a_person_moved_a_key_column(gbook: GoogleBook) -> None:
    """A key column moved away from init's place (in Queue, then in QueueArchive): enqueue
    notices it in the header of its one read, reads the columns again by name (3 requests),
    and still finds duplicates and writes new rows by column name."""
    emu = gbook.emulator
    first = _enqueue(["job", '{"n": 1}', "--key", "K-1"])
    header = gbook.grid("Queue")[0]
    emu.move_column(gbook.key, "Queue", header.index("idempotency_key"), 0)
    emu.reset_counts()
    again = _enqueue(["job", '{"n": 1}', "--key", "K-1"])
    assert (again["outcome"], again["task_id"]) == ("duplicate", first["task_id"])
    assert emu.count() == 3 and emu.count("values.batchGet") == 1, [r.op for r in emu.requests]
    emu.reset_counts()
    second = _enqueue(["job", '{"n": 2}', "--key", "K-2"])
    assert second["outcome"] == "enqueued" and emu.count() == 3
    row = gbook.row_of(second["task_id"])
    assert (row["idempotency_key"], row["status"]) == ("job:K-2", "pending")
    archive = gbook.grid("QueueArchive")[0]
    emu.move_column(gbook.key, "QueueArchive", archive.index("payload_hash"), 1)
    _archived(gbook, 2, "t_OLD", "job:A-1", {"n": 7})
    emu.reset_counts()
    old = _enqueue(["job", '{"n": 8}', "--key", "A-1"])
    assert (old["outcome"], old["task_id"], old["code"]) == ("conflict", "t_OLD", 3)
    assert emu.count() == 3


def test_enqueue_before_init_finished_names_what_is_missing(
    sheets_emulator: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Queue narrower than init's layout (the original 9 columns), with or without the other
    worksheets: Google refuses the guessed ranges, and enqueue still says what `init` must add
    (exit 2, nothing written); after `init`, one enqueue is 2 requests."""
    book = make_google(sheets_emulator, monkeypatch)
    emu = sheets_emulator
    emu.add_sheet(book.key, "Queue", rows=100, cols=9)
    emu.set_values(book.key, "Queue", [list(QUEUE_COLUMNS[:9])])
    for missing in ("QueueLog", "QueueArchive", None):
        r = run_cli(["enqueue", "job", '{"n": 1}'])
        assert r.code == 2, r.stderr
        assert "'Queue' lacks column(s) updated_at" in r.stderr and "sheetq init" in r.stderr
        if missing:
            emu.add_sheet(book.key, missing)
    assert book.grid("QueueLog") == [] and len(book.grid("Queue")) == 1
    assert run_cli(["init"]).code == 0
    emu.reset_counts()
    assert _enqueue(["job", '{"n": 1}'])["outcome"] == "enqueued"
    assert emu.count() == 2, [r.op for r in emu.requests]


def test_open_with_gives_what_open_and_read_give(gbook: GoogleBook) -> None:
    """The one-request read converts grid data as the values API's UNFORMATTED_VALUE does:
    text stays text (spaces, leading zeros, '=1+1'), numbers and booleans stay typed, empty
    cells in the middle and rows without keys keep their row numbers."""
    from sheetq.config import load_settings
    from sheetq.sheet import open_store
    from sheetq.sheet.enqueue import key_reads, open_for_enqueue

    def typed(values: dict[str, Any]) -> dict[str, tuple[str, Any]]:
        kinds = {int: "number", float: "number", bool: "bool", str: "text"}
        return {k: (kinds[type(v)], v) for k, v in values.items() if v not in (None, "")}

    _enqueue(["job", '{"n": 1}', "--key", "=1+1"])
    _enqueue(["job", '{"n": 2}'])
    for row, column, value in (
        (4, "status", " Done"),
        (4, "task_id", "t_TYPED"),
        (4, "idempotency_key", 42),
        (4, "payload_hash", True),
        (6, "idempotency_key", "007"),
    ):
        gbook.set_cell("Queue", row, column, value)
    _archived(gbook, 3, "t_OLD", "job:A-1", {"n": 7})
    settings = load_settings()
    reads = key_reads(settings)
    one, two = open_store(settings), open_store(settings)
    try:
        info, snaps = open_for_enqueue(one, settings)
        assert one.requests_made == 1
        assert info == two.open()
        expected = two.read(reads)
    finally:
        one.close()
        two.close()
    for got, want in zip(snaps, expected, strict=True):
        assert (got.worksheet, got.header, got.columns, got.whole) == (
            want.worksheet,
            want.header,
            want.columns,
            want.whole,
        )
        assert [r.number for r in got.rows] == [r.number for r in want.rows]
        assert [typed(r.values) for r in got.rows] == [typed(r.values) for r in want.rows]
    assert typed(snaps[0].rows[2].values) == {
        "task_id": ("text", "t_TYPED"),
        "idempotency_key": ("number", 42),
        "payload_hash": ("bool", True),
        "status": ("text", " Done"),
    }
    assert snaps[0].rows[0].values["idempotency_key"] == "job:=1+1"
    assert typed(snaps[0].rows[4].values) == typed(expected[0].rows[4].values) != {}


def test_writes_are_data_never_parsed(gbook: GoogleBook) -> None:
    """Every value is written as stringValue: a formula payload stays text in its cell."""
    payload = {"x": '=IMPORTXML("http://x","//a")', "phone": "+380501234567", "zip": "007"}
    r = run_cli(["enqueue", "job", json.dumps(payload), "--json", "--key", "=1+1"])
    task = r.json()["task_id"]
    row = gbook.row_of(task)
    assert json.loads(row["payload_json"]) == payload
    column = gbook.grid("Queue")[0].index("payload_json")
    from sheetq.sheet.store import column_letter

    cell = gbook.emulator.cell(gbook.key, "Queue", f"{column_letter(column)}{row['_row']}")
    assert "stringValue" in cell["userEnteredValue"]
    assert "formulaValue" not in cell["userEnteredValue"]
    key_col = column_letter(gbook.grid("Queue")[0].index("idempotency_key"))
    assert gbook.emulator.cell(gbook.key, "Queue", f"{key_col}{row['_row']}")[
        "userEnteredValue"
    ] == {"stringValue": "job:=1+1"}


# --- faults -------------------------------------------------------------------------------


def test_burst_of_429_and_503_during_a_run(gbook: GoogleBook, tmp_path: Path) -> None:
    """Five 429s and a 503 during a run: it completes, no row is left processing, and the
    log matches the queue."""
    emu = gbook.emulator
    _ok_config(tmp_path)
    _fill(6)
    emu.fail_next(429, times=3, retry_after=0.01, op="values.batchGet")
    emu.fail_next(429, times=2, op="spreadsheets.batchUpdate")
    emu.fail_next(503, op="spreadsheets.batchUpdate")
    r = run_cli(["process", "--batch-size", "3", "--until-empty", "--json"])
    assert r.code == 0, r.stderr
    assert r.json()["done"] == 6
    assert emu.pending_faults() == 0
    assert all(row["status"] == "done" for row in gbook.records())
    assert_log_matches_queue(gbook)


def test_persistent_outage_is_a_clear_exit_1(gbook: GoogleBook, tmp_path: Path) -> None:
    """Google answering 503 to every attempt: exit 1 with one line, no traceback."""
    gbook.emulator.fail_next(503, times=50)
    r = run_cli(["status"])
    assert r.code == 1
    lines = [line for line in r.stderr.splitlines() if line]
    assert len(lines) == 1 and "503" in lines[0] and "attempts" in lines[0]


@pytest.mark.parametrize("mode", ["disconnect", "503"])
def test_lost_reply_to_enqueue_is_not_duplicated(gbook: GoogleBook, mode: str) -> None:
    """The write was applied but its reply lost: the retry reads back and adds nothing twice."""
    gbook.emulator.lose_reply_next(op="spreadsheets.batchUpdate", mode=mode)
    r = run_cli(["enqueue", "job", '{"n": 1}', "--json"])
    assert r.code == 0, r.stderr
    assert len(gbook.records()) == 1 and len(gbook.log()) == 1
    r = run_cli(["enqueue", "--jsonl", "job"], input='{"n": 2}\n{"n": 3}\n')
    assert len(gbook.records()) == 1 + 2


@pytest.mark.parametrize("which", [1, 2])
def test_lost_reply_during_process_is_not_duplicated(
    gbook: GoogleBook, tmp_path: Path, which: int
) -> None:
    """A lost reply to the claim (1st write) or the result (2nd write) duplicates no log row and
    leaves every task done exactly once."""
    emu = gbook.emulator
    _ok_config(tmp_path)
    _fill(3)
    counter = {"n": 0}

    def lose(_emu: Any) -> None:
        counter["n"] += 1
        if counter["n"] == which:
            emu.lose_reply_next(op="spreadsheets.batchUpdate", mode="disconnect")

    emu.before_next(lose, op="spreadsheets.batchUpdate", times=2)
    r = run_cli(["process", "--batch-size", "5", "--json"])
    assert r.code == 0, r.stderr
    assert r.json()["done"] == 3
    for row in gbook.records():
        events = [e["event"] for e in gbook.log(row["task_id"])]
        assert events == ["enqueued", "claimed", "done"], events
    assert_log_matches_queue(gbook)


def test_sort_between_claim_and_result(gbook: GoogleBook, tmp_path: Path) -> None:
    """A person sorts the Queue by type between the claim and the result write: every result
    lands on its own task_id."""
    emu = gbook.emulator
    ok = handler_script(tmp_path, "ok", OK)
    write_config(f"[types.zeta]\ncommand = {ok}\n[types.alpha]\ncommand = {ok}\n")
    ids = {}
    for n, t in enumerate(["zeta", "zeta", "alpha", "zeta", "alpha", "zeta"]):
        ids[n] = run_cli(["enqueue", t, json.dumps({"n": n}), "--json"]).json()["task_id"]
    before = [r["task_id"] for r in gbook.records()]
    # the 3rd batchGet of the run is the re-location read just before the result write
    calls = {"n": 0}

    def maybe_sort(_emu: Any) -> None:
        calls["n"] += 1
        if calls["n"] == 3:
            gbook.sort("Queue", "type")

    emu.before_next(maybe_sort, op="values.batchGet", times=3)
    assert run_cli(["process", "--batch-size", "10", "--json"]).json()["done"] == 6
    assert [r["task_id"] for r in gbook.records()] != before
    for n, task in ids.items():
        row = gbook.row_of(task)
        assert (row["status"], row["result"]) == ("done", f"ok-{n}"), row


def test_rows_inserted_and_columns_moved_mid_run(gbook: GoogleBook, tmp_path: Path) -> None:
    """A person inserting rows above and dragging a column between two requests: results still
    land in the right row and column."""
    emu = gbook.emulator
    _ok_config(tmp_path)
    _fill(4)
    calls = {"n": 0}

    def edit(_emu: Any) -> None:
        calls["n"] += 1
        if calls["n"] == 3:
            emu.insert_rows(gbook.key, "Queue", 2, count=2)
            header = gbook.grid("Queue")[0]
            emu.move_column(gbook.key, "Queue", header.index("result"), 0)

    emu.before_next(edit, op="values.batchGet", times=3)
    doc = run_cli(["process", "--batch-size", "10", "--json"]).json()
    assert doc["done"] == 4
    header = gbook.grid("Queue")[0]
    assert header[0] == "result"
    for row in gbook.records():
        assert row["status"] == "done" and row["result"].startswith("ok-"), row


def test_run_lease_is_a_named_range_compare_and_set(gbook: GoogleBook, tmp_path: Path) -> None:
    """A live lease held by another host makes a run exit 0 with one line; an expired one is
    replaced; the lease is released at the end of the run."""
    from datetime import UTC, datetime, timedelta

    from sheetq.sheet.runner import lease_name, lease_token

    emu = gbook.emulator
    _ok_config(tmp_path)
    _fill(2)
    live = lease_token(datetime.now(UTC) + timedelta(minutes=5))
    body = {
        "requests": [
            {
                "addNamedRange": {
                    "namedRange": {
                        "namedRangeId": live,
                        "name": lease_name("Queue"),
                        "range": {
                            "sheetId": emu.sheet_id(gbook.key, "Queue"),
                            "startRowIndex": 0,
                            "endRowIndex": 1,
                            "startColumnIndex": 0,
                            "endColumnIndex": 1,
                        },
                    }
                }
            }
        ]
    }
    import requests

    requests.post(
        f"{emu.base_url}/v4/spreadsheets/{gbook.key}:batchUpdate", json=body, timeout=10
    ).raise_for_status()
    r = run_cli(["process"])
    assert r.code == 0 and "lease" in r.stdout and r.stdout.count("\n") == 1
    assert all(row["status"] == "pending" for row in gbook.records())
    later = (datetime.now(UTC) + timedelta(minutes=6)).strftime("%Y-%m-%dT%H:%M:%SZ")
    import os

    os.environ["SHEETQ_NOW"] = later
    try:
        doc = run_cli(["process", "--batch-size", "5", "--json"]).json()
    finally:
        del os.environ["SHEETQ_NOW"]
    assert doc["done"] == 2
    assert [r for r in emu.named_ranges(gbook.key) if r["name"] == lease_name("Queue")] == []


# --- errors ---------------------------------------------------------------------------------


def test_read_only_share_wrong_key_missing_sheet(
    gbook: GoogleBook, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Read-only sharing, a wrong key, a missing worksheet: one clear line each, the right exit
    code, nothing half-written."""
    emu = gbook.emulator
    emu.set_access(gbook.key, "reader")
    r = run_cli(["enqueue", "job", '{"n": 1}'])
    assert r.code == 1
    assert "share it as Editor" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert gbook.records() == []
    emu.set_access(gbook.key, "none")
    r = run_cli(["status"])
    assert r.code == 1 and "share it as Editor" in r.stderr
    emu.set_access(gbook.key, "owner")
    monkeypatch.setenv("SHEETQ_SPREADSHEET", "x" * 44)
    r = run_cli(["status"])
    assert r.code == 2 and "not found" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    other = make_google(emu, monkeypatch)
    r = run_cli(["enqueue", "job", "{}"])
    assert r.code == 2 and "sheetq init" in r.stderr
    assert other.grid("Sheet1") == []
    monkeypatch.setenv("SHEETQ_SPREADSHEET", "https://docs.google.com/not-a-sheet")
    assert run_cli(["status"]).code == 2


def test_url_form_of_spreadsheet(gbook: GoogleBook, monkeypatch: pytest.MonkeyPatch) -> None:
    """SHEETQ_SPREADSHEET may be the sheet's URL."""
    monkeypatch.setenv(
        "SHEETQ_SPREADSHEET", f"https://docs.google.com/spreadsheets/d/{gbook.key}/edit#gid=0"
    )
    assert run_cli(["status", "--json"]).code == 0


# --- init -------------------------------------------------------------------------------------


def test_init_formats_and_keeps_manager_work(
    sheets_emulator: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """init: frozen header, status drop-down, colour rules, warning-only protection; a manager's
    column, value and format survive; a second init adds nothing twice."""
    emu = sheetq_emu = sheets_emulator
    book = make_google(emu, monkeypatch)
    emu.add_sheet(book.key, "Queue")
    emu.set_values(
        book.key,
        "Queue",
        [
            [*QUEUE_COLUMNS[:9], "Notes"],  # the original Apps Script layout + a manager's
            ["", "", "lead", '{"lead_id": "L-1"}', "done", "0", "", "", "", "VIP client"],
        ],
    )
    r = run_cli(["init"])
    assert r.code == 0, r.stderr
    assert "adopted 1" in r.stdout
    props = sheetq_emu.sheet_properties(book.key, "Queue")
    assert props["gridProperties"].get("frozenRowCount") == 1
    meta = emu.metadata(book.key)
    queue = next(s for s in meta["sheets"] if s["properties"]["title"] == "Queue")
    rules = queue.get("conditionalFormats", [])
    assert len(rules) == 4
    protected = queue.get("protectedRanges", [])
    assert protected and all(p["warningOnly"] for p in protected)
    status_cell = emu.cell(book.key, "Queue", "E2")
    assert status_cell["dataValidation"]["condition"]["type"] == "ONE_OF_LIST"
    header = book.grid("Queue")[0]
    assert header[9] == "Notes" and header[-1] == "group"
    assert book.records()[0]["Notes"] == "VIP client"
    assert book.records()[0]["idempotency_key"] == "lead:lead_id=L-1"
    assert run_cli(["init"]).code == 0
    meta = emu.metadata(book.key)
    queue = next(s for s in meta["sheets"] if s["properties"]["title"] == "Queue")
    assert len(queue.get("conditionalFormats", [])) == 4
    assert len(queue.get("protectedRanges", [])) == len(protected)
    assert run_cli(["init", "--no-format"]).code == 0


def test_manager_typed_time_uses_sheet_time_zone(
    sheets_emulator: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A next_retry_at typed by a person without offset is in the spreadsheet's time zone."""
    book = make_google(sheets_emulator, monkeypatch, time_zone="Europe/Kyiv")
    assert run_cli(["init"]).code == 0
    _ok_config(tmp_path)
    task = run_cli(["enqueue", "job", '{"n": 1}', "--json"]).json()["task_id"]
    row = int(book.row_of(task)["_row"])
    book.set_cell("Queue", row, "next_retry_at", "2026-01-05 11:00:00")  # 09:00 UTC in Kyiv
    monkeypatch.setenv("SHEETQ_NOW", "2026-01-05T08:59:00Z")
    assert run_cli(["process", "--json"]).json()["claimed"] == 0
    monkeypatch.setenv("SHEETQ_NOW", "2026-01-05T09:00:30Z")
    assert run_cli(["process", "--json"]).json()["done"] == 1


def test_rows_deleted_between_scan_and_claim_are_repaired(
    gbook: GoogleBook, tmp_path: Path
) -> None:
    """A person deleting a row between the scan and the claim write: the claim that landed on
    the wrong rows is undone at once, no task runs twice, and the log agrees with the sheet."""
    emu = gbook.emulator
    _ok_config(tmp_path)
    _fill(1)
    assert run_cli(["process", "--json"]).json()["done"] == 1  # row 2: a done task
    done_id = gbook.records()[0]["task_id"]
    run_cli(["enqueue", "job", "--jsonl"], input="\n".join(f'{{"n": {10 + i}}}' for i in range(4)))
    emu.before_next(
        lambda e: e.delete_rows(gbook.key, "Queue", 2),  # the done row goes; the rest move up
        op="spreadsheets.batchUpdate",
    )
    r = run_cli(["process", "--batch-size", "3", "--json"])
    assert r.code == 0, r.stderr
    assert "changed during the claim write" in r.stderr, r.stderr
    rows = gbook.records()
    assert done_id not in [x["task_id"] for x in rows]
    assert all(x["status"] in ("pending", "done") for x in rows), rows
    assert all(x["lease_owner"] == "" for x in rows), rows
    assert_log_matches_queue(gbook)
    doc = run_cli(["process", "--batch-size", "10", "--json"]).json()
    assert doc["done"] + sum(x["status"] == "done" for x in rows) == 4
    for x in gbook.records():
        assert [e["event"] for e in gbook.log(x["task_id"])].count("done") == 1


def test_sort_right_after_the_claim_does_not_strand_the_batch(
    gbook: GoogleBook, tmp_path: Path
) -> None:
    """A person reverses the rows the moment the claim is visible: the verifying read finds
    the claimed tasks where they are now, all five run once, and nothing else changes."""
    emu = gbook.emulator
    _ok_config(tmp_path)
    _fill(5)
    header = [str(h) for h in gbook.grid("Queue")[0]]
    reads = {"n": 0}

    def after_claim(e: Any) -> None:
        reads["n"] += 1
        if reads["n"] == 2:  # the read right after the claim write
            e.sort_rows(gbook.key, "Queue", header.index("task_id"), ascending=False)

    emu.before_next(after_claim, op="values.batchGet", times=2)
    doc = run_cli(["process", "--batch-size", "5", "--json"]).json()
    assert doc["claimed"] == 5 and doc["done"] == 5, doc
    assert reads["n"] == 2
    rows = gbook.records()
    assert [r["task_id"] for r in rows] == sorted((r["task_id"] for r in rows), reverse=True)
    assert [r["status"] for r in rows] == ["done"] * 5
    assert all(r["lease_owner"] == "" for r in rows)
    assert_log_matches_queue(gbook)


def test_sort_between_locate_and_result_write_is_put_right(
    gbook: GoogleBook, tmp_path: Path
) -> None:
    """A sort between the re-location read and the result write sends the results to other
    rows; the verifying read sees it, gives those rows their values back and writes each
    result into its own task: every row ends as its own handler said."""
    emu = gbook.emulator
    _ok_config(tmp_path)
    _fill(6)
    assert run_cli(["process", "--batch-size", "3", "--json"]).json()["done"] == 3
    header = [str(h) for h in gbook.grid("Queue")[0]]
    writes = {"n": 0}

    def before_write(e: Any) -> None:
        writes["n"] += 1
        if writes["n"] == 2:  # the result write
            e.sort_rows(gbook.key, "Queue", header.index("task_id"), ascending=False)

    emu.before_next(before_write, op="spreadsheets.batchUpdate", times=2)
    r = run_cli(["process", "--batch-size", "3", "--json"])
    assert r.code == 0 and r.json()["done"] == 3, r.stderr
    assert "got a write meant for" in r.stderr
    rows = gbook.records()
    assert sorted(r["status"] for r in rows) == ["done"] * 6
    for row in rows:
        n = json.loads(row["payload_json"])["n"]
        assert row["result"] == f"ok-{n}", row
    assert_log_matches_queue(gbook)


def test_steady_state_batch_is_two_reads_and_one_write(gbook: GoogleBook, tmp_path: Path) -> None:
    """`--until-empty` over 5 batches: 3k + 3 requests, and between two claims exactly one
    scan, one read of the claimed rows and one write (the results ride in the next claim)."""
    emu = gbook.emulator
    _ok_config(tmp_path)
    _fill(50)
    emu.reset_counts()
    doc = run_cli(["process", "--batch-size", "10", "--until-empty", "--json"]).json()
    assert doc["batches"] == 5 and doc["done"] == 50
    ops = [r.op for r in emu.requests if r.counted]
    assert len(ops) <= 3 * 5 + 3, ops
    assert ops[1:-2] == ["values.batchGet", "values.batchGet", "spreadsheets.batchUpdate"] * 5, ops
    assert all(r["status"] == "done" for r in gbook.records())


@pytest.mark.parametrize("fault", ["429", "lost reply"])
def test_fault_on_the_merged_write_runs_nothing_twice(
    gbook: GoogleBook, tmp_path: Path, fault: str
) -> None:
    """A 429 or a lost reply on the write that carries batch 1's results and batch 2's claim:
    nothing runs twice, no result is lost, no row is left processing, the log agrees."""
    emu = gbook.emulator
    (Path.cwd() / "gtest_counting.py").write_text(
        "import os\n"
        "def ok(task):\n"
        "    with open(os.environ['CALLS'], 'a') as f:\n"
        "        f.write(task.task_id + '\\n')\n"
        "    return 'ok'\n",
        encoding="utf-8",
    )
    calls = tmp_path / "calls"
    os.environ["CALLS"] = str(calls)
    write_config("[types.job]\npython = 'gtest_counting:ok'\n")
    _fill(15)
    writes = {"n": 0}

    def on_write(e: Any) -> None:
        writes["n"] += 1
        if writes["n"] == 2:  # batch 1's results + batch 2's claim
            if fault == "429":
                e.fail_next(429, retry_after=0, op="spreadsheets.batchUpdate")
            else:
                e.lose_reply_next(op="spreadsheets.batchUpdate", mode="503")

    emu.before_next(on_write, op="spreadsheets.batchUpdate", times=2)
    try:
        r = run_cli(["process", "--batch-size", "5", "--until-empty", "--json"])
    finally:
        del os.environ["CALLS"]
    assert r.code == 0, r.stderr
    assert r.json()["done"] == 15 and r.json()["batches"] == 3
    assert writes["n"] == 2 and emu.pending_faults() == 0
    ran = calls.read_text().split()
    assert len(ran) == 15 and len(set(ran)) == 15
    rows = gbook.records()
    assert [x["status"] for x in rows] == ["done"] * 15
    assert all(x["lease_owner"] == "" and x["result"] == "ok" for x in rows)
    assert_log_matches_queue(gbook)
    for x in rows:
        assert [e["event"] for e in gbook.log(x["task_id"])].count("done") == 1


@pytest.mark.parametrize(
    "edits",
    [
        [(3, "insert"), (5, "insert"), (7, "reverse")],  # rows only: none blanked
        [(6, "reverse"), (7, "move_status")],  # a sort, then a column drag at once
    ],
    ids=["inserts-then-reverse", "reverse-then-column"],
)
def test_two_person_edits_during_one_run_lose_nothing(
    gbook: GoogleBook, tmp_path: Path, edits: list[tuple[int, str]]
) -> None:
    """Edits found by a fresh user's trial, each after a given request of one
    `process --until-empty`: every task ends done once, no id is lost or doubled, no status is
    left blank, and the log agrees with the Queue."""
    emu = gbook.emulator
    _ok_config(tmp_path)
    _fill(15)
    ids = {r["task_id"] for r in gbook.records()}

    def edit(kind: str) -> Any:
        def apply(e: Any) -> None:
            header = [str(h) for h in e.values(gbook.key, "Queue")[0]]
            if kind == "insert":
                e.insert_rows(gbook.key, "Queue", 2, 2)
            elif kind == "reverse":
                e.reverse_rows(gbook.key, "Queue")
            else:
                e.move_column(gbook.key, "Queue", header.index("status"), 0)

        return apply

    emu.reset_counts()
    for k, kind in edits:
        emu.after(k, edit(kind))
    r = run_cli(["process", "--batch-size", "6", "--until-empty", "--json"])
    assert r.code == 0, r.stderr
    assert emu.pending_hooks() == 0
    rows = [x for x in gbook.records() if x["task_id"]]
    assert sorted(x["task_id"] for x in rows) == sorted(ids)
    assert [x["status"] for x in rows] == ["done"] * 15
    for x in rows:
        assert x["result"] == f"ok-{json.loads(x['payload_json'])['n']}", x
        assert [e["event"] for e in gbook.log(x["task_id"])].count("done") == 1
    assert_log_matches_queue(gbook)
