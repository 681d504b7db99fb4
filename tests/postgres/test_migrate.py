"""`sheetq migrate --to postgresql://…`: a sheet or local queue copied into PostgreSQL with
ids, keys, statuses, attempts, leases and history kept; reruns; refusals (docs/design.md §11)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import (
    Book,
    LocalBook,
    make_google,
    run_cli,
    write_config,
)

pytestmark = pytest.mark.postgres

NOW = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
HANDLERS = """
import sheetq

def ok(task):
    return "crm-" + str(task.payload["n"])

def bad(task):
    raise sheetq.FailTask("bad row")

def flaky(task):
    raise sheetq.RetryTask("try later")
"""
CONFIG = """
[types.ok]
python = "migrate_handlers:ok"
owner = "sales"
[types.bad]
python = "migrate_handlers:bad"
owner = "ops"
[types.flaky]
python = "migrate_handlers:flaky"
"""


def _at(monkeypatch: pytest.MonkeyPatch, when: datetime) -> None:
    monkeypatch.setenv("SHEETQ_NOW", when.strftime("%Y-%m-%dT%H:%M:%SZ"))


@pytest.fixture
def dest(pg_url: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """A migrated, empty PostgreSQL database; SHEETQ_DATABASE_URL unset so that commands
    without --database-url work on the sheet."""
    monkeypatch.delenv("SHEETQ_DATABASE_URL")
    return pg_url


@pytest.fixture
def local(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> LocalBook:
    """An initialised local workbook with handlers configured (SHEETQ_SPREADSHEET set)."""
    book = LocalBook(tmp_path / "book.db")
    monkeypatch.setenv("SHEETQ_SPREADSHEET", book.spreadsheet)
    (Path.cwd() / "migrate_handlers.py").write_text(HANDLERS, encoding="utf-8")
    write_config(CONFIG)
    assert run_cli(["init"]).code == 0
    _at(monkeypatch, NOW)
    return book


def _enqueue(task_type: str, payload: dict[str, Any], *extra: str) -> str:
    r = run_cli(["enqueue", task_type, json.dumps(payload), "--json", *extra])
    assert r.code == 0, r.stderr
    return str(r.json()["task_id"])


def _fill(monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """A queue with every kind of task: done, failed, retry, pending, delayed, archived."""
    ids = {
        "done": _enqueue("ok", {"n": 1}),
        "failed": _enqueue("bad", {"n": 2}),
        "retry": _enqueue("flaky", {"n": 3}),
        "archived": _enqueue("ok", {"n": 4}, "--key", "A-4"),
    }
    r = run_cli(["process", "--json"])
    assert r.code == 0, r.stderr
    _at(monkeypatch, NOW + timedelta(days=2))
    r = run_cli(["archive", "--older-than", "1d", "--json"])
    assert r.code == 0, r.stderr
    ids["pending"] = _enqueue("ok", {"n": 5})
    ids["delayed"] = _enqueue("ok", {"n": 6}, "--delay", "1h")
    return ids


def _migrate(url: str, *extra: str) -> Any:
    r = run_cli(["migrate", "--to", url, "--json", *extra])
    assert r.code == 0, r.stderr
    return r.json()


def _on_pg(url: str, *args: str) -> Any:
    r = run_cli(["--database-url", url, *args, "--json"])
    assert r.code == 0, r.stderr
    return r.json()


def _status(doc: dict[str, Any]) -> tuple[Any, ...]:
    return (doc["counts"], doc["by_type"], doc["total"], doc["due_retries"], doc["owed_alerts"])


def test_copies_everything_and_status_matches(
    local: LocalBook, dest: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every task, archived task and log row is copied; `status` on PostgreSQL equals the
    sheet's, and each task's cells (ids, keys, attempts, results, owners) are kept."""
    ids = _fill(monkeypatch)
    before = run_cli(["status", "--json"]).json()
    sheet_rows = {r["task_id"]: r for r in local.records()}
    doc = _migrate(dest)
    assert doc["copied"] == {
        "tasks": len(sheet_rows),
        "log": len(local.log()),
        "archive": 2,  # both done tasks
        "log_archive": 0,
    }
    assert doc["refused"] == [] and doc["duplicates"] == []
    after = _on_pg(dest, "status")
    assert _status(after) == _status(before)
    from tests.conftest import PgBook

    pg = PgBook(dest)
    for task_id, row in sheet_rows.items():
        moved = pg.row_of(task_id)
        assert {k: moved[k] for k in row if k != "_row"} == {
            k: v for k, v in row.items() if k != "_row"
        }
    assert pg.row_of(ids["archived"], "QueueArchive")["idempotency_key"] == "ok:A-4"
    again = run_cli(["--database-url", dest, "enqueue", "ok", '{"n": 4}', "--key", "A-4"])
    assert again.code == 0 and ids["archived"] in again.stdout  # its key still deduplicates


