"""`sheetq archive` through the CLI: what moves, that it moves whole and once, that archived
keys still deduplicate, failures mid-write, and the Google request budget (docs/design.md §8)."""

from __future__ import annotations

import hashlib
import json
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import Book, GoogleBook, handler_script, make_google, run_cli, write_config
from tests.sheet_only import on_postgres, sheet_only

ON_POSTGRES = True  # the behavioural suite: also runs on PostgreSQL (docs/design.md §10)

T0 = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
HANDLER = (
    "import json, sys\n"
    "task = json.load(sys.stdin)\n"
    "print(task.get('out', 'crm-' + str(task.get('n'))))\n"
    "sys.exit(task.get('code', 0))\n"
)
TRICKY = {"n": 1, "phone": "+380501234567", "zip": "007", "f": "=1+1", "name": "Юлія Шевчук"}


def _at(monkeypatch: pytest.MonkeyPatch, when: datetime) -> None:
    monkeypatch.setenv("SHEETQ_NOW", when.strftime("%Y-%m-%dT%H:%M:%SZ"))


def _enqueue(payload: dict[str, Any], task_type: str = "job", *extra: str) -> str:
    r = run_cli(["enqueue", task_type, json.dumps(payload, ensure_ascii=False), "--json", *extra])
    assert r.code == 0, r.stderr
    return str(r.json()["task_id"])


def _config(tmp_path: Path) -> None:
    cmd = handler_script(tmp_path, "h", HANDLER)
    write_config(f"[types.job]\ncommand = {cmd}\n[types.fresh]\ncommand = {cmd}\n")


