"""Claims cost the same however much waits (docs/design.md §11): the claim statement reads
the due-work index up to the server's now and stops, so tasks delayed or backing off are
never read, whatever their number."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from sheetq.clock import SystemClock
from sheetq.config import load_settings
from sheetq.postgres.queries import QUERIES
from sheetq.postgres.run import RunDb, _settle_params, runnable
from tests.conftest import run_cli, write_config

pytestmark = pytest.mark.postgres

DELAYED, DUE = 5000, 20


def _nodes(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield plan
    for child in plan.get("Plans", ()):
        yield from _nodes(child)


@pytest.mark.parametrize("statement", ["claim", "settle_and_claim"])
@pytest.mark.parametrize("generic", [False, True], ids=["custom-plan", "generic-plan"])
def test_a_claim_never_reads_tasks_that_are_not_due(
    pg_url: str, generic: bool, statement: str
) -> None:
    """5,000 tasks delayed by an hour, older than 20 due ones: the claim of 10 reads the
    due ones from the index and no delayed row (none read, none filtered out); so does a
    worker's turn (``settle_and_claim``: the claim joined to a settle, here of nothing)."""
    write_config('[types.job]\ncommand = ["true"]\n')
    assert run_cli(["enqueue", "job", '{"seed": 1}']).code == 0
    with psycopg.connect(pg_url) as conn:
        conn.execute(
            "INSERT INTO sheetq_tasks (queue, task_id, created_at, type, payload_json, status,"
            " next_retry_at, idempotency_key, updated_at, payload_hash)"
            " SELECT 'Queue', 't_late_' || lpad(i::text, 6, '0'), now() - interval '1 day', 'job',"
            " '{}', 'pending', now() + interval '1 hour', 'k_late_' || i, now(), 'h'"
            " FROM generate_series(1, %s) AS i",
            (DELAYED,),
        )
        conn.execute(
            "INSERT INTO sheetq_tasks (queue, task_id, created_at, type, payload_json, status,"
            " idempotency_key, updated_at, payload_hash)"
            " SELECT 'Queue', 't_due_' || lpad(i::text, 6, '0'), now() - interval '1 minute',"
            " 'job', '{}', 'pending', 'k_due_' || i, now(), 'h'"
            " FROM generate_series(1, %s) AS i",
            (DUE,),
        )
        conn.execute("ANALYZE sheetq_tasks")
    db = RunDb(load_settings(), SystemClock())
    try:
        if generic:
            db.hot()
        params = {
            **_settle_params(db.queue, "run-x", []),
            **db._claim_params("run-x", 10, runnable(db.settings, (), {})),
        }
        with db.conn.transaction(force_rollback=True):
            found = db.conn.execute(
                "EXPLAIN (ANALYZE, FORMAT JSON) " + QUERIES[statement], params
            ).fetchone()
    finally:
        db.close()
    assert found is not None
    doc = found["QUERY PLAN"]
    plan = (json.loads(doc) if isinstance(doc, str) else doc)[0]["Plan"]
    scans = [n for n in _nodes(plan) if n.get("Relation Name") == "sheetq_tasks"]
    due = [n for n in scans if n.get("Index Name") == "sheetq_tasks_due"]
    assert due, [(n["Node Type"], n.get("Index Name")) for n in scans]
    for node in due:
        assert node["Actual Rows"] * node.get("Actual Loops", 1) <= 11, node
        assert node.get("Rows Removed by Filter", 0) == 0, node
    assert not [n for n in scans if n["Node Type"] == "Seq Scan"], scans
