"""The host journal file: torn lines, damaged lines, and what a replay leaves alone."""

from __future__ import annotations

import json
import os
from datetime import UTC
from pathlib import Path

import pytest

from sheetq.model import Status
from sheetq.sheet.journal import Journal
from sheetq.sheet.plan import Claim, QueueRow
from sheetq.sheet.store import AppendRow, ChangeSet, Row, UpdateRow
from tests.conftest import Book, LocalBook, run_cli, write_config


def _claim(task_id: str, row: int = 2, previous: Status = Status.PENDING) -> Claim:
    raw = Row(row, {"task_id": task_id, "status": "processing", "retry_count": 0})
    return Claim(QueueRow(raw, task_id, "processing", UTC, "en_US"), previous)


def _outcome(task_id: str, status: str) -> ChangeSet:
    return ChangeSet(
        updates=[UpdateRow("Queue", task_id, 2, {"status": status, "lease_owner": ""})],
        appends=[AppendRow("QueueLog", {"task_id": task_id, "event": status})],
    )


def test_torn_last_line_is_ignored(tmp_path: Path) -> None:
    """A kill mid-write tears the last line: it is counted as damaged, the rest is kept."""
    journal = Journal(tmp_path / "q.journal")
    journal.claimed("run_a", "123", None, [_claim("t_1"), _claim("t_2")])
    journal.started("run_a", _claim("t_1"))
    journal.ended("run_a", "t_1", _outcome("t_1", "done"))
    whole = journal.path.read_bytes()
    journal.path.write_bytes(whole + whole.splitlines(keepends=True)[-1][:-7])
    state = journal.load()
    assert state.damaged == 1
    tasks = state.runs["run_a"]
    assert tasks["t_1"].outcome == "done" and tasks["t_1"].started
    assert not tasks["t_2"].started and tasks["t_2"].previous == "pending"
    assert state.leases == {"123"}


def test_damaged_line_fails_its_checksum(tmp_path: Path) -> None:
    """A line whose bytes changed fails its checksum and is ignored, not trusted."""
    journal = Journal(tmp_path / "q.journal")
    journal.ended("run_a", "t_1", _outcome("t_1", "done"))
    journal.path.write_bytes(journal.path.read_bytes().replace(b"done", b"fail"))
    state = journal.load()
    assert state.damaged == 1 and not state


def test_clear_leaves_an_empty_file(tmp_path: Path) -> None:
    """Emptied after the batch's results are written: nothing left to replay."""
    journal = Journal(tmp_path / "q.journal")
    journal.started("run_a", _claim("t_1"))
    journal.clear()
    assert journal.path.read_bytes() == b"" and not journal.load()


