"""The worker's turn (DESIGN.md §11 "Settle per task"): several outcomes and the next claims
in one transaction, each outcome still fenced by its own lease."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

import pytest

from sheetq.config import load_settings
from sheetq.model import Status
from sheetq.postgres import queue as pgq
from sheetq.postgres.store import PgStore
from sheetq.queue import Claim, complete
from sheetq.retry import Decision
from sheetq.store.base import ChangeSet
from tests.conftest import PgBook, run_cli, write_config

pytestmark = pytest.mark.postgres

NOW = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)


def _turn(
    store: PgStore, outcomes: list[tuple[ChangeSet, bool]], run_id: str, claim: int, now: datetime
) -> tuple[list[bool], list[Claim]]:
    settings = store.settings
    landed, plan = pgq.settle_and_claim(
        store,
        outcomes,
        run_id=run_id,
        now=now,
        batch_size=claim,
        types=(),
        open_circuits=(),
        settings=settings,
        rng=random.Random(1),
    )
    return landed, list(plan.claims) if plan else []


def _done(claim: Claim, run_id: str, now: datetime) -> ChangeSet:
    settings = load_settings()
    return complete(
        claim,
        Decision(Status.DONE, claim.row.retry_count, None, None, result="ok"),
        config=settings.type_config(claim.row.type),
        now=now,
        run_id=run_id,
        duration_ms=1,
        settings=settings,
    )


def test_group_settle_fences_each_outcome_and_claims_in_the_same_commit(pg_url: str) -> None:
    """Two outcomes and a claim in one turn: the one whose lease another run took is refused
    and logged, the other is written, and the freed slot's claim commits with them; a
    retried turn whose commit had landed counts as written and logs nothing twice."""
    write_config('[types.job]\ncommand = ["true"]\nlease = "1m"\n')
    lines = "".join(f'{{"n": {i}}}\n' for i in range(3))
    assert run_cli(["enqueue", "job", "--jsonl", "-"], input=lines).code == 0
    store = PgStore(load_settings())
    try:
        _, claims = _turn(store, [], "run-a", 2, NOW)
        assert len(claims) == 2
        later = NOW + timedelta(seconds=10)
        stolen = claims[1].row.task_id
        store.conn.execute(  # its lease ran out and run-b recovered and claimed it
            "UPDATE sheetq_tasks SET lease_owner = 'run-b' WHERE task_id = %s", (stolen,)
        )
        store.conn.commit()
        outcomes = [(_done(c, "run-a", later), True) for c in claims]
        landed, more = _turn(store, outcomes, "run-a", 1, later)
        assert landed == [True, False]
        assert len(more) == 1 and more[0].row.task_id not in {c.row.task_id for c in claims}
        again, _ = _turn(store, outcomes[:1], "run-a", 0, later)  # a retried commit
        assert again == [True]
    finally:
        store.close()
    book = PgBook(pg_url)
    first = book.log(claims[0].row.task_id)
    assert [e["event"] for e in first] == ["enqueued", "claimed", "done"]
    assert book.row_of(claims[0].row.task_id)["status"] == "done"
    late = book.log(stolen)[-1]
    assert late["message"].startswith("late outcome refused") and "run-b" in late["message"]
    assert book.row_of(stolen)["status"] == "processing"
    assert book.row_of(more[0].row.task_id)["lease_owner"] == "run-a"
