"""``sheetq doctor`` through the CLI, on both backends and against the fakes: one line per
check, the specific problem and its fix, exit 1 on any problem, secrets never shown."""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import (
    Book,
    GoogleBook,
    Result,
    handler_script,
    make_google,
    run_cli,
    write_config,
)
from tests.fakes.telegram_fake import FakeBotAPI, bot_for_sheetq
from tests.sheet_only import on_postgres, sheet_only

ON_POSTGRES = True  # the behavioural suite: also runs on PostgreSQL (docs/design.md §10)

OK = "import sys\nsys.stdin.read()\nprint('ok')\n"
WRONG_TOKEN = "654321:WRONG-token_abcdefghijklmnopqrstuvwxyz9876"
SA_EMAIL = "sheetq-bot@acme-ops.iam.gserviceaccount.com"


def doctor(*args: str) -> Result:
    return run_cli(["doctor", *args])


def problems(result: Result) -> list[str]:
    return [line for line in result.stdout.splitlines() if line.startswith("problem")]


def line_of(result: Result, check: str) -> str:
    found = [line for line in result.stdout.splitlines() if line[8:].startswith(check)]
    assert found, result.stdout
    return found[0]


def good_config(tmp_path: Path) -> None:
    write_config(f"[types.job]\ncommand = {handler_script(tmp_path, 'ok', OK)}\n")