@pytest.fixture
def local(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> LocalBook:
    """An initialised local workbook with one command type."""
    book = LocalBook(tmp_path / "book.db")
    monkeypatch.setenv("SHEETQ_SPREADSHEET", book.spreadsheet)
    monkeypatch.setenv("SHEETQ_NOW", "2026-01-05T09:00:00Z")
    write_config("[types.job]\ncommand = ['true']\n")
    assert run_cli(["init"]).code == 0
    return book


def _journal_of(tmp_path: Path) -> Journal:
    from sheetq.config import load_settings
    from sheetq.sheet.journal import journal_path
    from sheetq.sheet.runner import lock_path

    path = journal_path(lock_path(load_settings()))
    path.parent.mkdir(parents=True, exist_ok=True)
    return Journal(path)


def test_replay_leaves_rows_a_person_or_another_host_changed(
    local: LocalBook, tmp_path: Path
) -> None:
    """Only rows still processing under the dead run are written; a finished outcome whose row
    a person changed is left alone and named in a note."""
    ids = [
        run_cli(["enqueue", "job", json.dumps({"n": n}), "--json"]).json()["task_id"]
        for n in range(3)
    ]
    rows = {t: int(local.row_of(t)["_row"]) for t in ids}
    person, other_host, mine = ids
    for task in ids:
        local.set_cell("Queue", rows[task], "status", "processing")
        local.set_cell("Queue", rows[task], "lease_owner", "run_dead")
        local.set_cell("Queue", rows[task], "lease_until", "2026-01-05T10:00:00Z")
    # after the kill: a person skipped one, another host recovered another
    local.set_cell("Queue", rows[person], "status", "skipped")
    local.set_cell("Queue", rows[other_host], "status", "retry")
    local.set_cell("Queue", rows[other_host], "lease_owner", "")
    journal = _journal_of(tmp_path)
    journal.claimed("run_dead", None, None, [_claim(t, rows[t]) for t in ids])
    journal.ended("run_dead", person, _outcome(person, "done"))
    journal.started("run_dead", _claim(other_host, rows[other_host]))
    write_config("[types.job]\ncommand = ['true']\n[types.idle]\ncommand = ['true']\n")
    result = run_cli(["process", "--type", "idle", "--json"])  # applies the journal only
    doc = result.json()
    assert doc["journal"] == {"applied": 0, "returned": 1, "unknown": 0, "left": 2}
    assert local.row_of(person)["status"] == "skipped"
    assert local.row_of(other_host)["status"] == "retry"
    assert (local.row_of(mine)["status"], local.row_of(mine)["lease_owner"]) == ("pending", "")
    assert any(person in note and "left as it is" in note for note in doc["notes"])
    assert journal.path.read_bytes() == b""


def test_torn_journal_alone_does_not_stop_a_run(local: LocalBook, tmp_path: Path) -> None:
    """A journal holding only a torn line is reported, emptied, and the run goes on."""
    run_cli(["enqueue", "job", "{}"])
    journal = _journal_of(tmp_path)
    journal.path.write_bytes(b'0badc0de {"kind":"sta')
    doc = run_cli(["process", "--json"]).json()
    assert doc["done"] == 1 and "journal" not in doc
    assert any("torn or damaged" in note for note in doc["notes"])
    assert journal.path.read_bytes() == b""


def test_unwritable_journal_warns_and_the_run_goes_on(local: LocalBook, tmp_path: Path) -> None:
    """A journal that cannot be written does not stop processing: one warning, tasks done."""
    run_cli(["enqueue", "job", "{}"])
    journal = _journal_of(tmp_path)
    journal.path.mkdir()  # a directory where the file should be
    result = run_cli(["process", "--json"])
    assert result.code == 0 and result.json()["done"] == 1
    assert "a kill would leave finished outcomes unknown" in result.stderr


def test_journal_fsyncs_only_where_the_store_survives_a_power_loss(
    book: Book, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A local workbook's last commits may roll back on a power loss, so its journal is
    written without fsync (a killed process's writes stay in the page cache: the kill
    sweeps cover that); Google's writes outlive this host, so its journal is fsync'd."""
    monkeypatch.setenv("SHEETQ_NOW", "2026-01-05T09:00:00Z")
    write_config("[types.job]\ncommand = ['true']\n")
    for n in range(2):
        assert run_cli(["enqueue", "job", json.dumps({"n": n})]).code == 0
    synced: list[int] = []
    real = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(fd), real(fd))[1])
    result = run_cli(["process", "--json"])
    assert result.code == 0 and result.json()["done"] == 2, result.stderr
    assert bool(synced) is not os.environ["SHEETQ_SPREADSHEET"].startswith("local:")


def test_a_journal_without_fsync_keeps_a_claim_by_appending(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without fsync (a local workbook) the claim that replaces a written batch is one line
    appended, saying to forget the lines before it: same state as a rewritten file, no
    rename. A torn one leaves the lines before it, the new claim's own record among them;
    past REWRITE_AT bytes the file is rewritten."""
    from sheetq.sheet import journal as journal_module

    journal = Journal(tmp_path / "q.journal", sync=False)
    journal.claimed("run_a", "111", None, [_claim("t_1")])
    journal.started("run_a", _claim("t_1"))
    journal.ended("run_a", "t_1", _outcome("t_1", "done"))
    journal.claimed("run_a", "222", None, [_claim("t_2")])  # before the claim request
    before = journal.path.read_bytes()
    inode = journal.path.stat().st_ino
    journal.keep_claim("run_a", "222", None, [_claim("t_2")])  # after it
    assert journal.path.stat().st_ino == inode and journal.path.read_bytes().startswith(before)
    state = journal.load()
    assert list(state.runs["run_a"]) == ["t_2"] and state.leases == {"222"}
    # torn mid-write: what came before is read, the new claim included
    journal.path.write_bytes(journal.path.read_bytes()[:-9])
    torn = journal.load()
    assert torn.damaged == 1 and set(torn.runs["run_a"]) == {"t_1", "t_2"}
    assert torn.runs["run_a"]["t_1"].outcome == "done" and not torn.runs["run_a"]["t_2"].started
    # past REWRITE_AT: rewritten whole, one line
    monkeypatch.setattr(journal_module, "REWRITE_AT", 10)
    journal.claimed("run_a", "333", None, [_claim("t_3")])
    journal.keep_claim("run_a", "333", None, [_claim("t_3")])
    assert journal.path.stat().st_ino != inode
    assert len(journal.path.read_bytes().splitlines()) == 1
    assert list(journal.load().runs["run_a"]) == ["t_3"]
