"""The spreadsheet as a live mirror of a PostgreSQL queue (docs/design.md §12): `sheetq
mirror` against a real PostgreSQL server and the loopback Sheets emulator, both variables set."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest

from sheetq.model import QUEUE_COLUMNS
from tests.conftest import GoogleBook, Result, make_google, run_cli
from tests.postgres.test_clock_skew import _env as skewed_env

pytestmark = [pytest.mark.postgres, pytest.mark.google]

NOW = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)


class Mirrored:
    """A queue in PostgreSQL and its mirror spreadsheet in the emulator."""

    def __init__(self, url: str, book: GoogleBook, monkeypatch: pytest.MonkeyPatch) -> None:
        self.url = url
        self.book = book
        self.emulator = book.emulator
        self.monkeypatch = monkeypatch
        self.enqueued = 0
        self.at(NOW)

    def at(self, when: datetime) -> None:
        self.monkeypatch.setenv("SHEETQ_NOW", when.isoformat())

    def sql(self, query: str, params: Any = ()) -> list[tuple[Any, ...]]:
        with psycopg.connect(self.url, autocommit=True) as conn:
            cur = conn.execute(query, params)
            return list(cur.fetchall()) if cur.description else []

    def enqueue(self, count: int, type_: str = "job") -> list[str]:
        start = self.enqueued
        self.enqueued += count
        lines = "".join(
            json.dumps({"n": start + i, "text": "+380501234567"}) + "\n" for i in range(count)
        )
        result = run_cli(["enqueue", type_, "--jsonl", "--json"], input=lines)
        assert result.code == 0, result.stderr
        ids = [str(r[0]) for r in self.sql("SELECT task_id FROM sheetq_tasks ORDER BY created_at")]
        return ids[-count:]

    def set_status(self, task_id: str, status: str, **more: Any) -> None:
        sets = ", ".join(["status = %s", *(f"{k} = %s" for k in more)])
        self.sql(
            f"UPDATE sheetq_tasks SET {sets} WHERE task_id = %s",
            (status, *more.values(), task_id),
        )

    def mirror(self) -> Result:
        return run_cli(["mirror", "--json"])

    def passed(self) -> dict[str, Any]:
        """One pass that must succeed; its JSON document."""
        self.emulator.reset_counts()
        result = self.mirror()
        assert result.code == 0, result.stderr
        doc: dict[str, Any] = result.json()
        assert doc["requests"] == self.emulator.count()
        return doc

    def row(self, task_id: str) -> dict[str, str]:
        return self.book.row_of(task_id)

    def truth(self) -> dict[str, tuple[str, ...]]:
        """Every task of the window as PostgreSQL has it, as the §2 cell texts."""
        from sheetq.config import load_settings
        from sheetq.postgres.mirror import PgMirror
        from sheetq.postgres.session import Session

        session = Session(load_settings())
        try:
            with session.transaction() as conn:
                return PgMirror(session).load(conn, NOW, 7 * 86400).truth
        finally:
            session.close()

    def assert_sheet_is_truth(self) -> None:
        """Every Queue row's sheetq cells equal PostgreSQL's for its task, and every task of
        the window has exactly one row."""
        truth = self.truth()
        rows = [r for r in self.book.records() if r.get("task_id")]
        ids = [r["task_id"] for r in rows]
        assert sorted(ids) == sorted(truth), "rows and tasks of the window differ"
        for record in rows:
            want = dict(zip(QUEUE_COLUMNS, truth[record["task_id"]], strict=True))
            got = {name: record.get(name, "") for name in QUEUE_COLUMNS}
            assert got == want, record["task_id"]


@pytest.fixture
def mirrored(pg_url: str, sheets_emulator: Any, monkeypatch: pytest.MonkeyPatch) -> Mirrored:
    book = make_google(sheets_emulator, monkeypatch)
    return Mirrored(pg_url, book, monkeypatch)


def test_needs_both_variables(pg_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without SHEETQ_SPREADSHEET, `mirror` exits 2 naming the missing variable."""
    result = run_cli(["mirror"])
    assert result.code == 2
    assert "SHEETQ_SPREADSHEET" in result.stderr
    assert "SHEETQ_DATABASE_URL" not in result.stderr.split("needs", 1)[1].split(":")[0]


