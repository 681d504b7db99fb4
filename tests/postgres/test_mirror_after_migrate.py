"""The path the README gives: `sheetq migrate --to postgresql://…` from a Google or local queue,
`SHEETQ_SPREADSHEET` kept, then `sheetq mirror`. The first pass recognises the log rows
migrate copied from that spreadsheet and appends none of them again (docs/design.md §12):
QueueLog keeps its rows, and from then on holds exactly PostgreSQL's log."""

from __future__ import annotations

import json
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import Book, LocalBook, PgBook, make_google, run_cli, write_config
from tests.postgres.test_migrate import HANDLERS

pytestmark = pytest.mark.postgres

NOW = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
CONFIG = """
[types.ok]
python = "mm_handlers:ok"
[types.bad]
python = "mm_handlers:bad"
[types.flaky]
python = "mm_handlers:flaky"
"""


def _at(monkeypatch: pytest.MonkeyPatch, when: datetime) -> None:
    monkeypatch.setenv("SHEETQ_NOW", when.strftime("%Y-%m-%dT%H:%M:%SZ"))


@pytest.fixture(params=["local", "google"])
def source(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> tuple[Book, Any]:
    """An initialised sheet queue (local workbook or emulated Google spreadsheet) with
    handlers; the emulator (``None`` for local)."""
    emulator = None
    if request.param == "local":
        book: Book = LocalBook(tmp_path / "book.db")
        monkeypatch.setenv("SHEETQ_SPREADSHEET", book.spreadsheet)
    else:
        emulator = request.getfixturevalue("sheets_emulator")
        book = make_google(emulator, monkeypatch)
    (Path.cwd() / "mm_handlers.py").write_text(HANDLERS, encoding="utf-8")
    write_config(CONFIG)
    assert run_cli(["init"]).code == 0
    return book, emulator


def _enqueue(task_type: str, payload: dict[str, Any], *extra: str, code: int = 0) -> str:
    r = run_cli(["enqueue", task_type, json.dumps(payload), "--json", *extra])
    assert r.code == code, r.stderr
    return str(r.json()["task_id"])


def _identities(rows: list[dict[str, str]]) -> Counter[tuple[str, str, str]]:
    return Counter((r["task_id"], r["event"], r["ts"]) for r in rows)


def test_first_mirror_after_migrate_appends_no_migrated_log_row(
    source: tuple[Book, Any], pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    book, emulator = source
    monkeypatch.delenv("SHEETQ_DATABASE_URL")
    _at(monkeypatch, NOW)
    _enqueue("ok", {"n": 1}, "--key", "K-1")
    _enqueue("ok", {"n": 1}, "--key", "K-1")  # two identical `duplicate` rows, same second
    _enqueue("ok", {"n": 1}, "--key", "K-1")
    _enqueue("ok", {"n": 9}, "--key", "K-1", code=3)  # a conflict
    _enqueue("bad", {"n": 2})
    _enqueue("flaky", {"n": 3})
    assert run_cli(["process"]).code == 0
    _at(monkeypatch, NOW + timedelta(minutes=1))
    _enqueue("ok", {"n": 4})
    before = book.log()
    assert len(before) >= 12

    r = run_cli(["migrate", "--to", pg_url, "--json"])
    assert r.code == 0, r.stderr
    assert r.json()["copied"]["log"] == len(before)

    monkeypatch.setenv("SHEETQ_DATABASE_URL", pg_url)  # SHEETQ_SPREADSHEET kept: the mirror
    if emulator is not None:
        emulator.reset_counts()
    r = run_cli(["mirror", "--json"])
    assert r.code == 0, r.stderr
    doc = r.json()
    assert doc["log_appended"] == 0
    assert doc["log_recognised"] == len(before)
    if emulator is not None:
        assert doc["requests"] == emulator.count() <= 2  # §6/§12: one read, one write
    after = book.log()
    assert len(after) == len(before)
    assert _identities(after) == _identities(PgBook(pg_url).log())

    # the queue runs on in PostgreSQL; the next passes append only what is new
    _at(monkeypatch, NOW + timedelta(minutes=5))
    _enqueue("ok", {"n": 5})
    assert run_cli(["process"]).code == 0
    r = run_cli(["mirror", "--json"])
    assert r.code == 0, r.stderr
    assert r.json()["log_recognised"] == 0
    pg_log = PgBook(pg_url).log()
    assert len(pg_log) > len(before)
    assert r.json()["log_appended"] == len(pg_log) - len(before)
    assert _identities(book.log()) == _identities(pg_log)
    stats = run_cli(["stats", "--since", "30d", "--json"]).json()
    sheet_events = Counter(row["event"] for row in book.log())
    assert stats["enqueued"] == sheet_events["enqueued"]  # the Dashboard's count is the same
    assert stats["duplicate"] == sheet_events["duplicate"] == 2
    assert stats["conflict"] == sheet_events["conflict"] == 1


def test_first_pass_on_a_fresh_spreadsheet_still_appends_the_whole_log(
    pg_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Recognising is by what QueueLog holds: a queue born in PostgreSQL, mirrored into a new
    workbook, gets every log row on the first pass."""
    _at(monkeypatch, NOW)
    for n in range(3):
        _enqueue("job", {"n": n})
    book = LocalBook(tmp_path / "mirror.db")
    monkeypatch.setenv("SHEETQ_SPREADSHEET", book.spreadsheet)
    monkeypatch.delenv("SHEETQ_DATABASE_URL")
    assert run_cli(["init"]).code == 0  # the workbook, not the database
    monkeypatch.setenv("SHEETQ_DATABASE_URL", pg_url)
    r = run_cli(["mirror", "--json"])
    assert r.code == 0, r.stderr
    assert (r.json()["log_appended"], r.json()["log_recognised"]) == (3, 0)
    assert len(book.log()) == 3
