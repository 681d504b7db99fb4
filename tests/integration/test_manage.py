"""A manager's hands and the operating commands: edits, requeue, skip, init, status, list, show."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from sheetq.model import QUEUE_COLUMNS
from tests.conftest import Book, handler_script, run_cli, write_config
from tests.integration.test_process import assert_log_matches_queue
from tests.sheet_only import on_postgres, sheet_only

ON_POSTGRES = True  # the behavioural suite: also runs on PostgreSQL (docs/design.md §10)

NOW = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
FAIL = "import sys\nsys.stdin.read()\nsys.stderr.write('no such product')\nsys.exit(65)\n"
OK = "import sys\nsys.stdin.read()\nprint('ok')\n"


def _setup(tmp_path: Path, body: str = FAIL) -> None:
    write_config(f"[types.job]\ncommand = {handler_script(tmp_path, 'h', body)}\n")


def _failed_task(book: Book, tmp_path: Path) -> str:
    _setup(tmp_path)
    task = run_cli(["enqueue", "job", '{"n": 1}', "--json"]).json()["task_id"]
    run_cli(["process"])
    assert book.row_of(task)["status"] == "failed"
    return str(task)


@pytest.mark.parametrize("typed", [" Pending", "RETRY", "pending", "retry", "Pending "])
def test_manager_typing_pending_requeues(book: Book, tmp_path: Path, typed: str) -> None:
    """A person typing pending/retry (any case, stray spaces) over a failed row: the next run
    runs it again and logs `requeued` with the old status."""
    sheet_only(book, "a person types into the Queue worksheet (on PostgreSQL: its mirror)")
    task = _failed_task(book, tmp_path)
    row = int(book.row_of(task)["_row"])
    book.set_cell("Queue", row, "status", typed)
    _setup(tmp_path, OK)
    doc = run_cli(["process", "--json"]).json()
    assert doc["requeued"] == 1 and doc["done"] == 1
    assert book.row_of(task)["status"] == "done"
    requeued = [e for e in book.log(task) if e["event"] == "requeued"]
    assert len(requeued) == 1 and "failed" in requeued[0]["message"]
    assert_log_matches_queue(book)


def test_unrecognised_status_is_left_alone_and_counted(book: Book, tmp_path: Path) -> None:
    """A status sheetq does not know stays untouched and is counted by `status`."""
    sheet_only(book, "the database's status column holds only the six statuses (CHECK)")
    _setup(tmp_path, OK)
    task = run_cli(["enqueue", "job", "{}", "--json"]).json()["task_id"]
    book.set_cell("Queue", 2, "status", "на паузі")
    doc = run_cli(["process", "--json"]).json()
    assert doc["claimed"] == 0
    assert book.row_of(task)["status"] == "на паузі"
    assert run_cli(["status", "--json"]).json()["unrecognised"] == 1


def test_requeue_command_redrives_dead_letters(book: Book, tmp_path: Path) -> None:
    """`requeue` with filters sends failed rows back to pending, logged; --dry-run does not."""
    task = _failed_task(book, tmp_path)
    r = run_cli(["requeue", "--dry-run", "--json"])
    assert r.json()["requeued"] == 1 and book.row_of(task)["status"] == "failed"
    said = run_cli(["requeue", "--dry-run"]).stdout  # the table shows what each row was
    assert "was" in said and "failed" in said and "would be requeued: 1" in said
    assert run_cli(["requeue", "--error-class", "auth", "--json"]).json()["requeued"] == 0
    r = run_cli(
        ["requeue", "--type", "job", "--error-class", "permanent", "--reset-attempts", "--json"]
    )
    assert r.code == 0 and r.json()["task_ids"] == [task]
    row = book.row_of(task)
    assert (row["status"], row["retry_count"], row["error_class"]) == ("pending", "0", "")
    assert book.log(task)[-1]["event"] == "requeued"
    assert run_cli(["requeue", "--task", "t_nope"]).code == 2


def test_skip_command(book: Book, tmp_path: Path) -> None:
    """`skip --task` marks a waiting task skipped with the reason; it never runs."""
    _setup(tmp_path, OK)
    task = run_cli(["enqueue", "job", "{}", "--json"]).json()["task_id"]
    r = run_cli(["skip", "--task", task, "--reason", "done by hand"])
    assert r.code == 0, r.stderr
    assert book.row_of(task)["status"] == "skipped"
    assert "done by hand" in book.log(task)[-1]["message"]
    assert run_cli(["process", "--json"]).json()["claimed"] == 0


def test_status_list_show(book: Book, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """status counts by status × type; list filters; show gives the row and its history."""
    monkeypatch.setenv("SHEETQ_NOW", "2026-01-05T09:00:00Z")
    task = _failed_task(book, tmp_path)
    run_cli(["enqueue", "other", '{"x": 1}'])
    monkeypatch.setenv("SHEETQ_NOW", "2026-01-05T10:00:00Z")
    doc = run_cli(["status", "--json"]).json()
    assert doc["counts"]["failed"] == 1 and doc["counts"]["pending"] == 1
    assert doc["by_type"]["job"]["failed"] == 1 and doc["by_type"]["other"]["pending"] == 1
    assert doc["owed_alerts"] == 1 and doc["without_handler"] == 1
    assert doc["oldest_waiting_seconds"] == 3600
    human = run_cli(["status"])
    assert human.code == 0 and "failed" in human.stdout
    rows = run_cli(["list", "--status", "failed", "--json"]).json()["rows"]
    assert [r["task_id"] for r in rows] == [task] and (
        rows[0]["row"] is None if on_postgres(book) else rows[0]["row"] >= 2
    )
    assert run_cli(["list", "--status", "bogus"]).code == 2
    shown = run_cli(["show", task, "--json"]).json()
    assert shown["rows"][0]["task_id"] == task
    assert [e["event"] for e in shown["log"]] == ["enqueued", "claimed", "failed"]
    assert run_cli(["show", "t_missing"]).code == 2
    assert task in run_cli(["show", task]).stdout


def test_init_adopts_original_nine_columns_and_keeps_manager_columns(
    empty_book: Book, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An Apps Script sheet of the first nine columns gains the rest; old rows get hashes and keys
    and deduplicate; a manager's own column survives every command."""
    if not empty_book.spreadsheet.startswith("local:"):
        pytest.skip("seeded through the local store; the Google variant lives in its own tests")
    from sheetq.sheet.sqlite import SqliteStore

    store = SqliteStore(empty_book.spreadsheet[6:], create=True)
    store.ensure_worksheets(
        {
            "Queue": (*QUEUE_COLUMNS[:9], "notes")  # the original Apps Script layout
        }
    )
    store.write_rows(
        "Queue",
        [
            ["", "", "lead", '{"lead_id": "L-1"}', "done", 0, "", "", "", "called back"],
            ["", "2025-12-01 10:00", "lead", '{"x": 2}', "pending", "", "", "", "", "VIP"],
            ["", "", "lead", "not json", "failed", 1, "", "", "", ""],
        ],
        start_row=2,
    )
    store.close()
    r = run_cli(["init"])
    assert r.code == 0, r.stderr
    assert ("adopted 2" in r.stdout and "not json" not in r.stdout) or "row 4" in r.stdout
    rows = empty_book.records()
    assert rows[0]["idempotency_key"] == "lead:lead_id=L-1"
    assert rows[0]["payload_hash"].startswith("sha256:") and rows[0]["task_id"].startswith("t_")
    assert rows[1]["created_at"] == "2025-12-01 10:00"
    header = empty_book.grid("Queue")[0]
    assert header[9] == "notes" and header[-1] == "group"
    dup = run_cli(["enqueue", "lead", '{"lead_id": "L-1"}', "--json"]).json()
    assert dup["outcome"] == "duplicate" and dup["task_id"] == rows[0]["task_id"]
    write_config(f"[types.lead]\ncommand = {handler_script(tmp_path, 'ok', OK)}\n")
    monkeypatch.setenv("SHEETQ_NOW", "2025-12-01T12:00:00Z")  # within max_age of row 3
    assert run_cli(["process", "--json"]).json()["done"] == 1
    assert [r["notes"] for r in empty_book.records()] == ["called back", "VIP", ""]
    assert run_cli(["init"]).code == 0  # idempotent


