"""The worker's turn (docs/design.md §11 "Settle per task"): several outcomes and the next claims
in one transaction, each outcome still fenced by its own lease."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

import pytest

from sheetq.config import load_settings
from sheetq.model import Status
from sheetq.postgres import hotpath
from sheetq.postgres import queue as pgq
from sheetq.postgres.store import PgStore
from sheetq.retry import Decision
from sheetq.sheet.plan import Claim, complete
from sheetq.sheet.store import ChangeSet
from tests.conftest import PgBook, run_cli, write_config

pytestmark = pytest.mark.postgres

NOW = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)


# the worker's two-statement turn, and the general path it falls back to
PATHS = {"hot": hotpath.turn, "general": pgq.settle_and_claim}


@pytest.fixture(params=sorted(PATHS))
def path(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def _store(path: str) -> PgStore:
    store = PgStore(load_settings())
    if path == "hot":
        hotpath.hot_session(store.conn)
    store.path = path  # type: ignore[attr-defined]
    return store


def _turn(
    store: PgStore, outcomes: list[tuple[ChangeSet, bool]], run_id: str, claim: int, now: datetime
) -> tuple[list[bool], list[Claim]]:
    settings = store.settings
    landed, plan = PATHS[store.path](  # type: ignore[attr-defined]
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


def test_group_settle_fences_each_outcome_and_claims_in_the_same_commit(
    pg_url: str, path: str
) -> None:
    """Two outcomes and a claim in one turn: the one whose lease another run took is refused
    and logged, the other is written, and the freed slot's claim commits with them; a
    retried turn whose commit had landed counts as written and logs nothing twice."""
    write_config('[types.job]\ncommand = ["true"]\nlease = "1m"\n')
    lines = "".join(f'{{"n": {i}}}\n' for i in range(3))
    assert run_cli(["enqueue", "job", "--jsonl", "-"], input=lines).code == 0
    store = _store(path)
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


def test_a_claim_skips_a_task_whose_key_another_task_holds(pg_url: str, path: str) -> None:
    """A row whose idempotency key ``sheetq_keys`` gives to another task (a duplicate loser
    that `sheetq migrate` brought over) is skipped as a duplicate naming the holder, never
    claimed; the holder runs."""
    write_config('[types.job]\ncommand = ["true"]\n')
    lines = "".join(f'{{"n": {i}}}\n' for i in range(2))
    assert run_cli(["enqueue", "job", "--jsonl", "-"], input=lines).code == 0
    book = PgBook(pg_url)
    holder, loser = (r["task_id"] for r in book.records())
    store = _store(path)
    try:
        store.conn.execute(
            "UPDATE sheetq_keys SET task_id = %s WHERE task_id = %s", (holder, loser)
        )
        store.conn.commit()
        _, claims = _turn(store, [], "run-a", 2, NOW)
    finally:
        store.close()
    assert [c.row.task_id for c in claims] == [holder]
    row = book.row_of(loser)
    assert (row["status"], row["error_class"]) == ("skipped", "duplicate")
    assert holder in row["last_error"]
    assert [e["event"] for e in book.log(loser)] == ["enqueued", "skipped"]
