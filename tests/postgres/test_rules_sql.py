"""Where SQL and Python must agree on a rule (docs/design.md §10): which waiting task is due, in
which order a claim takes them, and which is past its type's ``max_age``. The run path's
statements (``queries/run.sql``: ``peek``, the claim's order, ``too_old``) and the shared
policy (``sheetq.policy``) run on the same generated cases and must give the same answer."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

import psycopg
import pytest

from sheetq.clock import FixedClock
from sheetq.config import load_settings
from sheetq.policy import due_since, expiry, is_due
from sheetq.postgres.queries import QUERIES
from sheetq.postgres.run import RunDb, runnable
from tests.conftest import write_config

pytestmark = pytest.mark.postgres

NOW = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
MAX_AGE = 3600.0


def _cases(n: int, seed: int) -> list[tuple[str, datetime, datetime | None]]:
    """``n`` waiting tasks: created up to 2 h before or 10 min after ``NOW``, with no
    ``next_retry_at`` or one up to 2 h either side of ``NOW`` (to the second, and exactly
    ``NOW`` or its creation now and then, where a rule's edge is)."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        created = NOW + timedelta(seconds=rng.randint(-7200, 600))
        pick = rng.random()
        if pick < 0.25:
            following = None
        elif pick < 0.35:
            following = NOW
        elif pick < 0.45:
            following = created
        else:
            following = NOW + timedelta(seconds=rng.randint(-7200, 7200))
        out.append((f"t_{seed}_{i:04d}", created, following))
    return out


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_due_order_and_max_age_agree_with_the_policy(pg_url: str, seed: int) -> None:
    write_config(f'[types.job]\ncommand = ["true"]\nmax_age = "{int(MAX_AGE)}s"\n')
    cases = _cases(300, seed)
    with psycopg.connect(pg_url) as conn:
        for task_id, created, following in cases:
            conn.execute(
                "INSERT INTO sheetq_tasks (queue, task_id, created_at, type, payload_json,"
                " status, next_retry_at, idempotency_key, updated_at, payload_hash)"
                " VALUES ('Queue', %s, %s, 'job', '{}', 'pending', %s, %s, %s, 'h')",
                (task_id, created, following, "k" + task_id, created),
            )
    db = RunDb(load_settings(), FixedClock(NOW))
    db.open()
    try:
        types = runnable(db.settings, (), {})
        sql_due = [c.task_id for c in db.peek(len(cases), types)]
        with db.transaction() as conn:
            old = conn.execute(
                QUERIES["too_old"],
                {
                    "queue": "Queue",
                    "types": ["job"],
                    "max_ages": [MAX_AGE],
                    "shortest": MAX_AGE,
                    "limit": len(cases),
                },
            ).fetchall()
        sql_old = sorted(str(r["task_id"]) for r in old)
    finally:
        db.close()
    since = {task_id: due_since(created, following) for task_id, created, following in cases}
    # due: due since now or earlier (which, for a task created by the server's clock, is
    # ``is_due``: its next_retry_at has passed)
    py_due = sorted(
        (t for t, s in since.items() if s is not None and s <= NOW), key=lambda t: (since[t], t)
    )
    assert sql_due == py_due
    for task_id, created, following in cases:
        if created <= NOW:
            assert (task_id in sql_due) == is_due(following, NOW)
    py_old = sorted(t for t, s in since.items() if expiry(s, NOW, MAX_AGE))
    assert sql_old == py_old