def test_first_pass_initialises_and_projects_open_and_recent(mirrored: Mirrored) -> None:
    """Open tasks and finished ones of the window are rows; an old finished one is not; log
    rows are appended; the worksheets are created with init's format."""
    ids = mirrored.enqueue(4)
    mirrored.set_status(ids[0], "failed", last_error="boom")
    mirrored.set_status(ids[1], "done", updated_at=NOW - timedelta(days=1))
    mirrored.set_status(ids[2], "done", updated_at=NOW - timedelta(days=8))
    doc = mirrored.passed()
    assert doc["appended"] == 3 and doc["log_appended"] == 4
    records = mirrored.book.records()
    assert {r["task_id"] for r in records} == {ids[0], ids[1], ids[3]}
    assert mirrored.row(ids[0])["status"] == "failed"
    assert mirrored.row(ids[0])["last_error"] == "boom"
    assert len(mirrored.book.log()) == 4
    assert mirrored.emulator.named_ranges(mirrored.book.key), "the mirror's token"
    mirrored.assert_sheet_is_truth()


def test_unchanged_pass_costs_one_request_and_changes_two(mirrored: Mirrored) -> None:
    """A pass with nothing to write is 1 Sheets request; one with changes is 2, however many
    rows changed (updates, appends, deletes and log rows in one write)."""
    ids = mirrored.enqueue(30)
    mirrored.passed()
    assert mirrored.passed()["requests"] == 1
    for task_id in ids[:10]:
        mirrored.set_status(task_id, "processing", lease_owner="run_x")
    for task_id in ids[10:15]:
        mirrored.set_status(task_id, "done", updated_at=NOW - timedelta(days=9))
    mirrored.enqueue(7)
    doc = mirrored.passed()
    assert (doc["updated"], doc["appended"], doc["deleted"]) == (10, 7, 5)
    assert doc["log_appended"] == 7
    assert doc["requests"] == 2
    mirrored.assert_sheet_is_truth()
    assert mirrored.passed()["requests"] == 1


def test_rows_leaving_the_window_are_removed(mirrored: Mirrored) -> None:
    """A finished task leaves the sheet once keep_finished has passed."""
    ids = mirrored.enqueue(3)
    mirrored.set_status(ids[1], "done", updated_at=NOW)
    mirrored.passed()
    assert mirrored.row(ids[1])["status"] == "done"
    mirrored.at(NOW + timedelta(days=7, seconds=1))
    doc = mirrored.passed()
    assert doc["deleted"] == 1
    assert [r["task_id"] for r in mirrored.book.records()] == [ids[0], ids[2]]


def test_managers_column_kept_across_passes(mirrored: Mirrored) -> None:
    """A manager's own column keeps its cells, matched by task_id, while rows change, rows
    above are removed and rows are sorted."""
    ids = mirrored.enqueue(4)
    mirrored.passed()
    mirrored.book.insert_column("Queue", 2, "notes")
    row = mirrored.row(ids[2])
    mirrored.book.set_cell("Queue", int(row["_row"]), "notes", "call the supplier")
    mirrored.book.sort("Queue", "task_id")
    mirrored.set_status(ids[0], "done", updated_at=NOW - timedelta(days=30))
    mirrored.set_status(ids[2], "failed", last_error="timeout")
    mirrored.passed()
    mirrored.passed()
    assert mirrored.row(ids[2])["notes"] == "call the supplier"
    assert mirrored.row(ids[2])["status"] == "failed"
    assert ids[0] not in {r["task_id"] for r in mirrored.book.records()}
    mirrored.assert_sheet_is_truth()