def test_second_run_copies_nothing(
    local: LocalBook, dest: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Running migrate again copies nothing and reports everything as already present."""
    _fill(monkeypatch)
    first = _migrate(dest)
    second = _migrate(dest)
    assert second["copied"] == {"tasks": 0, "log": 0, "archive": 0, "log_archive": 0}
    assert second["already_present"] == first["copied"]
    from tests.conftest import PgBook

    assert len(PgBook(dest).log()) == first["copied"]["log"]


def test_new_sheet_rows_are_added_on_a_rerun(
    local: LocalBook, dest: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A task and log rows added to the sheet after a first copy are the only rows a rerun adds,
    also when old log rows were moved to QueueLogArchive in between."""
    _fill(monkeypatch)
    _migrate(dest)
    _at(monkeypatch, NOW + timedelta(days=40))
    assert run_cli(["archive", "--log-older-than", "30d"]).code == 0
    new = _enqueue("ok", {"n": 7})
    doc = _migrate(dest)
    assert doc["copied"]["tasks"] == 1 and doc["copied"]["log"] == 1
    assert doc["copied"]["log_archive"] == 0 and doc["already_present"]["log_archive"] > 0
    assert _on_pg(dest, "show", new)["log"][0]["event"] == "enqueued"


def test_show_gives_the_history(
    local: LocalBook, dest: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`sheetq show` of a migrated task on PostgreSQL lists the same log as on the sheet."""
    ids = _fill(monkeypatch)
    on_sheet = run_cli(["show", ids["failed"], "--json"]).json()
    _migrate(dest)
    on_pg = _on_pg(dest, "show", ids["failed"])

    def events(doc: dict[str, Any]) -> list[tuple[str, ...]]:
        return [(e["ts"], e["event"], e["status"], e["message"], e["run_id"]) for e in doc["log"]]

    assert events(on_pg) == events(on_sheet)
    assert [e[1] for e in events(on_pg)] == ["enqueued", "claimed", "failed"]


def test_refuses_while_a_run_holds_the_lease(
    local: LocalBook, dest: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run lease not yet expired: exit 2, a line saying until when, nothing copied."""
    from sheetq.sheet.runner import lease_name, lease_token
    from sheetq.sheet.sqlite import SqliteStore
    from sheetq.sheet.store import ChangeSet, LeaseChange

    _enqueue("ok", {"n": 1})
    store = SqliteStore(local.path)
    token = lease_token(NOW + timedelta(minutes=5))
    store.apply(ChangeSet(lease=LeaseChange(lease_name("Queue"), token, None)))
    store.close()
    r = run_cli(["migrate", "--to", dest])
    assert r.code == 2
    assert "run lease until 2026-01-05T09:05:00Z" in r.stderr
    assert _on_pg(dest, "status")["total"] == 0
    _at(monkeypatch, NOW + timedelta(minutes=6))  # the lease ran out: the run is gone
    assert _migrate(dest)["copied"]["tasks"] == 1


def test_refuses_while_rows_are_processing(
    local: LocalBook, dest: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rows processing under an unexpired lease: exit 2 saying how many and until when."""
    _enqueue("ok", {"n": 1})
    _enqueue("ok", {"n": 2})
    for row, until in ((2, "2026-01-05T09:10:00Z"), (3, "2026-01-05T09:20:00Z")):
        local.set_cell("Queue", row, "status", "processing")
        local.set_cell("Queue", row, "lease_owner", "run_x")
        local.set_cell("Queue", row, "lease_until", until)
    r = run_cli(["migrate", "--to", dest])
    assert r.code == 2
    assert "2 task(s) are processing under a lease until 2026-01-05T09:20:00Z" in r.stderr
    assert _on_pg(dest, "status")["total"] == 0


def test_bad_cells_are_refused_and_named(local: LocalBook, dest: str) -> None:
    """An unknown status, a time that is no time, a payload that is not JSON: those rows are
    refused with task id, row, column and value; the others are copied; exit 2."""
    ids = [_enqueue("ok", {"n": n}) for n in range(5)]
    local.set_cell("Queue", 2, "status", "maybe")
    local.set_cell("Queue", 3, "created_at", "yesterday")
    local.set_cell("Queue", 4, "payload_json", "{oops")
    r = run_cli(["migrate", "--to", dest, "--json"])
    assert r.code == 2, r.stderr
    doc = r.json()
    assert doc["copied"]["tasks"] == 2
    refused = {(x["task_id"], x["row"], x["column"], x["value"]) for x in doc["refused"]}
    assert refused == {
        (ids[0], 2, "status", "maybe"),
        (ids[1], 3, "created_at", "yesterday"),
        (ids[2], 4, "payload_json", "{oops"),
    }
    assert all(x["reason"] and x["worksheet"] == "Queue" for x in doc["refused"])
    human = run_cli(["migrate", "--to", dest])
    assert human.code == 2
    assert f"Queue row 2: {ids[0]} status 'maybe': not a status sheetq knows" in human.stdout


def test_duplicate_keys_keep_both_and_skip_the_later(local: LocalBook, dest: str) -> None:
    """Two rows with one key: both copied, the later `skipped`/`duplicate` naming the winner,
    logged; the key belongs to the earlier one."""
    first = _enqueue("ok", {"n": 1}, "--key", "L-1")
    second = _enqueue("ok", {"n": 2})
    local.set_cell("Queue", 3, "idempotency_key", "ok:L-1")  # a manager's copy-paste
    doc = _migrate(dest)
    assert doc["copied"]["tasks"] == 2
    assert doc["duplicates"] == [
        {
            "idempotency_key": "ok:L-1",
            "task_id": second,
            "winner": first,
            "was": "pending",
            "now": "skipped",
        }
    ]
    from tests.conftest import PgBook

    pg = PgBook(dest)
    loser = pg.row_of(second)
    assert (loser["status"], loser["error_class"]) == ("skipped", "duplicate")
    assert first in loser["last_error"]
    assert pg.row_of(first)["status"] == "pending"
    assert [e["event"] for e in _on_pg(dest, "show", second)["log"]] == ["enqueued", "skipped"]
    again = run_cli(["--database-url", dest, "enqueue", "ok", '{"n": 1}', "--key", "L-1", "--json"])
    assert again.json()["task_id"] == first
    assert _migrate(dest)["duplicates"] == []  # a rerun decides nothing again


def test_a_requeued_duplicate_loser_never_runs(local: LocalBook, dest: str) -> None:
    """A failed task that lost its key keeps `failed` through the move; requeued by hand on
    PostgreSQL, the claim skips it as a duplicate of the key's holder instead of running it
    (as the sheet engine would)."""
    first = _enqueue("bad", {"n": 1}, "--key", "B-1")
    second = _enqueue("bad", {"n": 2})
    assert run_cli(["process", "--json"]).json()["failed"] == 2
    local.set_cell("Queue", 3, "idempotency_key", "bad:B-1")  # a manager's copy-paste
    doc = _migrate(dest)
    assert [(d["task_id"], d["winner"], d["was"], d["now"]) for d in doc["duplicates"]] == [
        (second, first, "failed", "failed")
    ]
    requeued = _on_pg(dest, "requeue", "--task", second)
    assert requeued["requeued"] == 1
    ran = _on_pg(dest, "process")
    assert (ran["claimed"], ran["skipped"]) == (0, 1)
    from tests.conftest import PgBook

    loser = PgBook(dest).row_of(second)
    assert (loser["status"], loser["error_class"]) == ("skipped", "duplicate")
    assert first in loser["last_error"]
    events = [e["event"] for e in _on_pg(dest, "show", second)["log"]]
    assert events.count("claimed") == 1  # the sheet's run only
    assert events[-1] == "skipped"


def test_warns_which_database_is_written(
    local: LocalBook, dest: str, pg_server: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With SHEETQ_DATABASE_URL naming another database, migrate says it writes to --to, and
    an empty database gets its schema first."""
    _enqueue("ok", {"n": 1})
    empty = str(pg_server.new_database(migrated=False))
    monkeypatch.setenv("SHEETQ_DATABASE_URL", dest)
    r = run_cli(["migrate", "--to", empty])
    assert r.code == 0, r.stderr
    assert "migrate writes to --to" in r.stderr
    assert "1 copied" in r.stdout
    assert _on_pg(empty, "status")["total"] == 1
    assert _on_pg(dest, "status")["total"] == 0


def test_google_source_with_typed_local_times(
    sheets_emulator: Any, dest: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Google sheet: a time a manager typed in locale form is read in the spreadsheet's time
    zone; statuses typed in capitals are read as sheetq reads them."""
    book: Book = make_google(sheets_emulator, monkeypatch, time_zone="Europe/Kyiv")
    assert run_cli(["init"]).code == 0
    _at(monkeypatch, NOW)
    task = _enqueue("ok", {"n": 1})
    other = _enqueue("ok", {"n": 2})
    book.set_cell("Queue", 2, "next_retry_at", "1/6/2026 10:00")
    book.set_cell("Queue", 3, "status", " Failed")
    before = run_cli(["status", "--json"]).json()
    doc = _migrate(dest)
    assert doc["copied"]["tasks"] == 2 and doc["copied"]["log"] == 2
    assert _status(_on_pg(dest, "status")) == _status(before)
    from tests.conftest import PgBook

    pg = PgBook(dest)
    assert pg.row_of(task)["next_retry_at"] == "2026-01-06T08:00:00Z"  # 10:00 in Kyiv, UTC+2
    assert pg.row_of(other)["status"] == "failed"
