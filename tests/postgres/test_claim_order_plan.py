"""Claims cost the same however much waits (docs/design.md §11), with §14's order: the claim
walks the priorities that waiting tasks have (one index probe each) and reads each
priority's due tasks up to the server's now, so tasks delayed at any priority are never
read, whatever their number."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from sheetq.clock import SystemClock
from sheetq.config import load_settings
from sheetq.postgres.queries import QUERIES
from sheetq.postgres.run import RunDb, runnable
from tests.conftest import run_cli, write_config

pytestmark = pytest.mark.postgres

DELAYED, DUE = 5000, 300


def _nodes(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield plan
    for child in plan.get("Plans", ()):
        yield from _nodes(child)


def _insert(conn: psycopg.Connection[Any], prefix: str, count: int, **cells: str) -> None:
    """``count`` pending ``job`` tasks named ``prefix``N; ``cells``: SQL expressions for
    ``created_at``, ``next_retry_at``, ``priority`` (and more, per later migrations)."""
    columns = {"created_at": "now() - interval '1 minute'", "next_retry_at": "NULL", **cells}
    names = ", ".join(columns)
    values = ", ".join(columns.values())
    conn.execute(
        "INSERT INTO sheetq_tasks (queue, task_id, type, payload_json, status,"
        f" idempotency_key, updated_at, payload_hash, {names})"
        f" SELECT 'Queue', '{prefix}' || lpad(i::text, 6, '0'), 'job', '{{}}', 'pending',"
        f" 'k_{prefix}' || i, now(), 'h', {values}"
        " FROM generate_series(1, %s) AS i",
        (count,),
    )


def explain_claim(limit: int) -> tuple[dict[str, Any], list[str]]:
    """EXPLAIN ANALYZE of one claim of ``limit`` (rolled back): the plan's root and the task
    ids the claim took, in the claim's order."""
    db = RunDb(load_settings(), SystemClock())
    try:
        params = db._claim_params("run-x", limit, runnable(db.settings, (), {}))
        with db.conn.transaction(force_rollback=True):
            taken = [
                str(r["task_id"])
                for r in sorted(
                    db.conn.execute(QUERIES["claim"], params).fetchall(),
                    key=lambda r: (-r["priority"], r["due_at"], r["task_id"]),
                )
            ]
        with db.conn.transaction(force_rollback=True):
            found = db.conn.execute(
                "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + QUERIES["claim"], params
            ).fetchone()
    finally:
        db.close()
    assert found is not None
    doc = found["QUERY PLAN"]
    return (json.loads(doc) if isinstance(doc, str) else doc)[0]["Plan"], taken


def _blocks(plan: dict[str, Any]) -> int:
    """Buffers the statement touched (shared hits and reads, children included)."""
    return int(plan.get("Shared Hit Blocks", 0)) + int(plan.get("Shared Read Blocks", 0))


def test_a_claim_reads_no_delayed_task_at_any_priority(pg_url: str) -> None:
    """300 due tasks at priority 5 and 300 at 0, then 5,000 tasks delayed by an hour at each
    of those priorities: a claim of 10 takes due ones of priority 5, reads the due-work index
    only for them (no delayed row read, none filtered out), and touches within 1.3× the
    buffers it touched before the delayed tasks came."""
    write_config('[types.job]\ncommand = ["true"]\n')
    assert run_cli(["enqueue", "job", '{"seed": 1}', "--priority", "-1"]).code == 0
    with psycopg.connect(pg_url) as conn:
        for level in ("5", "0"):
            _insert(conn, f"t_due{level}_", DUE, priority=level)
        conn.execute("ANALYZE sheetq_tasks")
    before, _ = explain_claim(10)
    with psycopg.connect(pg_url) as conn:
        for level in ("5", "0"):
            _insert(
                conn,
                f"t_late{level}_",
                DELAYED,
                created_at="now() - interval '1 day'",
                next_retry_at="now() + interval '1 hour'",
                priority=level,
            )
        conn.execute("ANALYZE sheetq_tasks")
    plan, taken = explain_claim(10)
    assert taken == [f"t_due5_{i:06d}" for i in range(1, 11)]
    scans = [n for n in _nodes(plan) if n.get("Relation Name") == "sheetq_tasks"]
    assert not [n for n in scans if n["Node Type"] == "Seq Scan"], scans
    due = [n for n in scans if n.get("Index Name") == "sheetq_tasks_due"]
    assert due, [(n["Node Type"], n.get("Index Name")) for n in scans]
    for node in due:
        assert node.get("Rows Removed by Filter", 0) == 0, node
    for n in _nodes(before):
        print(
            "B",
            n["Node Type"],
            n.get("Index Name") or n.get("Relation Name") or n.get("CTE Name"),
            _blocks(n),
            n.get("Actual Loops"),
        )
    for n in _nodes(plan):
        print(
            "A",
            n["Node Type"],
            n.get("Index Name") or n.get("Relation Name") or n.get("CTE Name"),
            _blocks(n),
            n.get("Actual Loops"),
        )
    assert _blocks(plan) <= 1.3 * _blocks(before), (_blocks(plan), _blocks(before))