@pytest.mark.parametrize("typed", ["pending", " Retry ", "PENDING"])
def test_typed_pending_over_failed_requeues(mirrored: Mirrored, typed: str) -> None:
    """`pending`/`retry` (any case, stray spaces) typed over a failed row requeues the task in
    PostgreSQL, logged `requeued` (was failed), and the sheet shows it pending (an applied
    edit, not counted as put back)."""
    ids = mirrored.enqueue(2)
    mirrored.set_status(ids[0], "failed", error_class="permanent", retry_count=3)
    mirrored.passed()
    mirrored.book.set_cell("Queue", int(mirrored.row(ids[0])["_row"]), "status", typed)
    doc = mirrored.passed()
    assert doc["requeued"] == 1 and doc["put_back"] == 0
    assert mirrored.sql("SELECT status FROM sheetq_tasks WHERE task_id = %s", (ids[0],)) == [
        ("pending",)
    ]
    logged = mirrored.sql(
        "SELECT event, message FROM sheetq_log WHERE task_id = %s ORDER BY id", (ids[0],)
    )
    assert logged[-1][0] == "requeued" and "(was failed)" in logged[-1][1]
    assert mirrored.row(ids[0])["status"] == "pending"
    assert mirrored.book.log(ids[0])[-1]["event"] == "requeued"
    assert mirrored.passed()["requeued"] == 0, "applied once"


def test_typed_requeue_writes_only_the_redrive(mirrored: Mirrored) -> None:
    """A requeue typed in the sheet changes exactly what a redrive changes — pending, due and
    stamped at the pass's moment, error class, alert mark and lease cleared — and keeps the
    rest (attempts, last error, owner, result); its one log row is stamped the same, with the
    task's type and attempts and a `mirror` run id."""
    (task_id,) = mirrored.enqueue(1, "invoice")
    mirrored.set_status(
        task_id,
        "failed",
        error_class="permanent",
        retry_count=3,
        last_error="boom",
        owner="ops",
        result="r",
        alerted_at=NOW,
        lease_owner="run_old",
        lease_until=NOW,
    )
    mirrored.passed()
    mirrored.book.set_cell("Queue", int(mirrored.row(task_id)["_row"]), "status", "pending")
    later = NOW + timedelta(minutes=5)
    mirrored.at(later)
    assert mirrored.passed()["requeued"] == 1
    assert mirrored.sql(
        "SELECT status, next_retry_at, updated_at, error_class, alerted_at, lease_owner, "
        "lease_until, retry_count, last_error, owner, result, type "
        "FROM sheetq_tasks WHERE task_id = %s",
        (task_id,),
    ) == [("pending", later, later, "", None, "", None, 3, "boom", "ops", "r", "invoice")]
    logged = mirrored.sql(
        "SELECT ts, type, event, status, retry_count, message, duration_ms, run_id "
        "FROM sheetq_log WHERE task_id = %s ORDER BY id DESC LIMIT 1",
        (task_id,),
    )
    assert logged[0][:7] == (
        later,
        "invoice",
        "requeued",
        "pending",
        3,
        "requeued in the spreadsheet (was failed)",
        None,
    )
    assert str(logged[0][7]).startswith("mirror")


