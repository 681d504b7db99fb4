"""Priority (docs/design.md §14): claims take due tasks by priority (higher first), then by due
time, then by task id, on every backend; a type's ``priority``, ``enqueue --priority``,
``requeue --priority`` and a person's edit of the ``priority`` cell set it; a priority that
is not an integer is refused (exit 2, nothing written) or, typed into a cell, read as the
type's and said so."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from sheetq.model import QUEUE_COLUMNS
from tests.cli_helpers import set_now
from tests.conftest import Book, run_cli, write_config
from tests.sheet_only import on_postgres, sheet_only

ON_POSTGRES = True
NOW = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
HANDLER = """
from pathlib import Path
from sheetq import FailTask

def run(task):
    if Path("FAIL").exists():
        raise FailTask("told to fail")
    return task.payload["n"]
"""
CONFIG = """
[types.job]
python = "prio_handler:run"
[types.urgent]
python = "prio_handler:run"
priority = 10
"""


@pytest.fixture
def jobs(monkeypatch: pytest.MonkeyPatch) -> None:
    """Types ``job`` (priority 0) and ``urgent`` (priority 10), whose handler returns ``n``."""
    Path("prio_handler.py").write_text(HANDLER, encoding="utf-8")
    write_config(CONFIG)
    set_now(monkeypatch, NOW)


def _enqueue(n: str, *args: str, task_type: str = "job") -> str:
    r = run_cli(["enqueue", task_type, f'{{"n": "{n}"}}', "--json", *args])
    assert r.code == 0, r.stderr
    return str(r.json()["task_id"])


def _run_order(book: Book, count: int) -> list[str]:
    """Process one task at a time, ``count`` times: the ``n`` of each task run, in order."""
    order = []
    for _ in range(count):
        r = run_cli(["process", "--batch-size", "1", "--max-batches", "1", "--json"])
        assert r.code == 0, r.stderr
        assert r.json()["done"] == 1, r.json()
        done = {row["task_id"]: row["result"] for row in book.records() if row["status"] == "done"}
        new = [n for n in done.values() if n not in order]
        assert len(new) == 1, done
        order += new
    return order


def test_claims_take_the_highest_priority_first(
    book: Book, jobs: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Older tasks of priority 0 wait behind a newer one given --priority 5 and one of a type
    whose priority is 10; equal priorities run oldest first; the cell shows each priority."""
    old = _enqueue("old")
    set_now(monkeypatch, NOW + timedelta(seconds=1))
    older_twin = _enqueue("old2")
    set_now(monkeypatch, NOW + timedelta(seconds=2))
    five = _enqueue("five", "--priority", "5")
    urgent = _enqueue("urgent", task_type="urgent")
    low = _enqueue("low", "--priority", "-3")
    set_now(monkeypatch, NOW + timedelta(minutes=1))
    cells = {row["task_id"]: row["priority"] for row in book.records()}
    assert cells == {old: "0", older_twin: "0", five: "5", urgent: "10", low: "-3"}
    assert _run_order(book, 5) == ["urgent", "five", "old", "old2", "low"]


