"""Order per entity (docs/design.md §14), on every backend: tasks of one group (``--group G``
or the type's ``group_fields``) run one at a time in enqueue order; a task is not claimed
while an earlier task of its group is pending, processing or retry; failed and skipped
tasks release their group unless the type says ``group_blocks_on_failure``; recovery and
requeue keep the order; a group value too long or with a control character is refused."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from tests.cli_helpers import set_now
from tests.conftest import Book, run_cli, write_config
from tests.sheet_only import on_postgres

ON_POSTGRES = True
NOW = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
HANDLER = """
from sheetq import FailTask

def run(task):
    if task.payload.get("fail"):
        raise FailTask("the CRM said no")
    return task.payload["n"]
"""
CONFIG = """
[defaults]
backoff = ["1m"]
jitter = 0
[types.deal]
python = "group_handler:run"
group_fields = ["deal_id"]
idempotent = true
[types.note]
python = "group_handler:run"
group_fields = ["deal_id"]
[types.strict]
python = "group_handler:run"
group_fields = ["deal_id"]
group_blocks_on_failure = true
[types.plain]
python = "group_handler:run"
"""


@pytest.fixture
def deals(monkeypatch: pytest.MonkeyPatch) -> None:
    Path("group_handler.py").write_text(HANDLER, encoding="utf-8")
    write_config(CONFIG)
    set_now(monkeypatch, NOW)


def _enqueue(task_type: str, payload: str, *args: str) -> str:
    r = run_cli(["enqueue", task_type, payload, "--json", *args])
    assert r.code == 0, r.stderr
    return str(r.json()["task_id"])


def _batch(size: int = 10) -> dict[str, int]:
    r = run_cli(["process", "--batch-size", str(size), "--max-batches", "1", "--json"])
    assert r.code == 0, r.stderr
    return dict(r.json())


def _status(book: Book, *ids: str) -> list[str]:
    return [book.row_of(i)["status"] for i in ids]


_OUTCOMES = ("done", "failed", "retry", "skipped", "recovered")


def _claims_by_group(book: Book) -> dict[str, list[str]]:
    """Each group's claimed task ids in log order; asserts that no task of a group was
    claimed while another of it was still running (its claimed row without its outcome)."""
    groups = {row["task_id"]: row["group"] for row in book.records()}
    running: dict[str, str] = {}
    out: dict[str, list[str]] = {}
    for entry in book.log():
        task, group = entry["task_id"], groups.get(entry["task_id"], "")
        if not group:
            continue
        if entry["event"] == "claimed":
            assert group not in running, (group, running[group], task)
            running[group] = task
            out.setdefault(group, []).append(task)
        elif entry["event"] in _OUTCOMES and running.get(group) == task:
            del running[group]
    return out


def test_one_task_of_a_group_at_a_time_in_enqueue_order(
    book: Book, deals: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Three updates of deal 42 (two types), two of deal 7, one without a group: one run
    does them all, each group's one at a time in enqueue order (the log's claimed and
    outcome rows say so); the group cell shows the group; the first batch of 10 on a sheet
    holds one task per group."""
    first = _enqueue("deal", '{"deal_id": 42, "n": "negotiating"}')
    note = _enqueue("note", '{"deal_id": 42, "n": "note"}')
    other = _enqueue("deal", '{"deal_id": 7, "n": "seven"}')
    last = _enqueue("deal", '{"deal_id": 42, "n": "won"}')
    other2 = _enqueue("deal", '{"deal_id": 7, "n": "seven again"}')
    free = _enqueue("plain", '{"n": "free"}')
    assert book.row_of(first)["group"] == "deal_id=42" and book.row_of(free)["group"] == ""
    set_now(monkeypatch, NOW + timedelta(minutes=1))
    r = run_cli(["process", "--until-empty", "--json"])
    assert r.code == 0 and r.json()["done"] == 6, (r.stdout, r.stderr)
    assert _claims_by_group(book) == {
        "deal_id=42": [first, note, last],
        "deal_id=7": [other, other2],
    }
    if not on_postgres(book):  # a sheet's batch is claimed in one write
        claimed = [e["task_id"] for e in book.log() if e["event"] == "claimed"]
        assert set(claimed[:3]) == {first, other, free}, claimed