def test_reordered_columns_are_found_by_name(book: Book, tmp_path: Path) -> None:
    """Columns are found by name: a column inserted before status by a manager changes nothing."""
    _setup(tmp_path, OK)
    task = run_cli(["enqueue", "job", '{"n": 1}', "--json"]).json()["task_id"]
    book.insert_column("Queue", 2, "Call notes")
    book.set_cell("Queue", 2, "Call notes", "asked for a discount")
    assert run_cli(["process", "--json"]).json()["done"] == 1
    row = book.row_of(task)
    assert row["status"] == "done" and row["Call notes"] == "asked for a discount"


def test_sorted_mid_run_results_land_on_their_task(book: Book, tmp_path: Path) -> None:
    """A person sorting the Queue while handlers run: each result lands on its own task_id."""
    sorter = (
        "import json, os, sys\n"
        "task = json.load(sys.stdin)\n"
        "if task['n'] == 0:\n"
        "    from tests.conftest import LocalBook\n"
        "    from pathlib import Path\n"
        "    LocalBook(Path(os.environ['BOOK'])).sort('Queue', 'type')\n"
        "print('result-' + str(task['n']))\n"
    )
    if not book.spreadsheet.startswith("local:"):
        pytest.skip("the Google variant injects the sort through the emulator")
    import os
    import sys

    os.environ["BOOK"] = book.spreadsheet[6:]
    os.environ["PYTHONPATH"] = str(Path(__file__).resolve().parents[2])
    write_config(
        f"[types.zeta]\ncommand = {handler_script(tmp_path, 's', sorter)}\n"
        f"[types.alpha]\ncommand = {handler_script(tmp_path, 's2', sorter)}\n"
    )
    ids = {}
    for n, t in enumerate(["zeta", "zeta", "alpha", "zeta", "alpha"]):
        ids[n] = run_cli(["enqueue", t, json.dumps({"n": n}), "--json"]).json()["task_id"]
    before = [r["task_id"] for r in book.records()]
    assert run_cli(["process", "--batch-size", "10", "--json"]).json()["done"] == 5
    after = [r["task_id"] for r in book.records()]
    assert before != after  # the sort really happened
    for n, task in ids.items():
        assert book.row_of(task)["result"] == f"result-{n}"
    assert sys.executable