def test_a_person_moves_a_row_forward_by_its_priority_cell(
    book: Book, jobs: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A manager typing 7 into the newest task's priority cell makes it run first."""
    _enqueue("a")
    _enqueue("b")
    last = _enqueue("c")
    book.set_cell("Queue", int(book.row_of(last)["_row"]), "priority", 7)
    set_now(monkeypatch, NOW + timedelta(minutes=1))
    assert _run_order(book, 3) == ["c", "a", "b"]


def test_a_priority_typed_as_words_runs_at_the_types_priority_and_is_named(
    book: Book, jobs: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ "high" typed into a priority cell crashes nothing: the task runs at its type's
    priority (urgent: 10, ahead of a job given 5), and process and status name the cell."""
    sheet_only(book, "a database's priority column holds only integers")
    _enqueue("five", "--priority", "5")
    typo = _enqueue("urgent", task_type="urgent")
    book.set_cell("Queue", int(book.row_of(typo)["_row"]), "priority", "high")
    set_now(monkeypatch, NOW + timedelta(minutes=1))
    status = run_cli(["status", "--json"])
    assert status.code == 0, status.stderr
    assert status.json()["unreadable_priorities"] == [
        {"task_id": typo, "priority": "high", "runs_at": 10}
    ]
    assert "'high'" in run_cli(["status"]).stdout
    r = run_cli(["process", "--batch-size", "1", "--max-batches", "1", "--json"])
    assert r.code == 0 and r.json()["done"] == 1, r.stderr
    assert book.row_of(typo)["status"] == "done"
    note = [line for line in r.stderr.splitlines() if "'high'" in line]
    assert len(note) == 1 and typo in note[0] and "priority 10" in note[0], r.stderr
    assert book.row_of(typo)["priority"] == "high"  # a person's cell is theirs


def test_requeue_with_a_priority_runs_that_task_first(
    book: Book, jobs: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`requeue --priority 9` sends a failed task back ahead of older waiting work, logged."""
    Path("FAIL").touch()
    bad = _enqueue("bad")
    assert run_cli(["process"]).code == 0
    assert book.row_of(bad)["status"] == "failed"
    Path("FAIL").unlink()
    _enqueue("waiting")
    r = run_cli(["requeue", "--task", bad, "--priority", "9"])
    assert r.code == 0, r.stderr
    assert book.row_of(bad)["priority"] == "9"
    assert "priority 9" in [e for e in book.log(bad) if e["event"] == "requeued"][-1]["message"]
    set_now(monkeypatch, NOW + timedelta(minutes=1))
    assert _run_order(book, 2) == ["bad", "waiting"]


@pytest.mark.parametrize("value", ["high", "1.5", "10000000000", "", "0x10"])
def test_a_priority_that_is_not_an_integer_is_refused(book: Book, jobs: None, value: str) -> None:
    """`enqueue --priority X` and `requeue --priority X`: one line naming it, exit 2, nothing
    written."""
    before = (book.records(), book.records("QueueLog"))
    r = run_cli(["enqueue", "job", '{"n": "x"}', "--priority", value])
    assert r.code == 2, (r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "--priority" in lines[0] and "integer" in lines[0], r.stderr
    assert (book.records(), book.records("QueueLog")) == before
    r = run_cli(["requeue", "--status", "pending", "--priority", value])
    assert r.code == 2 and "--priority" in r.stderr, (r.stdout, r.stderr)
    assert (book.records(), book.records("QueueLog")) == before


def test_a_types_priority_that_is_not_an_integer_is_refused(book: Book) -> None:
    """`priority = "high"` in sheetq.toml: exit 2 naming the key."""
    write_config('[types.job]\ncommand = ["true"]\npriority = "high"\n')
    r = run_cli(["enqueue", "job", '{"n": 1}'])
    assert r.code == 2 and "[types.job].priority" in r.stderr, r.stderr
    assert book.records() == []


def test_init_adds_the_priority_column_to_an_existing_sheet(
    empty_book: Book, jobs: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Queue of the columns before priority: other commands say to run init; init adds the
    column at the end without touching a cell; the old row runs at its type's priority."""
    if on_postgres(empty_book) or not empty_book.spreadsheet.startswith("local:"):
        pytest.skip("seeded through the local store (PostgreSQL: migration 0005)")
    from sheetq.sheet.sqlite import SqliteStore

    old = tuple(c for c in QUEUE_COLUMNS if c != "priority")
    store = SqliteStore(empty_book.spreadsheet[6:], create=True)
    store.ensure_worksheets({"Queue": (*old, "notes")})
    row = dict.fromkeys(old, "")
    row.update(
        task_id="t_old",
        created_at="2026-01-05T08:00:00Z",
        type="urgent",
        payload_json='{"n":"old"}',
        status="pending",
        idempotency_key="urgent:x",
        payload_hash="sha256:x",
        updated_at="2026-01-05T08:00:00Z",
    )
    store.write_rows("Queue", [[*row.values(), "call back"]], start_row=2)
    store.close()
    r = run_cli(["enqueue", "job", '{"n": "new"}', "--priority", "5"])
    assert r.code == 2 and "sheetq init" in r.stderr, r.stderr
    assert run_cli(["init"]).code == 0
    header = empty_book.grid("Queue")[0]
    assert header[-2:] == ["notes", "priority"]
    (kept,) = empty_book.records()
    assert kept["notes"] == "call back" and kept["priority"] == "" and kept["task_id"] == "t_old"
    _enqueue("new", "--priority", "5")
    set_now(monkeypatch, NOW + timedelta(minutes=1))
    assert _run_order(empty_book, 2) == ["old", "new"]  # urgent's 10 beats 5


def test_status_shows_the_oldest_due_task_of_each_priority(
    book: Book, jobs: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No task starves unseen: `status` gives, per priority (highest first), how many tasks
    are due and the longest-due one; a delayed task is not due yet and not counted."""
    old = _enqueue("old")
    set_now(monkeypatch, NOW + timedelta(minutes=10))
    _enqueue("newer")
    urgent = _enqueue("urgent", task_type="urgent")
    _enqueue("later", "--priority", "10", "--delay", "1h")
    set_now(monkeypatch, NOW + timedelta(minutes=30))
    r = run_cli(["status", "--json"])
    assert r.code == 0, r.stderr
    assert r.json()["oldest_due_by_priority"] == [
        {"priority": 10, "due": 1, "task_id": urgent, "oldest_due_seconds": 1200},
        {"priority": 0, "due": 2, "task_id": old, "oldest_due_seconds": 1800},
    ]
    text = run_cli(["status"]).stdout
    assert f"10: 1, oldest {urgent} due 20m" in text and f"0: 2, oldest {old} due 30m" in text