@pytest.fixture
def gbook(sheets_emulator: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[GoogleBook]:
    """An initialised spreadsheet in the emulator."""
    book = make_google(sheets_emulator, monkeypatch)
    assert run_cli(["init"]).code == 0
    yield book
    sheets_emulator.set_access(book.key, "owner")
    sheets_emulator.clear_faults()


# --- all good -------------------------------------------------------------------------------


def test_all_ok_on_a_good_setup(book: Book, tmp_path: Path) -> None:
    """A configured, initialised workbook: every line ok, exit 0, alerts off is not a problem."""
    good_config(tmp_path)
    r = doctor()
    assert r.code == 0, r.stdout + r.stderr
    assert problems(r) == []
    assert r.stdout.strip().endswith("all checks passed")
    store_checks = (
        ("database", "schema", "queue Queue")
        if on_postgres(book)
        else ("worksheet Queue", "worksheet QueueLog", "worksheet QueueArchive", "time zone")
    )
    for check in ("configuration", "type job", "lock directory", "write access", *store_checks):
        assert line_of(r, check).startswith("ok")
    assert "alerts are off" in line_of(r, "telegram")
    doc = doctor("--json").json()
    assert doc["ok"] is True
    assert {"ok", "check", "detail", "fix"} <= set(doc["checks"][0])
    assert all(c["ok"] for c in doc["checks"])


def test_google_costs_two_requests_and_leaves_nothing(gbook: GoogleBook) -> None:
    """On Google: 2 requests (open + write probe), no named range left, loopback credentials."""
    emu = gbook.emulator
    emu.reset_counts()
    r = doctor()
    assert r.code == 0, r.stdout
    assert emu.count() == 2, [q.op for q in emu.requests]
    assert emu.named_ranges(gbook.key) == []
    assert "loopback" in line_of(r, "credentials")
    assert "Etc/GMT" in line_of(r, "time zone")


# --- configuration -----------------------------------------------------------------------------


def test_missing_spreadsheet_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    """No SHEETQ_SPREADSHEET: a problem line naming both forms, other checks still run, exit 1."""
    monkeypatch.delenv("SHEETQ_SPREADSHEET", raising=False)
    r = doctor()
    assert r.code == 1
    line = line_of(r, "spreadsheet")
    assert line.startswith("problem") and "SHEETQ_SPREADSHEET" in line and "local:" in line
    assert line_of(r, "lock directory").startswith("ok")
    assert line_of(r, "telegram").startswith("ok")


def test_bad_toml_is_a_line_and_the_rest_is_still_checked(book: Book) -> None:
    """Unparseable sheetq.toml: a configuration problem; workbook checks still run from env."""
    write_config("[types.job\ncommand = 'x'\n")
    r = doctor()
    assert r.code == 1
    line = line_of(r, "configuration")
    assert line.startswith("problem") and "not valid TOML" in line
    assert line_of(r, "schema" if on_postgres(book) else "worksheet Queue").startswith("ok")
    assert r.stderr == ""


# --- the workbook ----------------------------------------------------------------------------


def test_not_initialised(empty_book: Book) -> None:
    """A workbook `sheetq init` has not made: a problem that says to run `sheetq init`."""
    r = doctor()
    assert r.code == 1
    assert problems(r) and all("sheetq init" in p for p in problems(r)), r.stdout


def test_missing_column(book: Book) -> None:
    """A Queue header cell cleared by a person: the missing column is named, fix `sheetq init`."""
    sheet_only(book, "header cells; a database's schema is checked by version")
    book.set_cell("Queue", 1, "owner", "")
    r = doctor()
    assert r.code == 1
    (line,) = problems(r)
    assert "Queue" in line and "lacks column(s) owner" in line and "sheetq init" in line


def test_log_archive_columns_are_checked(book: Book) -> None:
    """QueueLogArchive is checked like QueueLog: a header cell a person cleared there is
    named, fix `sheetq init`."""
    sheet_only(book, "header cells; a database's schema is checked by version")
    assert line_of(doctor(), "worksheet QueueLogArchive").startswith("ok")
    book.set_cell("QueueLogArchive", 1, "event", "")
    r = doctor()
    assert r.code == 1
    (problem,) = problems(r)
    assert "QueueLogArchive" in problem and "lacks column(s) event" in problem


def test_duplicated_column(book: Book) -> None:
    """A manager's column that repeats a sheetq header is named with both columns."""
    sheet_only(book, "header cells; a table's columns cannot repeat")
    book.set_cell("Queue", 1, "owner", "status")
    r = doctor()
    assert r.code == 1
    (line,) = problems(r)
    assert "'status' appears twice" in line and "rename or remove" in line


def test_not_a_sheetq_workbook_is_left_unchanged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another SQLite or text file: not a sheetq workbook, and the file is left untouched."""
    other = tmp_path / "crm.db"
    db = sqlite3.connect(other)
    db.execute("CREATE TABLE clients (name TEXT)")
    db.commit()
    db.close()
    monkeypatch.setenv("SHEETQ_SPREADSHEET", f"local:{other}")
    r = doctor()
    assert r.code == 1 and "not a sheetq workbook" in line_of(r, "local workbook")
    db = sqlite3.connect(other)
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
    assert [n for (n,) in db.execute("SELECT name FROM sqlite_master")] == ["clients"]
    db.close()
    text = tmp_path / "notes.txt"
    text.write_text("hello\n")
    monkeypatch.setenv("SHEETQ_SPREADSHEET", f"local:{text}")
    assert "not a sheetq workbook" in line_of(doctor(), "local workbook")


def test_lock_dir_not_writable(book: Book, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """SHEETQ_LOCK_DIR that cannot be created: a problem naming the variable."""
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv("SHEETQ_LOCK_DIR", str(blocker / "locks"))
    r = doctor()
    assert r.code == 1
    assert line_of(r, "lock directory").startswith("problem")
    assert "SHEETQ_LOCK_DIR" in line_of(r, "lock directory")


def test_live_lease_is_reported(book: Book) -> None:
    """A run holding the queue's lease is reported (not a problem) with its expiry."""
    sheet_only(book, "PostgreSQL has no run lease: any number of runs share a queue")
    from datetime import UTC, datetime, timedelta

    from sheetq.config import load_settings
    from sheetq.sheet import open_store
    from sheetq.sheet.runner import lease_name, lease_token
    from sheetq.sheet.store import ChangeSet, LeaseChange

    store = open_store(load_settings())
    store.open()
    token = lease_token(datetime.now(UTC) + timedelta(minutes=5))
    store.apply(ChangeSet(lease=LeaseChange(lease_name("Queue"), token, None)))
    store.close()
    r = doctor()
    assert r.code == 0, r.stdout
    assert "held by a running `process`" in line_of(r, "run lease")


# --- Google access -------------------------------------------------------------------------------


@pytest.mark.google
def test_read_only_sharing_and_no_access(gbook: GoogleBook) -> None:
    """Read-only share: write problem asking for Editor; no share: 403 says to share the sheet."""
    emu = gbook.emulator
    emu.set_access(gbook.key, "reader")
    r = doctor()
    assert r.code == 1
    (line,) = problems(r)
    assert line.startswith("problem write access") and "read-only" in line and "Editor" in line
    emu.set_access(gbook.key, "none")
    r = doctor()
    assert r.code == 1
    (line,) = problems(r)
    assert "(403)" in line and "not shared with" in line and "Share" in line


@pytest.mark.google
def test_wrong_key(gbook: GoogleBook, monkeypatch: pytest.MonkeyPatch) -> None:
    """A spreadsheet key that does not exist: 404, the key is wrong, where to copy it from."""
    monkeypatch.setenv("SHEETQ_SPREADSHEET", "x" * 44)
    r = doctor()
    assert r.code == 1
    (line,) = problems(r)
    assert "(404)" in line and "key is wrong" in line and "/spreadsheets/d/KEY" in line


class _TokenEndpoint(BaseHTTPRequestHandler):
    """Google's OAuth token endpoint, as far as a service-account JWT grant needs it."""

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        body = json.dumps(
            {"access_token": "fake-access", "expires_in": 3600, "token_type": "Bearer"}
        ).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet."""


@pytest.fixture
def service_account(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A real service-account key file whose token_uri is a loopback token endpoint."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _TokenEndpoint)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    path = tmp_path / "sa.json"
    path.write_text(
        json.dumps(
            {
                "type": "service_account",
                "project_id": "acme-ops",
                "private_key_id": "k1",
                "private_key": pem,
                "client_email": SA_EMAIL,
                "client_id": "1",
                "token_uri": f"http://127.0.0.1:{server.server_address[1]}/token",
            }
        )
    )
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(path))
    yield path
    server.shutdown()
    server.server_close()


@pytest.mark.google
def test_service_account_email_is_printed_and_named_in_the_403(
    gbook: GoogleBook, service_account: Path
) -> None:
    """A key's service-account e-mail is printed and named in the fix of a 403 or read-only."""
    r = doctor()
    assert r.code == 0, r.stdout
    assert SA_EMAIL in line_of(r, "credentials")
    gbook.emulator.set_access(gbook.key, "none")
    r = doctor()
    (line,) = problems(r)
    assert "not shared with the service account " + SA_EMAIL in line
    assert f"add {SA_EMAIL} as Editor" in line
    gbook.emulator.set_access(gbook.key, "reader")
    (line,) = problems(doctor())
    assert f"Editor (not Viewer or Commenter) with the service account {SA_EMAIL}" in line


@pytest.mark.google
@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (None, "no such file"),
        ("not json", "not a JSON key file"),
        (json.dumps({"type": "authorized_user", "client_id": "x"}), "'authorized_user'"),
    ],
)
def test_bad_credentials_file(
    gbook: GoogleBook,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    content: str | None,
    expected: str,
) -> None:
    """Missing, non-JSON or non-service-account key file: one credentials problem, no request."""
    path = tmp_path / "key.json"
    if content is not None:
        path.write_text(content)
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(path))
    gbook.emulator.reset_counts()
    r = doctor()
    assert r.code == 1
    (line,) = problems(r)
    assert line.startswith("problem credentials") and expected in line
    assert "Service accounts" in line
    assert gbook.emulator.count() == 0


