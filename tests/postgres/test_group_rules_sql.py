"""Where SQL and Python must agree on a rule (docs/design.md §10, §14): which task of a group
may be claimed. PostgreSQL's groups trigger (migration 6) keeps ``held`` on every waiting
task but the one ``sheetq.order.claimable`` picks; generated groups, then generated status
changes (requeues, outcomes, skips, claims of the free task, archiving), must leave the two
in agreement after every statement."""

from __future__ import annotations

import random
from collections import defaultdict
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

from sheetq.model import Status
from sheetq.order import Member, claimable

pytestmark = pytest.mark.postgres

NOW = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
STATUSES = ("pending", "processing", "retry", "done", "failed", "skipped")


def _tasks(rng: random.Random, seed: int) -> list[tuple[Any, ...]]:
    """Groups of 1–6 tasks (some created in the same second, where task_id decides), in
    every status, some of types that block on failure, and tasks without a group."""
    out = []
    for g in range(40):
        for i in range(rng.randint(1, 6)):
            created = NOW + timedelta(seconds=rng.choice([0, 0, i, rng.randint(-100, 100)]))
            out.append(
                (
                    f"t_{seed}_{g:02d}_{rng.randint(0, 99):02d}{i}",
                    created,
                    rng.choice(STATUSES[:3] * 2 + STATUSES[3:]),
                    f"g{g}" if g < 36 else "",
                    rng.random() < 0.3,
                )
            )
    return out


def _compare(conn: psycopg.Connection[Any]) -> None:
    rows = conn.execute(
        'SELECT task_id, created_at, status, "group", group_blocks, held FROM sheetq_tasks'
    ).fetchall()
    groups: dict[str, list[Member]] = defaultdict(list)
    sql_free = set()
    for task_id, created, status, group, blocks, held in rows:
        if not group:
            continue
        groups[group].append(Member(task_id, (created, task_id), Status(status), blocks))
        if status in ("pending", "retry") and not held:
            sql_free.add(task_id)
    py_free = {t for t in (claimable(m) for m in groups.values()) if t is not None}
    assert sql_free == py_free


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_groups_trigger_agrees_with_the_policy(pg_url: str, seed: int) -> None:
    rng = random.Random(seed)
    with psycopg.connect(pg_url, autocommit=True) as conn:
        with conn.cursor() as cur:
            cur.executemany(
                "INSERT INTO sheetq_tasks (queue, task_id, created_at, type, payload_json,"
                ' status, idempotency_key, updated_at, payload_hash, "group", group_blocks)'
                " VALUES ('Queue', %s, %s, 'job', '{}', %s, %s, %s, 'h', %s, %s)",
                [(t, c, s, "k" + t, c, g, b) for t, c, s, g, b in _tasks(rng, seed)],
            )
        _compare(conn)
        for _step in range(30):
            ids = [r[0] for r in conn.execute("SELECT task_id FROM sheetq_tasks").fetchall()]
            kind = rng.random()
            if kind < 0.2:  # a claim: the free tasks it finds, to processing
                conn.execute(
                    "UPDATE sheetq_tasks SET status = 'processing' WHERE task_id IN ("
                    " SELECT task_id FROM sheetq_tasks WHERE status IN ('pending', 'retry')"
                    " AND NOT held ORDER BY random() LIMIT 3)"
                )
            elif kind < 0.9:  # outcomes, requeues, skips: any status to any but processing
                picked = rng.sample(ids, min(len(ids), rng.randint(1, 8)))
                new = [rng.choice([s for s in STATUSES if s != "processing"]) for _ in picked]
                conn.execute(
                    "UPDATE sheetq_tasks AS t SET status = v.s FROM unnest(%s::text[],"
                    " %s::text[]) AS v(id, s) WHERE t.task_id = v.id",
                    (picked, new),
                )
            else:  # archive: finished tasks leave the table
                conn.execute(
                    "DELETE FROM sheetq_tasks WHERE task_id IN (SELECT task_id FROM"
                    " sheetq_tasks WHERE status IN ('done', 'skipped', 'failed')"
                    " ORDER BY random() LIMIT 5)"
                )
            _compare(conn)
