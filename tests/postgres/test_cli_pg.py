"""The commands on PostgreSQL (docs/design.md §11): init's report, refusal of a database without
this sheetq's schema, keys that hold under racing enqueues and after archive, doctor."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from tests.conftest import run_cli

pytestmark = pytest.mark.postgres

COMMANDS = [
    ["status"],
    ["list"],
    ["show", "t_x"],
    ["stats"],
    ["requeue"],
    ["skip", "--task", "t_x"],
    ["archive"],
    ["archive", "--log-older-than", "30d"],
    ["alert"],
    ["enqueue", "job", "{}"],
    ["enqueue", "job", "--jsonl"],
]


def test_init_says_which_migrations_ran_then_that_the_schema_is_current(
    pg_server: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """First `init` names each migration it applied, the second says the schema is current;
    `--dashboard` is a sheet thing: exit 2, one line."""
    url = pg_server.new_database(migrated=False)
    monkeypatch.setenv("SHEETQ_DATABASE_URL", url)
    first = run_cli(["init"])
    assert first.code == 0, first.stderr
    assert "applied schema migration 1 (" in first.stdout and "added column" not in first.stdout
    from sheetq.postgres.schema import VERSION

    again = run_cli(["init"])
    assert again.code == 0 and f"schema version {VERSION} is current" in again.stdout
    assert "applied" not in again.stdout
    r = run_cli(["init", "--dashboard"])
    assert r.code == 2 and len(r.stderr.strip().splitlines()) == 1 and "PostgreSQL" in r.stderr


@pytest.mark.parametrize("args", COMMANDS, ids=lambda a: " ".join(a))
def test_every_command_refuses_a_database_without_the_schema(
    pg_server: Any, monkeypatch: pytest.MonkeyPatch, args: list[str]
) -> None:
    """Before `sheetq init`: exit 2 and one line that says to run it; nothing created."""
    url = pg_server.new_database(migrated=False)
    monkeypatch.setenv("SHEETQ_DATABASE_URL", url)
    monkeypatch.setenv("TELEGRAM_BOT_TOKEN", "123456:abcdefghijklmnopqrstuvwxyz0123456789")
    monkeypatch.setenv("TELEGRAM_CHAT_ID", "-100")
    monkeypatch.setenv("SHEETQ_TELEGRAM_API_URL", "http://127.0.0.1:9")  # never reached
    r = run_cli(args, input="{}\n")
    assert r.code == 2, (r.stdout, r.stderr)
    assert len(r.stderr.strip().splitlines()) == 1 and "sheetq init" in r.stderr, r.stderr
    import psycopg

    with psycopg.connect(url) as conn:
        assert conn.execute("SELECT to_regclass('sheetq_tasks')").fetchone() == (None,)


def test_an_older_schema_is_refused_with_run_init(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A database one migration behind this sheetq: exit 2, "run `sheetq init`"."""
    from sheetq.postgres import schema

    later = (*schema.MIGRATIONS, schema.Migration(schema.VERSION + 1, "a later one", "SELECT 1"))
    monkeypatch.setattr(schema, "MIGRATIONS", later)
    monkeypatch.setattr(schema, "VERSION", schema.VERSION + 1)
    for args in (["status"], ["enqueue", "job", "{}"], ["list"]):
        r = run_cli(args)
        assert (
            r.code == 2
            and f"schema version {schema.VERSION - 1};" in r.stderr
            and "sheetq init" in r.stderr
        )
    assert run_cli(["init"]).code == 0
    assert run_cli(["status"]).code == 0