def _mixed(book: Book, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """Finished rows 40 days old (done ×2, skipped, failed), a retry and a pending row of
    the same age, and a done row 5 days old."""
    _config(tmp_path)
    _at(monkeypatch, T0)
    ids = {
        "done1": _enqueue(TRICKY, "job", "--key", "lead-1"),
        "done2": _enqueue({"n": 2}),
        "failed": _enqueue({"n": 3, "code": 65}),
        "retry": _enqueue({"n": 4, "code": 75}),
        "skipped": _enqueue({"n": 5}, "later"),
        "pending": _enqueue({"n": 6}, "later"),
    }
    assert run_cli(["skip", "--task", ids["skipped"], "--reason", "by hand"]).code == 0
    assert run_cli(["process", "--batch-size", "10"]).code == 0
    _at(monkeypatch, T0 + timedelta(days=35))
    ids["fresh"] = _enqueue({"n": 7}, "fresh")
    assert run_cli(["process", "--type", "fresh"]).code == 0
    _at(monkeypatch, T0 + timedelta(days=40))
    expected = {"done1": "done", "done2": "done", "failed": "failed", "retry": "retry"}
    expected |= {"skipped": "skipped", "pending": "pending", "fresh": "done"}
    for name, status in expected.items():
        assert book.row_of(ids[name])["status"] == status, name
    return ids


def _strip(record: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in record.items() if k != "_row"}


def _everywhere(book: Book) -> Counter[str]:
    """How many rows each task id has across Queue and QueueArchive."""
    rows = book.records("Queue") + book.records("QueueArchive")
    return Counter(r["task_id"] for r in rows)


def _archived_log(book: Book) -> Counter[str]:
    return Counter(e["task_id"] for e in book.log() if e["event"] == "archived")


def _grid_state(book: Book) -> tuple[Any, ...]:
    return (book.grid("Queue"), book.grid("QueueArchive"), book.grid("QueueLog"))


# --- what moves -----------------------------------------------------------------------------


def test_old_finished_rows_move_newer_and_waiting_stay(
    book: Book, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """done/skipped rows older than the cutoff move; newer, waiting and failed rows stay;
    failed moves only with --include-failed."""
    ids = _mixed(book, tmp_path, monkeypatch)
    r = run_cli(["archive", "--older-than", "30d"])
    assert r.code == 0, r.stderr
    assert r.stdout.strip() == "archived 3 rows (done: 2, skipped: 1, failed: 0)"
    archived = {row["task_id"] for row in book.records("QueueArchive")}
    assert archived == {ids["done1"], ids["done2"], ids["skipped"]}
    left = {row["task_id"] for row in book.records()}
    assert left == {ids["failed"], ids["retry"], ids["pending"], ids["fresh"]}
    dry = run_cli(["archive", "--older-than", "30d", "--include-failed", "--dry-run"])
    # its alert was never sent (no Telegram here): the move says so, once
    assert dry.stderr.count("would be archived before their alert was sent") == 1, dry.stderr
    r = run_cli(["archive", "--older-than", "30d", "--include-failed", "--json"])
    doc = r.json()
    assert doc["archived"] == 1 and doc["task_ids"] == [ids["failed"]]
    assert doc["by_status"] == {"done": 0, "skipped": 0, "failed": 1}
    assert doc["unalerted"] == [ids["failed"]] and ids["failed"] in r.stderr
    waiting = {ids["retry"], ids["pending"], ids["fresh"]}
    assert {row["task_id"] for row in book.records()} == waiting
    doc = run_cli(["archive", "--older-than", "1d", "--include-failed", "--json"]).json()
    assert doc["task_ids"] == [ids["fresh"]]
    assert all(n == 1 for n in _everywhere(book).values())


def test_archived_rows_read_back_identical_by_column_name(
    book: Book, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every cell of an archived row reads back the same in QueueArchive — payload byte for
    byte, retry_count, result, a manager's own column placed elsewhere in the archive."""
    book.insert_column("Queue", 2, "notes")
    width = len(book.grid("QueueArchive")[0])
    book.insert_column("QueueArchive", width, "notes")
    ids = _mixed(book, tmp_path, monkeypatch)
    row = int(book.row_of(ids["done1"])["_row"])
    book.set_cell("Queue", row, "notes", "call back Tue, +380501234567")
    before = {name: _strip(book.row_of(ids[name])) for name in ("done1", "done2", "skipped")}
    assert json.loads(before["done1"]["payload_json"]) == TRICKY
    assert run_cli(["archive", "--older-than", "30d"]).code == 0
    for name, record in before.items():
        assert _strip(book.row_of(ids[name], "QueueArchive")) == record, name
    assert book.row_of(ids["done1"], "QueueArchive")["notes"] == "call back Tue, +380501234567"
    payload = book.row_of(ids["done1"], "QueueArchive")["payload_json"]
    assert payload.encode() == before["done1"]["payload_json"].encode()


def test_each_archived_task_is_logged_once(
    book: Book, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One `archived` QueueLog row per moved task, with its status, from one archive run."""
    ids = _mixed(book, tmp_path, monkeypatch)
    assert run_cli(["archive", "--older-than", "30d"]).code == 0
    entries = [e for e in book.log() if e["event"] == "archived"]
    assert Counter(e["task_id"] for e in entries) == Counter(
        {ids["done1"]: 1, ids["done2"]: 1, ids["skipped"]: 1}
    )
    assert {e["task_id"]: e["status"] for e in entries}[ids["skipped"]] == "skipped"
    assert len({e["run_id"] for e in entries}) == 1
    assert entries[0]["run_id"].startswith("archive_")


def test_archived_keys_still_deduplicate(
    book: Book, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Enqueueing an archived payload again is a duplicate naming the archived task; another
    payload under an archived key is a conflict (exit 3); `show` finds the archived task."""
    ids = _mixed(book, tmp_path, monkeypatch)
    assert run_cli(["archive", "--older-than", "30d"]).code == 0
    queued = len(book.records())
    r = run_cli(["enqueue", "job", json.dumps({"n": 2}), "--json"])
    assert r.code == 0 and r.json()["outcome"] == "duplicate", r.stdout
    assert r.json()["task_id"] == ids["done2"]
    r = run_cli(["enqueue", "job", json.dumps(TRICKY, ensure_ascii=False), "--key", "lead-1"])
    assert r.code == 0 and ids["done1"] in r.stdout
    r = run_cli(["enqueue", "job", '{"n": 99}', "--key", "lead-1"])
    assert r.code == 3 and ids["done1"] in r.stdout + r.stderr
    assert len(book.records()) == queued
    doc = run_cli(["show", ids["done1"], "--json"]).json()
    assert [row.get("worksheet") for row in doc["rows"]] == ["QueueArchive"]
    assert [e["event"] for e in doc["log"]][-1] in ("archived", "duplicate", "conflict")
    for verb in ("requeue", "skip"):  # an archived task is named as archived, not unknown
        r = run_cli(
            [verb, "--task", ids["done1"], "--status", "done"][: 3 if verb == "skip" else 5]
        )
        assert r.code == 2 and ": archived (in " in r.stderr, r.stderr


def test_dry_run_counts_and_changes_nothing(
    book: Book, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--dry-run reports what would move, in text and JSON, and writes nothing."""
    ids = _mixed(book, tmp_path, monkeypatch)
    state = _grid_state(book)
    r = run_cli(["archive", "--older-than", "30d", "--dry-run", "--include-failed"])
    assert r.code == 0
    assert r.stdout.strip() == "would archive 4 rows (done: 2, skipped: 1, failed: 1)"
    doc = run_cli(["archive", "--older-than", "30d", "--dry-run", "--json"]).json()
    assert doc["dry_run"] is True and doc["archived"] == 3 and doc["truncated"] is False
    assert set(doc["task_ids"]) == {ids["done1"], ids["done2"], ids["skipped"]}
    assert _grid_state(book) == state


def test_cells_of_columns_the_archive_lacks_are_dropped_with_one_warning(
    book: Book, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A manager's Queue column QueueArchive lacks: the move happens, one warning names it."""
    book.insert_column("Queue", 0, "calls")
    ids = _mixed(book, tmp_path, monkeypatch)
    for name in ("done1", "done2"):
        book.set_cell("Queue", int(book.row_of(ids[name])["_row"]), "calls", "2")
    r = run_cli(["archive", "--older-than", "30d"])
    assert r.code == 0
    warnings = [line for line in r.stderr.splitlines() if "calls" in line]
    assert len(warnings) == 1 and "dropped" in warnings[0], r.stderr
    assert "calls" not in book.row_of(ids["done1"], "QueueArchive")


def test_bad_arguments_and_missing_archive_worksheet_exit_2(
    book: Book, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bad --older-than, or no QueueArchive worksheet, is exit 2 with one line."""
    r = run_cli(["archive", "--older-than", "soon"])
    assert r.code == 2 and len(r.stderr.strip().splitlines()) == 1 and "--older-than" in r.stderr
    if on_postgres(book):
        return  # a queue's archive is a table that `init` made: it cannot be missing
    monkeypatch.setenv("SHEETQ_ARCHIVE_SHEET", "Old Tasks")
    r = run_cli(["archive"])
    assert r.code == 2 and "sheetq init" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_live_lease_blocks_and_stale_lease_is_cleared(
    book: Book, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While a `process` run holds the queue's lease nothing moves (exit 0, one line); a
    lease whose run died is removed by the archive write."""
    sheet_only(book, "PostgreSQL has no run lease: archive and workers share the queue by row")
    from sheetq.config import load_settings
    from sheetq.sheet import open_store
    from sheetq.sheet.runner import lease_name, lease_token
    from sheetq.sheet.store import ChangeSet, LeaseChange

    ids = _mixed(book, tmp_path, monkeypatch)
    now = T0 + timedelta(days=40)
    store = open_store(load_settings())
    try:
        store.open()
        live = lease_token(now + timedelta(minutes=5))
        store.apply(ChangeSet(lease=LeaseChange(lease_name("Queue"), live, None)))
        state = _grid_state(book)
        r = run_cli(["archive", "--older-than", "30d"])
        assert r.code == 0 and "lease" in r.stderr and _grid_state(book) == state
        assert r.stdout.strip() == "archived 0 rows (done: 0, skipped: 0, failed: 0)"
        _at(monkeypatch, now + timedelta(minutes=10))
        r = run_cli(["archive", "--older-than", "30d", "--json"])
        assert r.code == 0 and r.json()["archived"] == 3, r.stderr
        assert lease_name("Queue") not in store.open().leases
    finally:
        store.close()
    assert ids["done1"] in {row["task_id"] for row in book.records("QueueArchive")}


def test_process_run_on_this_host_makes_archive_wait_then_give_up(
    book: Book, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The host lock of a running `process` is waited for, saying so first; still held: one
    line more, exit 0."""
    sheet_only(book, "PostgreSQL has no run lock; archive and workers share the queue by row")
    from filelock import FileLock

    from sheetq.cli import archive as archive_cli
    from sheetq.config import load_settings
    from sheetq.sheet.runner import lock_path

    _mixed(book, tmp_path, monkeypatch)
    monkeypatch.setattr(archive_cli, "LOCK_WAIT", 0.05)
    path = lock_path(load_settings())
    path.parent.mkdir(parents=True, exist_ok=True)
    state = _grid_state(book)
    with FileLock(str(path)):
        r = run_cli(["archive", "--older-than", "30d", "--json"])
    assert r.code == 0 and r.json() == {"archived": 0, "dry_run": False, "locked": True}
    assert _grid_state(book) == state
    waited, gave_up = r.stderr.strip().splitlines()  # it says so before it waits
    assert "holds this queue" in waited and "waiting up to 0.05s" in waited, r.stderr
    assert "nothing archived" in gave_up


def test_archive_that_waited_for_a_run_takes_its_time_after_the_wait(
    book: Book, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A `process` run holds the queue for a while: archive says it waits, and its cutoff and
    its log rows' time are the clock's once the queue is free (QueueLog stays in time order),
    not the moment it began to wait."""
    sheet_only(book, "PostgreSQL has no run lock; archive and workers share the queue by row")
    import threading

    from filelock import FileLock

    from sheetq.cli import _context
    from sheetq.config import load_settings
    from sheetq.sheet.runner import lock_path

    ids = _mixed(book, tmp_path, monkeypatch)  # at T0 + 40d; "fresh" finished at T0 + 35d
    released = threading.Event()
    later = T0 + timedelta(days=70)

    class Clock:
        def now(self) -> datetime:
            return later if released.is_set() else T0 + timedelta(days=40)

        def monotonic(self) -> float:
            return time.monotonic()

        def sleep(self, seconds: float) -> None:
            time.sleep(seconds)

    monkeypatch.setattr(_context, "clock_from_env", Clock)
    path = lock_path(load_settings())
    path.parent.mkdir(parents=True, exist_ok=True)
    held = threading.Event()

    def run() -> None:  # a process run on this host, for 0.3 s
        with FileLock(str(path)):
            held.set()
            time.sleep(0.3)
            released.set()

    thread = threading.Thread(target=run)
    thread.start()
    held.wait(5)
    r = run_cli(["archive", "--older-than", "30d", "--json"])
    thread.join()
    assert r.code == 0, r.stderr
    assert "waiting up to 30s" in r.stderr
    assert ids["fresh"] in r.json()["task_ids"]  # 35 days old by the clock after the wait
    stamps = [e["ts"] for e in book.log() if e["event"] == "archived"]
    assert stamps and set(stamps) == {"2026-03-16T09:00:00Z"}
    every = [e["ts"] for e in book.log()]
    assert every == sorted(every)


# --- failures mid-write -------------------------------------------------------------------


def test_failed_write_changes_nothing(
    book: Book, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The write dies half-way (Google: 500 to every attempt; local: an error after rows were
    deleted inside the transaction): exit 1, and Queue, QueueArchive and QueueLog are as
    before — nothing lost, nothing doubled."""
    _mixed(book, tmp_path, monkeypatch)
    state = _grid_state(book)
    if hasattr(book, "emulator"):  # a GoogleBook (conftest is imported twice by pytest)
        book.emulator.fail_next(500, times=50, op="spreadsheets.batchUpdate")
        try:
            r = run_cli(["archive", "--older-than", "30d"])
            assert book.emulator.pending_faults() == 1  # it tried, and gave up
        finally:
            book.emulator.clear_faults()
    elif on_postgres(book):
        import psycopg

        # the server refuses the `archived` log rows: the statement has moved the tasks by then
        with psycopg.connect(book.url, autocommit=True) as conn:
            conn.execute(
                "CREATE FUNCTION crash() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN"
                " IF NEW.event = 'archived' THEN RAISE EXCEPTION 'simulated crash'; END IF;"
                " RETURN NEW; END $$"
            )
            conn.execute(
                "CREATE TRIGGER crash BEFORE INSERT ON sheetq_log"
                " FOR EACH ROW EXECUTE FUNCTION crash()"
            )
        r = run_cli(["archive", "--older-than", "30d"])
        assert "simulated crash" in r.stderr
    else:
        from sheetq.errors import StoreError
        from sheetq.sheet.sqlite import SqliteStore

        real = SqliteStore._append
        calls = {"n": 0}

        def crash(self: SqliteStore, *args: Any) -> None:
            calls["n"] += 1
            if calls["n"] == 2:  # after the deletions and one archive row
                raise StoreError("simulated crash in the middle of the write")
            real(self, *args)

        monkeypatch.setattr(SqliteStore, "_append", crash)
        r = run_cli(["archive", "--older-than", "30d"])
        assert calls["n"] == 2
    assert r.code == 1, r.stdout + r.stderr
    assert _grid_state(book) == state


@pytest.mark.google
def test_lost_reply_to_the_write_is_not_applied_twice(
    sheets_emulator: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The write lands but its reply is lost: the adapter's probe sees it, and every task is
    once across Queue and QueueArchive, with one `archived` log row each."""
    book = make_google(sheets_emulator, monkeypatch)
    assert run_cli(["init"]).code == 0
    ids = _mixed(book, tmp_path, monkeypatch)
    sheets_emulator.lose_reply_next(op="spreadsheets.batchUpdate", mode="disconnect")
    try:
        r = run_cli(["archive", "--older-than", "30d", "--json"])
        assert sheets_emulator.pending_faults() == 0
    finally:
        sheets_emulator.clear_faults()
    assert r.code == 0, r.stderr
    assert r.json()["archived"] == 3
    assert set(_everywhere(book).values()) == {1} and len(_everywhere(book)) == len(ids)
    assert set(_archived_log(book).values()) == {1} and len(_archived_log(book)) == 3


def test_failure_between_writes_is_finished_by_a_second_run(
    book: Book, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rows split over several atomic writes; the 2nd write fails: exit 1 naming the rows
    already moved; running again moves the rest, and no task is lost or doubled."""
    from sheetq.errors import StoreUnavailable
    from sheetq.sheet import archive as archive_lib
    from sheetq.sheet.google import GoogleStore
    from sheetq.sheet.sqlite import SqliteStore

    sheet_only(book, "PostgreSQL archives in one transaction: there is no second write")
    ids = _mixed(book, tmp_path, monkeypatch)
    monkeypatch.setattr(archive_lib, "MAX_WRITE_BYTES", 1)  # one row per write
    calls = {"n": 0}
    for cls in (SqliteStore, GoogleStore):
        real = cls.apply

        def flaky(self: Any, changes: Any, _real: Any = real, **options: Any) -> Any:
            calls["n"] += 1
            if calls["n"] == 2:
                raise StoreUnavailable("Google Sheets did not answer write (simulated)")
            return _real(self, changes, **options)

        monkeypatch.setattr(cls, "apply", flaky)
    r = run_cli(["archive", "--older-than", "30d", "--include-failed"])
    assert r.code == 1 and "1 row(s) were archived" in r.stderr, r.stderr
    assert len(book.records("QueueArchive")) == 1
    doc = run_cli(["archive", "--older-than", "30d", "--include-failed", "--json"]).json()
    assert doc["archived"] == 3 and doc["writes"] == 3
    assert set(_everywhere(book).values()) == {1} and len(_everywhere(book)) == len(ids)
    assert set(_archived_log(book).values()) == {1} and len(_archived_log(book)) == 4


# --- Google request budget ------------------------------------------------------------------


@pytest.mark.google
def test_small_archive_costs_four_requests(
    sheets_emulator: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An archive that fits one write: open 1 + read 1 + write 1 + the verifying read 1."""
    book = make_google(sheets_emulator, monkeypatch)
    assert run_cli(["init"]).code == 0
    _mixed(book, tmp_path, monkeypatch)
    sheets_emulator.reset_counts()
    doc = run_cli(["archive", "--older-than", "30d", "--json"]).json()
    assert doc["archived"] == 3 and doc["writes"] == 1
    ops = [q.op for q in sheets_emulator.requests if q.counted]
    assert sheets_emulator.count() <= 4, ops
    sheets_emulator.reset_counts()
    assert run_cli(["archive", "--older-than", "30d", "--dry-run"]).code == 0
    assert sheets_emulator.count() <= 2


def _fill_done_rows(book: GoogleBook, n: int) -> None:
    """``n`` done rows, 60 days old, typed straight into the emulator (no API requests)."""
    emu = book.emulator
    header = [str(h) for h in book.grid("Queue")[0]]
    rows = []
    for i in range(n):
        payload = json.dumps({"lead_id": f"L-{i}", "n": i}, separators=(",", ":"))
        record: dict[str, Any] = {
            "task_id": f"t_{i:026d}",
            "created_at": "2025-11-01T00:00:00Z",
            "type": "lead",
            "payload_json": payload,
            "status": "done",
            "retry_count": 0,
            "idempotency_key": f"lead:lead_id=L-{i}",
            "updated_at": "2025-11-02T00:00:00Z",
            "result": f"crm-{i}",
            "payload_hash": "sha256:" + hashlib.sha256(payload.encode()).hexdigest(),
            "owner": "sales",
        }
        rows.append([record.get(name, "") for name in header])
    emu.insert_rows(book.key, "Queue", 2, n)
    emu.set_values(book.key, "Queue", rows, "A2", user_entered=False)


@pytest.mark.google
@pytest.mark.slow
def test_twenty_thousand_rows_in_a_handful_of_requests(
    sheets_emulator: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """20,000 done rows move in 2 writes under Google's 10 MB request cap (each copies the
    rows by position and deletes them): 1 open + per write (read + write + verifying read)
    = 7 requests, every row archived and logged once."""
    book = make_google(sheets_emulator, monkeypatch)
    assert run_cli(["init"]).code == 0
    _fill_done_rows(book, 20_000)
    _at(monkeypatch, T0)
    sheets_emulator.reset_counts()
    started = time.monotonic()
    r = run_cli(["archive", "--older-than", "30d", "--json"])
    elapsed = time.monotonic() - started
    assert r.code == 0, r.stderr
    doc = r.json()
    assert doc["archived"] == 20_000 and doc["truncated"] is True and len(doc["task_ids"]) == 1000
    writes = [q for q in sheets_emulator.requests if q.op == "spreadsheets.batchUpdate"]
    sizes = [len(json.dumps(q.body)) for q in writes]
    assert doc["writes"] == len(writes) == 2, sizes
    assert max(sizes) < 10_485_760, sizes
    assert sheets_emulator.count() <= 1 + 3 * doc["writes"], [q.op for q in writes]
    assert len(sheets_emulator.values(book.key, "QueueArchive")) == 20_001
    assert len(sheets_emulator.values(book.key, "Queue")) == 1
    log = sheets_emulator.values(book.key, "QueueLog")
    assert len(log) == 20_001 and {row[3] for row in log[1:]} == {"archived"}
    print(f"20k archive: {sheets_emulator.count()} requests, bodies {sizes}, {elapsed:.1f}s")