@pytest.mark.slow
def test_edits_are_stamped_with_the_servers_clock(
    mirrored: Mirrored, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pass on a host whose clock is ten minutes ahead (simulated, not `SHEETQ_NOW`) stamps
    a manager's requeue, its log row and a saved owner with the server's clock."""
    monkeypatch.delenv("SHEETQ_NOW")
    requeued, owned = mirrored.enqueue(2)
    mirrored.set_status(requeued, "failed", updated_at=datetime.now(UTC))
    mirrored.set_status(owned, "failed", updated_at=datetime.now(UTC), owner="ops")
    mirrored.passed()
    mirrored.book.set_cell("Queue", int(mirrored.row(requeued)["_row"]), "status", "pending")
    mirrored.book.set_cell("Queue", int(mirrored.row(owned)["_row"]), "owner", "sales")
    done = subprocess.run(
        [sys.executable, "-m", "sheetq", "mirror", "--json"],
        env=skewed_env(tmp_path, 600),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert (doc["requeued"], doc["owners_saved"]) == (1, 1)
    ((server_now,),) = mirrored.sql("SELECT statement_timestamp()")
    stamps = mirrored.sql(
        "SELECT next_retry_at, updated_at FROM sheetq_tasks WHERE task_id = %s", (requeued,)
    )[0]
    stamps += mirrored.sql("SELECT updated_at FROM sheetq_tasks WHERE task_id = %s", (owned,))[0]
    stamps += mirrored.sql(
        "SELECT ts FROM sheetq_log WHERE task_id = %s AND event = 'requeued'", (requeued,)
    )[0]
    assert all(abs((server_now - at).total_seconds()) < 60 for at in stamps), stamps


def test_typed_over_skipped_requeues(mirrored: Mirrored) -> None:
    """`retry` typed over a skipped row requeues it too (was skipped)."""
    (task_id,) = mirrored.enqueue(1)
    mirrored.set_status(task_id, "skipped", updated_at=NOW)
    mirrored.passed()
    mirrored.book.set_cell("Queue", int(mirrored.row(task_id)["_row"]), "status", "retry")
    assert mirrored.passed()["requeued"] == 1
    message = mirrored.sql(
        "SELECT message FROM sheetq_log WHERE task_id = %s ORDER BY id DESC LIMIT 1", (task_id,)
    )
    assert "(was skipped)" in message[0][0]


@pytest.mark.parametrize("since", ["processing", "requeued"])
def test_typed_over_a_task_no_longer_failed_is_put_back(mirrored: Mirrored, since: str) -> None:
    """A manager types `pending` over a failed row, but meanwhile the task was requeued by
    `sheetq requeue` and claimed: nothing is requeued, the cell shows PostgreSQL's status."""
    (task_id,) = mirrored.enqueue(1)
    mirrored.set_status(task_id, "failed")
    mirrored.passed()
    mirrored.book.set_cell("Queue", int(mirrored.row(task_id)["_row"]), "status", "pending")
    if since == "requeued":
        assert run_cli(["requeue", "--task", task_id]).code == 0
    else:
        mirrored.set_status(task_id, "processing", lease_owner="run_busy")
    before = mirrored.sql("SELECT count(*) FROM sheetq_log WHERE task_id = %s", (task_id,))
    doc = mirrored.passed()
    assert doc["requeued"] == 0
    after = mirrored.sql("SELECT count(*) FROM sheetq_log WHERE task_id = %s", (task_id,))
    assert after == before
    want = "processing" if since == "processing" else "pending"
    assert mirrored.sql("SELECT status FROM sheetq_tasks WHERE task_id = %s", (task_id,)) == [
        (want,)
    ]
    assert mirrored.row(task_id)["status"] == want


def test_typed_over_processing_row_does_not_requeue(mirrored: Mirrored) -> None:
    """`pending` typed over a row the mirror wrote `processing` is put back, with a warning."""
    (task_id,) = mirrored.enqueue(1)
    mirrored.set_status(task_id, "processing", lease_owner="run_busy")
    mirrored.passed()
    mirrored.book.set_cell("Queue", int(mirrored.row(task_id)["_row"]), "status", "pending")
    result = mirrored.mirror()
    assert result.code == 0 and result.json()["requeued"] == 0
    assert result.json()["put_back"] == 1
    assert "put back" in result.stderr
    assert mirrored.row(task_id)["status"] == "processing"


def test_owner_change_saved(mirrored: Mirrored) -> None:
    """A manager's new owner is saved in PostgreSQL with a new updated_at and no QueueLog
    row, counted in owners_saved, named on stderr at -v, and stays in the sheet."""
    (task_id,) = mirrored.enqueue(1)
    mirrored.set_status(task_id, "failed", owner="ops")
    mirrored.passed()
    logged = mirrored.sql("SELECT count(*) FROM sheetq_log")
    mirrored.book.set_cell("Queue", int(mirrored.row(task_id)["_row"]), "owner", "sales")
    later = NOW + timedelta(minutes=5)
    mirrored.at(later)
    mirrored.emulator.reset_counts()
    result = run_cli(["-v", "mirror", "--json"])
    assert result.code == 0, result.stderr
    doc = result.json()
    assert doc["owners_saved"] == 1 and doc["put_back"] == 0
    assert f"{task_id}: owner 'ops' -> 'sales' saved" in result.stderr
    assert mirrored.sql(
        "SELECT owner, updated_at FROM sheetq_tasks WHERE task_id = %s", (task_id,)
    ) == [("sales", later)]
    assert mirrored.sql("SELECT count(*) FROM sheetq_log") == logged, "no QueueLog row"
    assert mirrored.row(task_id)["owner"] == "sales"
    again = run_cli(["-v", "mirror", "--json"])
    assert again.json()["owners_saved"] == 0 and "owner" not in again.stderr


def test_other_edits_put_back_and_warned_once(mirrored: Mirrored) -> None:
    """A payload or error typed over is put back on the next pass, one stderr line, and
    PostgreSQL is unchanged; the pass after says nothing."""
    (task_id,) = mirrored.enqueue(1)
    mirrored.set_status(task_id, "failed", last_error="boom")
    mirrored.passed()
    number = int(mirrored.row(task_id)["_row"])
    mirrored.book.set_cell("Queue", number, "last_error", "fixed it")
    mirrored.book.set_cell("Queue", number, "payload_json", "{}")
    result = mirrored.mirror()
    assert result.code == 0 and result.json()["put_back"] == 1
    lines = [line for line in result.stderr.splitlines() if "put back" in line]
    assert len(lines) == 1 and "payload_json" in lines[0] and "last_error" in lines[0]
    assert mirrored.row(task_id)["last_error"] == "boom"
    assert mirrored.sql("SELECT last_error FROM sheetq_tasks WHERE task_id = %s", (task_id,)) == [
        ("boom",)
    ]
    again = mirrored.mirror()
    assert "put back" not in again.stderr and again.json()["requests"] == 1


@pytest.mark.parametrize("fault", [503, 429, 403])
def test_google_failing_exits_1_and_next_pass_catches_up(mirrored: Mirrored, fault: int) -> None:
    """Google down, over quota or unshared: one line on stderr, exit 1, PostgreSQL untouched;
    `status` shows the lag; the next pass writes everything."""
    ids = mirrored.enqueue(3)
    mirrored.passed()
    later = NOW + timedelta(seconds=30)
    mirrored.at(later)
    mirrored.set_status(ids[0], "done", updated_at=later)
    mirrored.enqueue(2)
    tasks = mirrored.sql("SELECT * FROM sheetq_tasks ORDER BY task_id")
    if fault == 403:
        mirrored.emulator.set_access(mirrored.book.key, "none")
    else:
        mirrored.emulator.fail_next(fault, times=20)
    result = mirrored.mirror()
    assert result.code == 1
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert "Traceback" not in result.stderr
    assert mirrored.sql("SELECT * FROM sheetq_tasks ORDER BY task_id") == tasks
    mirrored.emulator.clear_faults()
    mirrored.emulator.set_access(mirrored.book.key, "owner")
    status = run_cli(["status", "--json"]).json()
    assert status["mirror"]["tasks_pending"] == 3
    assert status["mirror"]["last_error"]
    doc = mirrored.passed()
    assert doc["appended"] == 2 and doc["updated"] == 1
    mirrored.assert_sheet_is_truth()
    assert run_cli(["status", "--json"]).json()["mirror"]["last_error"] == ""


def test_status_shows_lag(mirrored: Mirrored) -> None:
    """`status` prints the mirror's last pass and what it has still to write."""
    mirrored.enqueue(2)
    assert "mirror: no pass has written yet" in run_cli(["status"]).stdout
    mirrored.passed()
    mirrored.enqueue(1)
    mirrored.at(NOW + timedelta(seconds=40))
    doc = run_cli(["status", "--json"]).json()["mirror"]
    assert doc["lag_seconds"] == 40 and doc["log_rows_pending"] == 1
    assert "mirror: last pass" in run_cli(["status"]).stdout


def test_lost_record_trusts_no_edit(mirrored: Mirrored) -> None:
    """When the sheet's token and PostgreSQL's record disagree (the process died between the
    write and its record), nothing typed is applied: every row is put back as PostgreSQL has
    it, and no log row is appended twice."""
    (task_id,) = mirrored.enqueue(1)
    mirrored.set_status(task_id, "failed")
    mirrored.passed()
    mirrored.sql("UPDATE sheetq_mirror_state SET token = 'stale'")
    mirrored.book.set_cell("Queue", int(mirrored.row(task_id)["_row"]), "status", "pending")
    doc = mirrored.passed()
    assert doc["requeued"] == 0 and doc["log_appended"] == 0
    assert mirrored.row(task_id)["status"] == "failed"
    assert len(mirrored.book.log()) == 1


def _person_edits() -> dict[str, Callable[[Any, str], None]]:
    def sort(emulator: Any, key: str) -> None:
        emulator.sort_rows(key, "Queue", QUEUE_COLUMNS.index("payload_hash"))

    def reverse(emulator: Any, key: str) -> None:
        emulator.reverse_rows(key, "Queue")

    def insert_top(emulator: Any, key: str) -> None:
        emulator.insert_rows(key, "Queue", 2, 3)

    return {"sort": sort, "reverse": reverse, "insert rows at top": insert_top}


@pytest.mark.slow
@pytest.mark.parametrize("edit", list(_person_edits()))
def test_person_sorting_between_read_and_write(mirrored: Mirrored, edit: str) -> None:
    """A person sorting, reversing or inserting rows at every boundary between the mirror's
    requests never gets a task's values into another row: afterwards every row's sheetq
    cells equal PostgreSQL's for its task id (after the next pass, for rows a delete hit)."""
    apply = _person_edits()[edit]
    ids = mirrored.enqueue(12)
    mirrored.passed()
    for i, task_id in enumerate(ids[:8]):
        status = ("processing", "failed", "retry", "done")[i % 4]
        mirrored.set_status(task_id, status, retry_count=i, updated_at=NOW - timedelta(days=i))
    mirrored.enqueue(3)
    key = mirrored.book.key
    snapshot = mirrored.emulator.copy_spreadsheet(key)
    mirrored.emulator.reset_counts()
    assert mirrored.mirror().code == 0
    total = mirrored.emulator.count()
    assert total == 2
    state = mirrored.sql("SELECT * FROM sheetq_mirror_state")
    written = mirrored.sql("SELECT * FROM sheetq_mirror")
    for k in range(1, total):
        # the same pass again, from the same sheet and record, with the edit after request k
        mirrored.book.key = mirrored.emulator.copy_spreadsheet(snapshot)
        mirrored.monkeypatch.setenv("SHEETQ_SPREADSHEET", mirrored.book.key)
        mirrored.sql("DELETE FROM sheetq_mirror_state")
        mirrored.sql("DELETE FROM sheetq_mirror")
        for row in state:
            mirrored.sql("INSERT INTO sheetq_mirror_state VALUES (%s, %s, %s, %s, %s, %s)", row)
        for row in written:
            mirrored.sql("INSERT INTO sheetq_mirror VALUES (%s, %s, %s, %s, %s)", row)
        mirrored.sql("UPDATE sheetq_mirror_state SET token = %s", (_token(mirrored),))
        mirrored.emulator.reset_counts()
        target = mirrored.book.key
        mirrored.emulator.after(k, lambda emulator, target=target: apply(emulator, target))
        result = mirrored.mirror()
        assert result.code == 0, result.stderr
        truth = mirrored.truth()
        for record in mirrored.book.records():
            if record.get("task_id") in truth:
                want = dict(zip(QUEUE_COLUMNS, truth[record["task_id"]], strict=True))
                got = {name: record.get(name, "") for name in QUEUE_COLUMNS}
                assert got == want, (k, record["task_id"])
        assert mirrored.mirror().code == 0
        mirrored.assert_sheet_is_truth()


def _token(mirrored: Mirrored) -> str:
    from sheetq.mirror import range_name

    name = range_name("Queue")
    for item in mirrored.emulator.named_ranges(mirrored.book.key):
        if item["name"] == name:
            return str(item["namedRangeId"])
    return ""


@pytest.mark.slow
def test_worker_mirrors_every_interval(
    mirrored: Mirrored, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """`sheetq worker` with both variables set mirrors a task enqueued while it runs into
    the Queue worksheet within a couple of seconds (`[mirror] interval = "1s"`), and logs
    each pass's summary line."""
    import logging
    import threading
    import time
    from functools import partial

    from sheetq.clock import SystemClock
    from sheetq.config import load_settings
    from sheetq.mirror_run import mirror_pass
    from sheetq.postgres.worker import PgWorker
    from tests.conftest import write_config

    monkeypatch.delenv("SHEETQ_NOW")
    caplog.set_level(logging.INFO, logger="sheetq.worker")
    write_config('[mirror]\ninterval = "1s"\n')
    settings = load_settings()
    worker = PgWorker(settings, clock=SystemClock(), mirror=partial(mirror_pass, settings))
    ready = threading.Event()
    thread = threading.Thread(target=worker.run, kwargs={"on_ready": ready.set}, daemon=True)
    thread.start()
    try:
        assert ready.wait(10)
        time.sleep(0.5)  # the first pass ran on an empty queue
        (task,) = mirrored.enqueue(1)
        deadline = time.monotonic() + 5
        while not any(r.get("task_id") == task for r in mirrored.book.records()):
            assert time.monotonic() < deadline, "the task never reached the Queue worksheet"
            time.sleep(0.1)
        assert mirrored.row(task)["status"] == "pending"  # no handler for "job": it waits
    finally:
        worker.stop()
        thread.join(10)
    assert not thread.is_alive()
    assert any("1 appended" in r.getMessage() for r in caplog.records), caplog.text


def test_alert_links_a_mirrored_task_to_its_mirror_row_and_others_to_show(
    mirrored: Mirrored, monkeypatch: pytest.MonkeyPatch
) -> None:
    """docs/design.md §11 Alerts: with a mirror, a failed task links its mirror row (the URL with
    the Queue sheet's gid and range); a task not yet mirrored keeps `sheetq show ID`."""
    from tests.fakes.telegram_fake import FORUM_CHAT_ID, FakeBotAPI

    first = mirrored.enqueue(3)
    mirrored.set_status(first[1], "failed", last_error="boom")
    mirrored.passed()
    (late,) = mirrored.enqueue(1)
    mirrored.set_status(late, "failed", last_error="later")
    sheet_id = mirrored.emulator.sheet_id(mirrored.book.key, "Queue")
    row = next(i for i, r in enumerate(mirrored.book.records(), 2) if r["task_id"] == first[1])
    with FakeBotAPI() as fake:
        monkeypatch.setenv("SHEETQ_TELEGRAM_API_URL", fake.base_url)
        monkeypatch.setenv("TELEGRAM_BOT_TOKEN", fake.token)
        monkeypatch.setenv("TELEGRAM_CHAT_ID", str(FORUM_CHAT_ID))
        result = run_cli(["alert", "--json"])
    assert result.code == 0, result.stderr
    assert result.json()["alerted"] == 2
    text = fake.messages[0]["text"]
    key = mirrored.book.key
    assert f'<a href="https://docs.google.com/spreadsheets/d/{key}/edit#gid={sheet_id}' in text
    assert f'&amp;range=A{row}">open row {row}</a>' in text
    assert f"sheetq show {late}" in text
