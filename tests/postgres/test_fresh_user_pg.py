"""What a fresh user met on PostgreSQL: `--database-url` everywhere the
variable works, errors that name the option given and never the password, and messages
that speak of the database, not of a sheet."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.conftest import handler_script, run_cli, write_config

pytestmark = pytest.mark.postgres

SHEET = re.compile(r"\bsheets?\b", re.IGNORECASE)


def test_doctor_takes_database_url_as_flag_before_or_after_the_command(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`sheetq --database-url URL doctor` and `sheetq doctor --database-url URL` check the
    database as SHEETQ_DATABASE_URL does, and do not ask for a spreadsheet."""
    monkeypatch.delenv("SHEETQ_DATABASE_URL")
    for args in (["--database-url", pg_url, "doctor"], ["doctor", f"--database-url={pg_url}"]):
        r = run_cli(args)
        assert r.code == 0, r.stdout + r.stderr
        assert "PostgreSQL 1" in r.stdout and "no spreadsheet named" not in r.stdout
    status = run_cli(["status", "--json", "--database-url", pg_url])
    assert status.code == 0 and status.json()["total"] == 0, status.stderr


def test_migrate_to_a_url_that_is_not_postgresql_names_to(tmp_path: Path) -> None:
    """`migrate --to mysql://…`: exit 2 naming --to, not --database-url; no password."""
    target = f"local:{tmp_path / 'book.db'}"
    assert run_cli(["init", "-S", target]).code == 0
    for url, said in (
        ("mysql://bob:pw-secret@db/x", "--to: expected a PostgreSQL URL"),
        ("postgresql://bob:pw%zzsecret@db/x", "--to: not a valid libpq URL"),
    ):
        r = run_cli(["migrate", "-S", target, "--to", url])
        assert r.code == 2, r.stderr
        assert said in r.stderr and "--database-url" not in r.stderr
        assert "secret" not in r.stderr


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://bob:pw%zzsecret@db/x",
        "postgresql://bob:secret@[::1/x",
        "postgresql://bob:secret@db/x?nosuchparam=1",
        "postgresql://bob:secret@127.0.0.1/x?sslmode=bogus",
        "postgresql://bob:secret@127.0.0.1:99999/x",
    ],
    ids=[
        "bad percent-escape",
        "open IPv6 bracket",
        "unknown parameter",
        "bad sslmode",
        "port out of range",
    ],
)
def test_an_unparseable_url_is_one_clean_line_without_the_password(url: str) -> None:
    """libpq's parse error: exit 2, one line, no stray newline or `)`, the password masked."""
    r = run_cli(["--database-url", url, "status"])
    assert r.code == 2 and r.stdout == ""
    (line,) = r.stderr.splitlines()
    assert r.stderr == line + "\n"
    assert line.startswith("sheetq: error: SHEETQ_DATABASE_URL / --database-url: not a valid")
    assert not line.endswith(")") and "secret" not in line


def test_messages_name_the_database_not_a_sheet(
    pg_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On PostgreSQL: owed alerts stay "in PostgreSQL", an unknown task is not "in Queue,
    QueueArchive or QueueLog"; `stats` titles itself like on every backend (QueueLog)."""
    fail = handler_script(tmp_path, "fail", "import sys\nsys.exit(65)\n")
    write_config(f"[types.job]\ncommand = {fail}\n")
    assert run_cli(["enqueue", "job", "{}"]).code == 0
    r = run_cli(["process"])
    assert "failed rows stay owed in PostgreSQL" in r.stderr and not SHEET.search(r.stderr)
    missing = run_cli(["show", "t_nothing"])
    assert missing.code == 2 and not SHEET.search(missing.stderr)
    assert "QueueArchive" not in missing.stderr and "sheetq_log_archive" in missing.stderr
    stats = run_cli(["stats"]).stdout
    assert "QueueLog since" in stats and "sheetq_log" not in stats
    skip = run_cli(["skip", "--task", "t_nothing"])
    assert "no such task in queue 'Queue'" in skip.stderr


def test_no_database_password_or_bot_token_reaches_a_handler(
    pg_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A handler gets neither the queue's SHEETQ_DATABASE_URL and PGPASSWORD nor the bot
    token (a handler that enqueues a follow-up task is given the URL in its type's `env`),
    so whatever it prints is stored as it wrote it."""
    monkeypatch.setenv("SHEETQ_DATABASE_URL", pg_url.replace("postgres@", "postgres:Url-Pw-42@", 1))
    monkeypatch.setenv("PGPASSWORD", "pg-secret-77")
    monkeypatch.setenv("TELEGRAM_BOT_TOKEN", "123456:abcdefghijklmnopqrstuvwxyz0123456789")
    dump = handler_script(
        tmp_path,
        "envdump",
        "import os, sys\n"
        "seen = {k: os.environ.get(k, '-') for k in ('SHEETQ_DATABASE_URL', 'PGPASSWORD', "
        "'TELEGRAM_BOT_TOKEN')}\n"
        "print(seen, file=sys.stderr)\n"
        "print(seen)\n"
        "sys.exit(0 if os.environ['SHEETQ_TASK_TYPE'] == 'ok' else 65)\n",
    )
    write_config(f"[types.ok]\ncommand = {dump}\n[types.bad]\ncommand = {dump}\n")
    ok = run_cli(["enqueue", "ok", "{}", "--json"]).json()["task_id"]
    bad = run_cli(["enqueue", "bad", "{}", "--json"]).json()["task_id"]
    assert run_cli(["process", "--batch-size", "5"]).code == 0
    result = run_cli(["show", ok, "--json"]).json()["rows"][0]["result"]
    error = run_cli(["show", bad, "--json"]).json()["rows"][0]["last_error"]
    nothing = "{'SHEETQ_DATABASE_URL': '-', 'PGPASSWORD': '-', 'TELEGRAM_BOT_TOKEN': '-'}"
    assert result == nothing, result
    assert error.endswith(nothing), error
