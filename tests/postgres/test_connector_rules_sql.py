"""The breaker's rules in SQL (``sheetq_connector_outcome``, migration 0005) and in Python
(``sheetq.connectors.after``) on the same generated cases (docs/design.md §10: where SQL
must apply a shared rule, both run and are compared)."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

import psycopg
import pytest

from sheetq.connectors import Breaker, Kind, Limits, State, after, effective, take

pytestmark = [pytest.mark.postgres]

T0 = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)


@pytest.mark.parametrize("seed", range(12))
def test_sql_and_python_breakers_agree_step_by_step(pg_url: str, seed: int) -> None:
    """Random outcomes (ok, transient, auth, returned unstarted), probes taken when a
    breaker is half-open, time passing across cooldowns: after every step the row and the
    Python state agree on state, until, streak and probe, and both log the same changes."""
    rng = random.Random(seed)
    limits = Limits(threshold=rng.randint(1, 4), cooldown=60.0)
    breaker = Breaker()
    at = T0
    python_events: list[str] = []
    with psycopg.connect(pg_url) as conn:
        for step in range(40):
            at += timedelta(seconds=rng.choice([1, 20, 61]))
            task = f"t{step}"
            with conn.transaction():
                conn.execute(
                    "SELECT set_config('sheetq.offset', (%s::timestamptz - now())::text, true)",
                    (at,),
                )
                if effective(breaker, at) is State.HALF_OPEN and not breaker.probe:
                    breaker = take(breaker, at, limits, [task], at + timedelta(seconds=300))
                    conn.execute(
                        "UPDATE sheetq_connectors SET state = 'half-open', probe = %s,"
                        " probe_until = %s WHERE queue = 'q' AND name = 'c'",
                        (task, at + timedelta(seconds=300)),
                    )
                elif breaker.probe and rng.random() < 0.6:
                    task = breaker.probe  # the probe ends
                kind = rng.choice(list(Kind))
                breaker, change = after(breaker, at, limits, task, kind, "503")
                if change is not None:
                    python_events.append(change.event)
                conn.execute(
                    "SELECT sheetq_connector_outcome('q', 'c', %s, %s, %s, %s, '503', 'r')",
                    (task, kind.value, limits.threshold, limits.cooldown),
                )
                row = conn.execute(
                    "SELECT state, until, failures, probe FROM sheetq_connectors"
                    " WHERE queue = 'q' AND name = 'c'"
                ).fetchone()
            assert row is not None
            assert (row[0], row[1], row[2], row[3]) == (
                breaker.state.value,
                breaker.until,
                breaker.failures,
                breaker.probe,
            ), (seed, step, kind)
        sql_events = [
            e
            for (e,) in conn.execute(
                "SELECT event FROM sheetq_log WHERE task_id = '' AND type = 'c' ORDER BY id"
            )
        ]
    assert sql_events == python_events
    assert "breaker_opened" in python_events or limits.threshold > 1