HELD = 20_000


def test_a_claim_reads_no_task_held_back_by_its_group(pg_url: str) -> None:
    """300 due tasks without a group, and 20,000 older ones of 200 groups (enqueued through
    `sheetq enqueue --jsonl` with group_fields) first all done, then all waiting behind
    their groups' first task, which backs off for an hour: the claim of 10 takes the
    ungrouped ones, reads the due-work index only for them (none of the 19,800 due tasks
    held back by their group read, none filtered out), and touches no more buffers than
    while those were done (same table and index sizes): a measured ratio within 1.3."""
    write_config(
        '[types.job]\ncommand = ["true"]\n'
        '[types.deal]\ncommand = ["true"]\ngroup_fields = ["deal"]\n'
    )
    assert run_cli(["enqueue", "job", '{"seed": 1}', "--priority", "-1"]).code == 0
    lines = "\n".join(json.dumps({"deal": i % 200, "n": i}) for i in range(HELD))
    assert run_cli(["enqueue", "deal", "--jsonl", "-"], input=lines).code == 0
    with psycopg.connect(pg_url) as conn:
        _insert(conn, "t_free_", DUE, created_at="now() - interval '1 hour'")
        conn.execute(
            "UPDATE sheetq_tasks SET created_at = now() - interval '2 hours' WHERE type = 'deal'"
        )
        conn.execute("UPDATE sheetq_tasks SET status = 'done' WHERE type = 'deal'")
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE sheetq_tasks")
    before, _ = explain_claim(10)
    with psycopg.connect(pg_url) as conn:
        conn.execute("UPDATE sheetq_tasks SET status = 'pending' WHERE type = 'deal'")
        conn.execute(
            "UPDATE sheetq_tasks SET status = 'retry', next_retry_at = now() + interval '1 hour'"
            " WHERE type = 'deal' AND NOT held"
        )
        counts = conn.execute(
            "SELECT status, held, count(*) FROM sheetq_tasks WHERE type = 'deal'"
            " GROUP BY 1, 2 ORDER BY 1, 2"
        ).fetchall()
        assert counts == [("pending", True, HELD - 200), ("retry", False, 200)], counts
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE sheetq_tasks")
    plan, taken = explain_claim(10)
    assert taken == [f"t_free_{i:06d}" for i in range(1, 11)]
    scans = [n for n in _nodes(plan) if n.get("Relation Name") == "sheetq_tasks"]
    assert not [n for n in scans if n["Node Type"] == "Seq Scan"], scans
    due = [n for n in scans if n.get("Index Name") == "sheetq_tasks_due"]
    assert due, [(n["Node Type"], n.get("Index Name")) for n in scans]
    for node in due:
        assert node.get("Rows Removed by Filter", 0) == 0, node
        assert node["Actual Rows"] <= 10, node
    ratio = _blocks(plan) / _blocks(before)
    print(
        f"claim of 10 behind 19,800 held tasks: {_blocks(plan)} buffers, "
        f"{_blocks(before)} with them done: ratio {ratio:.2f}"
    )
    assert ratio <= 1.3, (_blocks(plan), _blocks(before))