# --- handlers -----------------------------------------------------------------------------------


def test_handler_problems(book: Book, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Missing program, script, ${VAR}, import or handler: one line each; no secret printed."""
    monkeypatch.setenv("CRM_TOKEN", "s3cret-value-123")
    (tmp_path / "tasks_ok.py").write_text("def run(task):\n    return 'ok'\n")
    write_config(
        "[types.ghost]\ncommand = ['sheetq-no-such-program-42']\n"
        "[types.script]\ncommand = ['python3', 'scripts/missing.py']\n"
        "[types.order]\nhttp = { url = 'https://crm.example/${CRM_HOST}', "
        "headers = { Authorization = 'Bearer ${CRM_TOKEN}' } }\n"
        "[types.report]\npython = 'no_such_module_42:run'\n"
        "[types.fine]\npython = 'tasks_ok:run'\n"
        f"cwd = '{tmp_path}'\n"
        "[types.orphan]\nowner = 'ops'\n"
    )
    r = doctor()
    assert r.code == 1
    assert "program 'sheetq-no-such-program-42' not found on PATH" in line_of(r, "type ghost")
    assert "script 'scripts/missing.py' not found" in line_of(r, "type script")
    order = line_of(r, "type order")
    assert "CRM_HOST is not set" in order and "set CRM_HOST in the environment" in order
    assert "cannot import 'no_such_module_42'" in line_of(r, "type report")
    assert "has no handler" in line_of(r, "type orphan")
    assert line_of(r, "type fine").startswith("ok")
    assert "s3cret-value-123" not in r.stdout + r.stderr
    assert len(problems(r)) == 5


# --- Telegram -----------------------------------------------------------------------------------


@pytest.fixture
def fake_bot(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeBotAPI]:
    """A fake Bot API that sheetq is configured to use."""
    with bot_for_sheetq(monkeypatch, timeout="0.5") as server:
        yield server


def test_telegram_good_and_bad_token(
    book: Book, fake_bot: FakeBotAPI, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A working bot is ok (exit 0); a rejected token is a problem; no token is ever printed."""
    r = doctor()
    assert r.code == 0, r.stdout
    assert "@sheetq_test_bot" in r.stdout and fake_bot.token not in r.stdout + r.stderr
    assert fake_bot.calls("sendmessage") == []
    monkeypatch.setenv("TELEGRAM_BOT_TOKEN", WRONG_TOKEN)
    r = doctor()
    assert r.code == 1
    (line,) = problems(r)
    assert line.startswith("problem telegram") and "TELEGRAM_BOT_TOKEN" in line
    doc = doctor("--json")
    assert WRONG_TOKEN not in r.stdout + r.stderr + doc.stdout + doc.stderr
    assert doc.json()["ok"] is False