def test_a_whole_group_runs_in_order_in_one_until_empty_run(
    book: Book, deals: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`process --until-empty` runs a group of five to the end in enqueue order, without
    waiting for another run."""
    ids = [_enqueue("deal", f'{{"deal_id": 1, "n": "{i}"}}') for i in range(5)]
    set_now(monkeypatch, NOW + timedelta(minutes=1))
    r = run_cli(["process", "--until-empty", "--json"])
    assert r.code == 0 and r.json()["done"] == 5, (r.stdout, r.stderr)
    assert _claims_by_group(book) == {"deal_id=1": ids}


def test_a_failed_task_releases_its_group(
    book: Book, deals: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A `note` that fails for good is in the dead-letter queue; the next update of its
    deal runs after it, in the same run."""
    bad = _enqueue("note", '{"deal_id": 5, "n": "bad", "fail": true}')
    after = _enqueue("deal", '{"deal_id": 5, "n": "after"}')
    set_now(monkeypatch, NOW + timedelta(minutes=1))
    r = run_cli(["process", "--until-empty", "--json"])
    assert (r.json()["failed"], r.json()["done"]) == (1, 1), r.stdout
    assert _status(book, bad, after) == ["failed", "done"]
    assert _claims_by_group(book) == {"deal_id=5": [bad, after]}


def test_group_blocks_on_failure_waits_for_a_person(
    book: Book, deals: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A `strict` task that fails holds its group: the next one waits run after run, and
    `status` names the group and the task holding it, until a person requeues it (it runs
    again first) or skips it."""
    bad = _enqueue("strict", '{"deal_id": 9, "n": "bad", "fail": true}')
    after = _enqueue("deal", '{"deal_id": 9, "n": "after"}')
    later = _enqueue("deal", '{"deal_id": 9, "n": "later"}')
    set_now(monkeypatch, NOW + timedelta(minutes=1))
    assert _batch()["failed"] == 1 and _status(book, after) == ["pending"]
    # its alert went out (a local scan leaves out finished rows that owe none): still held
    book.set_cell("Queue", int(book.row_of(bad)["_row"]), "alerted_at", "2026-01-05T09:01:00Z")
    assert _batch()["claimed"] == 0 and _status(book, after) == ["pending"]
    doc = run_cli(["status", "--json"]).json()
    assert doc["blocked_groups"] == [
        {
            "group": "deal_id=9",
            "task_id": bad,
            "type": "strict",
            "status": "failed",
            "error_class": "permanent",
            "waiting": 2,
            "oldest_waiting_seconds": 60,
        }
    ]
    text = run_cli(["status"]).stdout
    assert "deal_id=9" in text and bad in text and "blocked" in text
    # a person requeues it with the payload still failing: it runs first and fails again
    assert run_cli(["requeue", "--task", bad]).code == 0
    assert _batch()["failed"] == 1 and _status(book, after) == ["pending"]
    assert run_cli(["skip", "--task", bad, "--reason", "stage set by hand"]).code == 0
    assert run_cli(["status", "--json"]).json()["blocked_groups"] == []
    assert _batch(1)["done"] == 1 and _status(book, after, later) == ["done", "pending"]
    assert _batch(1)["done"] == 1 and _status(book, later) == ["done"]


def test_a_requeued_earlier_task_runs_before_the_rest_of_its_group(
    book: Book, deals: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A failed `note` released its group; requeued while the later updates still wait, it
    is the earliest again and runs before them."""
    bad = _enqueue("note", '{"deal_id": 3, "n": "first", "fail": true}')
    second = _enqueue("deal", '{"deal_id": 3, "n": "second"}')
    third = _enqueue("deal", '{"deal_id": 3, "n": "third"}')
    set_now(monkeypatch, NOW + timedelta(minutes=1))
    assert _batch(1)["failed"] == 1
    assert run_cli(["requeue", "--task", bad]).code == 0
    assert _batch(1)["claimed"] == 1 and _status(book, bad, second) == ["failed", "pending"]
    assert _batch(1)["done"] == 1 and _status(book, second, third) == ["done", "pending"]


def test_a_recovered_task_keeps_its_group(
    book: Book, deals: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A task whose runner died (processing, lease over) holds its group: recovered to
    retry, it runs again before the next update of its deal."""
    first = _enqueue("deal", '{"deal_id": 4, "n": "first"}')
    second = _enqueue("deal", '{"deal_id": 4, "n": "second"}')
    row = int(book.row_of(first)["_row"])
    book.set_cell("Queue", row, "status", "processing")
    book.set_cell("Queue", row, "lease_owner", "run_dead")
    book.set_cell("Queue", row, "lease_until", "2026-01-05T09:00:30Z")
    set_now(monkeypatch, NOW + timedelta(minutes=1))
    doc = _batch()
    assert (doc["recovered"], doc["claimed"]) == (1, 0), doc
    assert _status(book, first, second) == ["retry", "pending"]
    set_now(monkeypatch, NOW + timedelta(minutes=3))
    assert _batch(1)["done"] == 1 and _status(book, first, second) == ["done", "pending"]
    assert _batch(1)["done"] == 1 and _status(book, second) == ["done"]


@pytest.mark.parametrize(
    ("args", "payload", "why"),
    [
        (["--group", "deal\t42"], '{"n": 1}', "control character"),
        (["--group", "deal\n42"], '{"n": 1}', "control character"),
        (["--group", "x" * 201], '{"n": 1}', "201 characters"),
        (["--group", "   "], '{"n": 1}', "empty"),
        ([], '{"deal_id": "' + "9" * 300 + '", "n": 1}', "characters"),
        ([], '{"deal_id": "4\\u00072", "n": 1}', "control character"),
    ],
)
def test_a_bad_group_is_refused(
    book: Book, deals: None, args: list[str], payload: str, why: str
) -> None:
    """A group too long, empty or with a control character (given or read from the
    payload by group_fields): one line naming it, exit 2, nothing written."""
    before = (book.records(), book.records("QueueLog"))
    r = run_cli(["enqueue", "deal", payload, *args])
    assert r.code == 2, (r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "group" in lines[0] and why in lines[0], r.stderr
    assert (book.records(), book.records("QueueLog")) == before