def _enqueue(url: str, payload: str) -> tuple[int, str, str]:
    env = {**os.environ, "SHEETQ_DATABASE_URL": url}
    done = subprocess.run(
        [sys.executable, "-m", "sheetq", "enqueue", "job", payload, "--key", "K", "--json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    return done.returncode, done.stdout, done.stderr


@pytest.mark.slow
@pytest.mark.parametrize("same", [False, True], ids=["different", "same"])
def test_twenty_racing_enqueues_of_one_key_insert_once(pg_url: str, same: bool) -> None:
    """20 `sheetq enqueue` processes at once with one key: exactly one inserts; different
    payloads make the rest conflicts (exit 3), the same payload duplicates (exit 0)."""
    payloads = ['{"n":1}'] * 20 if same else [json.dumps({"n": i}) for i in range(20)]
    with ThreadPoolExecutor(20) as pool:
        results = list(pool.map(lambda p: _enqueue(pg_url, p), payloads))
    outcomes = [json.loads(out)["outcome"] if out else err for _, out, err in results]
    assert outcomes.count("enqueued") == 1, outcomes
    rest = "duplicate" if same else "conflict"
    assert outcomes.count(rest) == 19, outcomes
    assert sorted(code for code, _, _ in results) == [0] * (20 if same else 1) + (
        [] if same else [3] * 19
    )
    import psycopg

    with psycopg.connect(pg_url) as conn:
        assert conn.execute("SELECT count(*) FROM sheetq_tasks").fetchone() == (1,)
        events = dict(
            conn.execute("SELECT event, count(*) FROM sheetq_log GROUP BY event").fetchall()
        )
    assert events == {"enqueued": 1, rest: 19}


def test_archived_task_keeps_its_key(pg_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """After `archive` moves a finished task to sheetq_archive, its payload again is a
    duplicate naming the archived task, another payload a conflict (exit 3)."""
    task = run_cli(["enqueue", "job", '{"a":1}', "--key", "k1", "--json"]).json()["task_id"]
    assert run_cli(["skip", "--task", task]).code == 0
    monkeypatch.setenv("SHEETQ_NOW", "2099-01-01T00:00:00Z")
    doc = run_cli(["archive", "--older-than", "1d", "--json"]).json()
    assert doc["archived"] == 1 and doc["task_ids"] == [task]
    again = run_cli(["enqueue", "job", '{"a":1}', "--key", "k1", "--json"])
    assert again.code == 0 and again.json()["outcome"] == "duplicate"
    assert again.json()["task_id"] == task
    other = run_cli(["enqueue", "job", '{"a":2}', "--key", "k1", "--json"])
    assert other.code == 3 and other.json()["task_id"] == task
    shown = run_cli(["show", task, "--json"]).json()
    assert shown["rows"][0]["row"] is None and shown["rows"][0]["worksheet"] == "QueueArchive"
    assert all("_id" not in entry and entry["row"] is None for entry in shown["log"])


def test_doctor_reports_the_server_and_never_the_password(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A good database: server version, schema version, counts, ok. An unreachable one: one
    clear problem line, exit 1, and the password from the URL printed nowhere."""
    run_cli(["enqueue", "job", "{}"])
    r = run_cli(["doctor"])
    assert r.code == 0, r.stdout
    from sheetq.postgres.schema import VERSION

    assert "PostgreSQL 1" in r.stdout and f"version {VERSION}," in r.stdout
    assert "1 pending" in r.stdout
    monkeypatch.setenv("SHEETQ_DATABASE_URL", "postgresql://bob:s3cret-pw@127.0.0.1:9/x")
    r = run_cli(["doctor"])
    assert r.code == 1
    (line,) = [x for x in r.stdout.splitlines() if x.startswith("problem")]
    assert "database" in line and "cannot connect" in line
    status = run_cli(["status"])
    assert status.code == 1 and len(status.stderr.strip().splitlines()) == 1
    assert "s3cret-pw" not in r.stdout + r.stderr + status.stdout + status.stderr


def test_doctor_refuses_a_server_older_than_sheetq_needs(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server below the oldest supported version is one problem line naming what to do
    (the check is moved above this server's version, since none older is at hand)."""
    from sheetq.postgres import doctor

    monkeypatch.setattr(doctor, "OLDEST_SERVER", 10**7)
    r = run_cli(["doctor"])
    assert r.code == 1
    (line,) = [x for x in r.stdout.splitlines() if x.startswith("problem")]
    assert "older than 13" in line, r.stdout


def test_status_counts_a_live_lease_as_running_and_an_expired_one_as_gone(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """PostgreSQL has no run lease: a processing task under a lease that has not ended is a
    running worker's (not listed as held by a gone run); once its lease has passed, it is."""
    import psycopg

    task = run_cli(["enqueue", "job", "{}", "--json"]).json()["task_id"]
    with psycopg.connect(pg_url) as conn:
        conn.execute(
            "UPDATE sheetq_tasks SET status = 'processing', lease_owner = 'run_W',"
            " lease_until = '2026-01-05T10:00:00Z' WHERE task_id = %s",
            (task,),
        )
    monkeypatch.setenv("SHEETQ_NOW", "2026-01-05T09:00:00Z")
    assert run_cli(["status", "--json"]).json()["held_by_gone_runs"] == []
    monkeypatch.setenv("SHEETQ_NOW", "2026-01-05T10:00:01Z")
    (gone,) = run_cli(["status", "--json"]).json()["held_by_gone_runs"]
    assert (gone["run_id"], gone["count"], gone["lease_expired"]) == ("run_W", 1, True)
