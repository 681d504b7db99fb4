"""The database password is kept out of output without rewriting what others wrote
(docs/design.md §7, §11 "Connection"): it never reaches a handler, so a handler's result or
error that holds the password's word is stored as written; libpq's messages are classified
as said, and only the password part of a URL or conninfo is masked."""

from __future__ import annotations

import os
from pathlib import Path

import psycopg
import pytest

from tests.conftest import handler_script, run_cli, write_config
from tests.pgserver import EXISTING, with_parts
from tests.postgres.test_connection_errors import _require_password, _role

pytestmark = pytest.mark.postgres

ENV_SEEN = (
    "import os, sys\n"
    "seen = {k: os.environ.get(k, '-') for k in ('SHEETQ_DATABASE_URL', 'PGPASSWORD', "
    "'TELEGRAM_BOT_TOKEN')}\n"
)


def test_a_result_holding_the_password_word_is_stored_as_written(
    pg_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Password `postgres` (in the URL and PGPASSWORD): a handler's result `copied 3 rows
    from postgres to the CRM` and error `postgres replica lag too high` are stored, shown
    and listed unchanged; the handler saw neither the URL nor the password nor the bot
    token."""
    monkeypatch.setenv("SHEETQ_DATABASE_URL", with_parts(pg_url, password="postgres"))
    monkeypatch.setenv("PGPASSWORD", "postgres")
    monkeypatch.setenv("TELEGRAM_BOT_TOKEN", "123456:abcdefghijklmnopqrstuvwxyz0123456789")
    script = handler_script(
        tmp_path,
        "copy",
        ENV_SEEN + "print(seen, file=sys.stderr)\n"
        "if os.environ['SHEETQ_TASK_TYPE'] == 'copy':\n"
        "    print(seen)\n"
        "    print('copied 3 rows from postgres to the CRM')\n"
        "    sys.exit(0)\n"
        "print('postgres replica lag too high', file=sys.stderr)\n"
        "sys.exit(65)\n",
    )
    write_config(f"[types.copy]\ncommand = {script}\n[types.lag]\ncommand = {script}\n")
    copy = run_cli(["enqueue", "copy", "{}", "--json"]).json()["task_id"]
    lag = run_cli(["enqueue", "lag", "{}", "--json"]).json()["task_id"]
    assert run_cli(["process", "--batch-size", "5"]).code == 0
    done = run_cli(["show", copy, "--json"]).json()["rows"][0]
    failed = run_cli(["show", lag, "--json"]).json()["rows"][0]
    assert done["result"] == "copied 3 rows from postgres to the CRM", done
    assert failed["last_error"].endswith("postgres replica lag too high"), failed
    assert (
        "'SHEETQ_DATABASE_URL': '-', 'PGPASSWORD': '-', 'TELEGRAM_BOT_TOKEN': '-'"
        in (failed["last_error"])
    ), failed
    assert "[redacted]" not in done["result"] + failed["last_error"]
    shown = run_cli(["show", copy]).stdout
    assert "copied 3 rows from postgres to the CRM" in shown, shown


def test_a_url_a_handler_was_given_and_prints_has_its_password_masked(
    pg_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A handler given the queue's URL in its type's `env` (to enqueue a follow-up task)
    that prints it: the URL's password part is masked, the rest of the line kept."""
    url = with_parts(pg_url, password="Url-Pw-42")
    monkeypatch.setenv("SHEETQ_DATABASE_URL", url)
    script = handler_script(
        tmp_path,
        "echo",
        "import os\nprint('queue at', os.environ['SHEETQ_DATABASE_URL'], 'ok')\n",
    )
    given = '{ SHEETQ_DATABASE_URL = "${SHEETQ_DATABASE_URL}" }'
    write_config(f"[types.echo]\ncommand = {script}\nenv = {given}\n")
    task = run_cli(["enqueue", "echo", "{}", "--json"]).json()["task_id"]
    assert run_cli(["process"]).code == 0
    result = run_cli(["show", task, "--json"]).json()["rows"][0]["result"]
    assert result == "queue at " + url.replace(":Url-Pw-42@", ":[redacted]@") + " ok", result


@pytest.fixture
def locked_role(pg_url: str) -> str:
    """A role that logs in with the password `right-one` only (embedded server)."""
    if EXISTING:
        pytest.skip("needs the embedded server's pg_hba.conf")
    name = f"sq_locked_{os.getpid()}"
    with psycopg.connect(pg_url, autocommit=True) as admin:
        _role(admin, name, password="right-one")
        _require_password(admin, name)
    return name


def test_a_refused_login_with_a_one_letter_password_is_named_as_said(
    pg_url: str, locked_role: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Password `a`: the line says the server refused the login, in libpq's own words
    (`password authentication failed`), not "cannot connect" with letters starred out."""
    for password in ("a", "s"):
        monkeypatch.setenv(
            "SHEETQ_DATABASE_URL", with_parts(pg_url, user=locked_role, password=password)
        )
        r = run_cli(["status"])
        assert r.code == 1, r.stderr
        (line,) = r.stderr.splitlines()
        assert "the server refused the login" in line, line
        assert f'password authentication failed for user "{locked_role}"' in line, line
        assert "cannot connect" not in line and "*" not in line, line


def test_a_password_equal_to_the_user_name_keeps_the_name(
    pg_url: str, locked_role: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`NAME:NAME@host` (as `sheetq:sheetq`) refused: the line names the role, where the old
    masking starred out the user name with the password."""
    url = with_parts(pg_url, user=locked_role, password=locked_role)
    monkeypatch.setenv("SHEETQ_DATABASE_URL", url)
    for command in (["status"], ["enqueue", "job", "{}"]):
        r = run_cli(command)
        assert r.code == 1
        (line,) = r.stderr.splitlines()
        assert f"PostgreSQL {locked_role}@" in line, line
        assert f'password authentication failed for user "{locked_role}"' in line, line