def test_requeue_task_keeps_the_failed_default_and_skip_refuses_finished(
    book: Book, tmp_path: Path
) -> None:
    """`requeue --task` of a done task changes nothing unless --status done says so;
    `skip` refuses done and already-skipped rows (no second log row)."""
    _setup(tmp_path, OK)
    task = run_cli(["enqueue", "job", "{}", "--json"]).json()["task_id"]
    run_cli(["process"])
    r = run_cli(["requeue", "--task", task, "--json"])
    assert r.json()["requeued"] == 0 and "--status done" in r.stderr
    assert book.row_of(task)["status"] == "done"
    assert (
        run_cli(["requeue", "--task", task, "--status", "done", "--json"]).json()["requeued"] == 1
    )
    other = run_cli(["enqueue", "job", '{"x": 1}', "--json"]).json()["task_id"]
    assert run_cli(["skip", "--task", other]).code == 0
    before = len(book.log(other))
    r = run_cli(["skip", "--task", other, "--json"])
    assert r.json()["skipped"] == 0 and len(book.log(other)) == before
    # a refusal of every named task: one line on stderr, exit 2, no "0" count on stdout
    for verb in ("requeue", "skip"):
        r = run_cli([verb, "--task", "t_nosuch"])
        assert (r.code, r.stdout) == (2, ""), r
        assert (
            r.stderr.startswith("sheetq: t_nosuch: no such task in ") and r.stderr.count("\n") == 1
        )


def test_init_leaves_twin_rows_without_task_id_for_a_person(empty_book: Book) -> None:
    """Two rows without task_id and with the same payload cannot be told apart by any write:
    `init` adopts the others, leaves those two as they are and says what to type."""
    if not empty_book.spreadsheet.startswith("local:"):
        pytest.skip("seeded through the local store")
    from sheetq.sheet.sqlite import SqliteStore

    store = SqliteStore(empty_book.spreadsheet[6:], create=True)
    store.ensure_worksheets({"Queue": QUEUE_COLUMNS[:9]})
    twin = ["", "", "lead", '{"lead_id": "L-7"}', "pending", "", "", "", ""]
    store.write_rows(
        "Queue", [twin, ["", "", "lead", '{"lead_id": "L-8"}', "pending"], twin], start_row=2
    )
    store.close()
    r = run_cli(["init"])
    assert r.code == 0, r.stderr
    assert "adopted 1" in r.stdout and "2 row(s) without task_id" in r.stdout
    ids = [row["task_id"] for row in empty_book.records()]
    assert ids[0] == ids[2] == "" and ids[1].startswith("t_")
