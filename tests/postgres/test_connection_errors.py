"""PostgreSQL that cannot be used (docs/design.md §4 exit codes, §11 "Connection"): unreachable,
silent, a wrong password, a missing database, a role without privileges, an older schema.
A sweep of every failure × every command that touches the queue: one clear line on stderr
(doctor: one problem line), the documented exit code, within a bounded time, the password
never printed, and nothing written."""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest

from tests.conftest import run_cli
from tests.pgserver import EXISTING, with_parts

pytestmark = pytest.mark.postgres

SECRET = "s3cret-Pw-77"
TASK = "t_01JDF3K4Z8Q9W2E5R7T1Y3U6I0"

# every command that opens the queue, with its arguments
COMMANDS: dict[str, list[str]] = {
    "enqueue": ["enqueue", "job", '{"n": 1}'],
    "enqueue --jsonl": ["enqueue", "job", "--jsonl", "-"],
    "process": ["process", "--until-empty"],
    "worker": ["worker"],
    "status": ["status"],
    "list": ["list"],
    "show": ["show", TASK],
    "stats": ["stats"],
    "requeue": ["requeue", "--status", "failed"],
    "skip": ["skip", "--task", TASK],
    "archive": ["archive", "--older-than", "1d"],
    "init": ["init"],
    "doctor": ["doctor"],
}


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A loopback port that accepts TCP connections and never answers (a hung server, a
    black-holing firewall's nearest stand-in on loopback)."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(64)
        yield listener.getsockname()[1]


@pytest.fixture
def refused_port() -> int:
    """A loopback port nothing listens on."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _role(admin: psycopg.Connection[Any], name: str, *, password: str | None) -> None:
    admin.execute(f'DROP ROLE IF EXISTS "{name}"')
    if password is None:
        admin.execute(f'CREATE ROLE "{name}" LOGIN')
    else:
        admin.execute(f"CREATE ROLE \"{name}\" LOGIN PASSWORD '{password}'")


def _require_password(admin: psycopg.Connection[Any], name: str) -> None:
    """Make the test server ask ``name`` (only) for a SCRAM password: two lines at the top
    of its pg_hba.conf, then a reload (the embedded server trusts everyone else)."""
    (path,) = admin.execute("SHOW hba_file").fetchone() or ("",)
    with open(path, encoding="utf-8") as f:
        text = f.read()
    rules = f"local all {name} scram-sha-256\nhost all {name} 127.0.0.1/32 scram-sha-256\n"
    if rules not in text:
        with open(path, "w", encoding="utf-8") as f:
            f.write(rules + text)
    admin.execute("SELECT pg_reload_conf()")
    # The postmaster reloads asynchronously (slowly on a loaded machine): wait until the
    # role is asked for a password.
    params = {k: v for k, v in admin.info.get_parameters().items() if k != "password"}
    deadline = time.monotonic() + 15
    while True:
        try:
            psycopg.connect(**(params | {"user": name, "password": ""})).close()
        except psycopg.OperationalError as exc:
            if "password" in str(exc):
                return
        if time.monotonic() > deadline:
            raise AssertionError(f"the server never asked {name} for a password")
        time.sleep(0.05)


def _counts(pg_url: str) -> tuple[int, ...]:
    with psycopg.connect(pg_url) as conn:
        return tuple(
            int(conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0])  # type: ignore[index]
            for t in ("sheetq_tasks", "sheetq_log", "sheetq_keys", "sheetq_archive")
        )


Case = tuple[str, int, str, Callable[[], None] | None]


@pytest.fixture
def cases(pg_url: str, pg_server: Any, silent_port: int, refused_port: int) -> dict[str, Case]:
    """Each failure: (URL, exit code, a word its line must hold, a check run after)."""
    from sheetq.postgres import schema

    with psycopg.connect(pg_url, autocommit=True) as admin:
        suffix = str(os.getpid())
        plain, locked = f"sq_nopriv_{suffix}", f"sq_pw_{suffix}"
        _role(admin, plain, password=None)
        _role(admin, locked, password="right-one")
        if not EXISTING:
            _require_password(admin, locked)
    run_cli(["enqueue", "job", '{"seed": true}'])  # something that must stay as it is
    before = _counts(pg_url)

    def unchanged() -> None:
        assert _counts(pg_url) == before

    older = pg_server.new_database(migrated=False)  # as the sheetq before this one left it
    with psycopg.connect(older) as conn, pytest.MonkeyPatch.context() as patch:
        patch.setattr(schema, "MIGRATIONS", schema.MIGRATIONS[:-1])
        schema.upgrade(conn)
    out: dict[str, Case] = {
        "unreachable": (
            f"postgresql://bob:{SECRET}@127.0.0.1:{refused_port}/jobs",
            1,
            "cannot connect",
            None,
        ),
        "silent": (
            f"postgresql://bob:{SECRET}@127.0.0.1:{silent_port}/jobs?connect_timeout=2",
            1,
            "no answer",
            None,
        ),
        "missing database": (with_parts(pg_url, dbname="no_such_db"), 2, "does not exist", None),
        "no privilege": (with_parts(pg_url, user=plain), 1, "GRANT", unchanged),
        "older schema": (older, 2, "sheetq init", None),
    }
    if not EXISTING:
        out["wrong password"] = (
            with_parts(pg_url, user=locked, password=SECRET),
            1,
            "password",
            unchanged,
        )
    return out


@pytest.mark.slow  # ~80 commands, three of them waiting out a 2 s connect timeout
def test_every_failure_of_every_command_is_one_line_and_the_documented_code(
    cases: dict[str, Case], monkeypatch: pytest.MonkeyPatch
) -> None:
    """6 failures × 13 commands (silent: 3 commands, 2 s each): one line, the exit code of
    §4, the reason named, no password, within the bound, nothing written."""
    ran = 0
    for name, (url, code, word, after) in cases.items():
        commands = COMMANDS
        if name == "silent":  # each waits for the connect timeout: three are enough
            commands = {k: COMMANDS[k] for k in ("enqueue", "process", "doctor")}
        for command, args in commands.items():
            if name == "older schema" and command == "init":
                continue  # init upgrades it (last, below)
            monkeypatch.setenv("SHEETQ_DATABASE_URL", url)
            began = time.monotonic()
            r = run_cli(args, input='{"n": 2}\n')
            took = time.monotonic() - began
            where = f"{name} / {command}: {r.stdout!r} {r.stderr!r}"
            assert SECRET not in r.stdout + r.stderr, where
            assert took < (10 if name == "silent" else 15), (where, took)
            if command == "doctor":
                assert r.code == 1, where
                problems = [x for x in r.stdout.splitlines() if x.startswith("problem")]
                assert len(problems) == 1 and word in problems[0], where
            else:
                assert r.code == code, where
                lines = [x for x in r.stderr.splitlines() if x.strip()]
                assert len(lines) == 1 and lines[0].startswith("sheetq: error: "), where
                assert word in lines[0], where
            if after is not None:
                after()
            ran += 1
    assert ran >= 60
    older = cases["older schema"][0]
    monkeypatch.setenv("SHEETQ_DATABASE_URL", older)
    assert run_cli(["init"]).code == 0 and run_cli(["status"]).code == 0


def test_init_as_a_role_that_may_not_create_tables_says_which_grant(
    pg_server: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`init` on an empty database as a role without CREATE on schema public: exit 1, one
    line naming the GRANT that fixes it (not the table privileges), no SQL text."""
    empty = pg_server.new_database(migrated=False)
    name = f"sq_nocreate_{os.getpid()}"
    with psycopg.connect(empty, autocommit=True) as admin:
        _role(admin, name, password=None)
        admin.execute("REVOKE CREATE ON SCHEMA public FROM PUBLIC")
    monkeypatch.setenv("SHEETQ_DATABASE_URL", with_parts(empty, user=name))
    r = run_cli(["init"])
    assert r.code == 1
    (line,) = r.stderr.splitlines()
    assert f"GRANT CREATE ON SCHEMA public TO {name}" in line and "LINE 1" not in line, line


def test_enqueue_gives_up_after_its_time_limit_when_the_queue_is_locked(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A transaction holding the queue's lock (a long `migrate`, a stuck session): enqueue
    waits at most SHEETQ_ENQUEUE_TIMEOUT, exits 1 with one line naming it, and writes
    nothing; once the lock is gone the same enqueue goes through."""
    import psycopg

    monkeypatch.setenv("SHEETQ_ENQUEUE_TIMEOUT", "2s")
    with psycopg.connect(pg_url) as conn:  # a transaction holding the queue's enqueue lock
        conn.execute("SELECT pg_advisory_xact_lock(hashtext('sheetq:Queue'))")
        began = time.monotonic()
        r = run_cli(["enqueue", "job", '{"n": 1}'])
        took = time.monotonic() - began
    assert r.code == 1, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "SHEETQ_ENQUEUE_TIMEOUT" in r.stderr
    assert 1.5 < took < 5, took
    assert _counts(pg_url) == (0, 0, 0, 0)
    again = run_cli(["enqueue", "job", '{"n": 1}', "--json"])
    assert again.code == 0 and again.json()["outcome"] == "enqueued"
