"""requeue, skip and archive on PostgreSQL are set-based statements (docs/design.md §10, §11):
however many tasks they change, one statement changes the tasks and one writes their log
rows, in one transaction; through the CLI on a real server."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import Any

import psycopg
import pytest

from tests.conftest import run_cli

pytestmark = pytest.mark.postgres

N = 60

# Counts the statements (not rows) that change each table, by kind.
COUNTER = """
CREATE TABLE statements (tbl text, op text);
CREATE FUNCTION count_statement() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN INSERT INTO statements VALUES (TG_TABLE_NAME, TG_OP); RETURN NULL; END $$;
"""
TABLES = ("sheetq_tasks", "sheetq_log", "sheetq_archive", "sheetq_log_archive")


def _count_statements(url: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(COUNTER)
        for table in TABLES:
            conn.execute(
                f"CREATE TRIGGER count_{table} AFTER INSERT OR UPDATE OR DELETE ON {table}"
                " FOR EACH STATEMENT EXECUTE FUNCTION count_statement()"
            )


def _statements(url: str) -> dict[str, int]:
    """Statements that changed each table since the last call (``table op`` → count)."""
    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute("DELETE FROM statements RETURNING tbl, op").fetchall()
    out: dict[str, int] = {}
    for table, op in rows:
        out[f"{table} {op}"] = out.get(f"{table} {op}", 0) + 1
    return out


def _sql(url: str, query: str, params: Any = ()) -> list[tuple[Any, ...]]:
    with psycopg.connect(url, autocommit=True) as conn:
        cur = conn.execute(query, params)
        return cur.fetchall() if cur.description else []


def _enqueue(n: int) -> list[str]:
    lines = "".join(json.dumps({"n": i}) + "\n" for i in range(n))
    r = run_cli(["enqueue", "job", "--jsonl", "--json"], input=lines)
    assert r.code == 0, r.stderr
    return [x["task_id"] for x in r.json()["results"]]


def test_requeue_skip_and_archive_change_many_tasks_in_one_statement_each(pg_url: str) -> None:
    ids = _enqueue(N)
    _sql(
        pg_url,
        "UPDATE sheetq_tasks SET status = 'failed', error_class = 'data', retry_count = 2",
    )
    _count_statements(pg_url)

    r = run_cli(["requeue", "--json"])
    assert r.code == 0, r.stderr
    assert r.json()["requeued"] == N and r.json()["task_ids"] == ids
    assert _statements(pg_url) == {"sheetq_tasks UPDATE": 1, "sheetq_log INSERT": 1}

    r = run_cli(["skip", *(f"--task={i}" for i in ids), "--reason", "by hand", "--json"])
    assert r.code == 0, r.stderr
    assert r.json()["skipped"] == N
    assert _statements(pg_url) == {"sheetq_tasks UPDATE": 1, "sheetq_log INSERT": 1}

    _sql(pg_url, "UPDATE sheetq_tasks SET updated_at = updated_at - interval '40 days'")
    _statements(pg_url)
    r = run_cli(["archive", "--older-than", "30d", "--json"])
    assert r.code == 0, r.stderr
    assert r.json()["archived"] == N and r.json()["writes"] == 1
    assert _statements(pg_url) == {
        "sheetq_tasks DELETE": 1,
        "sheetq_archive INSERT": 1,
        "sheetq_log INSERT": 1,
    }

    _sql(pg_url, "UPDATE sheetq_log SET ts = ts - interval '100 days'")
    _statements(pg_url)
    r = run_cli(["archive", "--log-older-than", "90d", "--json"])
    assert r.code == 0, r.stderr
    assert r.json()["log_archived"] == 4 * N  # enqueued, requeued, skipped, archived
    assert _statements(pg_url) == {"sheetq_log DELETE": 1, "sheetq_log_archive INSERT": 1}
    history = run_cli(["show", ids[0], "--json"]).json()["log"]
    assert [e["event"] for e in history] == ["enqueued", "requeued", "skipped", "archived"]


class _AheadClock(datetime):
    """``datetime`` whose ``now`` reads a host clock ten minutes ahead of the server's."""

    @classmethod
    def now(cls, tz: Any = None) -> Any:  # type: ignore[override]
        return datetime.now(tz) + timedelta(minutes=10)


def test_requeue_on_a_host_whose_clock_is_ahead_makes_the_task_due_now(
    pg_url: str, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Time is the database's (docs/design.md §11): `requeue` on a host whose clock runs ten
    minutes ahead stamps the server's time, so a run elsewhere takes the task at once
    instead of ten minutes later; its log row carries the server's time too."""
    from tests.conftest import handler_script, write_config

    ok = handler_script(tmp_path, "ok", "print('fine')\n")
    write_config(f"[types.job]\ncommand = {ok}\n")
    (task,) = _enqueue(1)
    _sql(pg_url, "UPDATE sheetq_tasks SET status = 'failed', error_class = 'data'")
    with monkeypatch.context() as m:  # sheetq's reading of this host's clock
        m.setattr("sheetq.clock.datetime", _AheadClock)
        m.setattr("sheetq.postgres.session.datetime", _AheadClock)
        r = run_cli(["requeue", "--task", task, "--json"])
    assert r.code == 0 and r.json()["requeued"] == 1, r.stderr
    ((lag,),) = _sql(
        pg_url,
        "SELECT extract(epoch FROM next_retry_at - clock_timestamp()) FROM sheetq_tasks",
    )
    assert abs(float(lag)) < 5, lag
    doc = run_cli(["process", "--json"]).json()
    assert doc["done"] == 1, doc
