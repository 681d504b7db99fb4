"""The worker's turn (docs/design.md §11 "Settle per task"): several outcomes and the next claims
in one transaction, each outcome still fenced by its own lease."""

from __future__ import annotations

from datetime import UTC, datetime

import psycopg
import pytest

from sheetq.clock import FixedClock, SystemClock
from sheetq.config import load_settings
from sheetq.model import Status
from sheetq.postgres.run import PgClaim, RunDb, Settle, finished, runnable
from sheetq.retry import Decision
from tests.cli_helpers import set_now
from tests.conftest import PgBook, run_cli, write_config

pytestmark = pytest.mark.postgres

NOW = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)


def _db() -> RunDb:
    db = RunDb(load_settings(), FixedClock(NOW))
    db.open()
    return db


def _done(db: RunDb, claim: PgClaim, run_id: str) -> Settle:
    return finished(
        claim,
        Decision(Status.DONE, claim.retry_count, None, None, result="ok"),
        config=db.settings.type_config(claim.type),
        now=NOW,
        run_id=run_id,
        duration_ms=1,
    )


def test_group_settle_fences_each_outcome_and_claims_in_the_same_commit(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two outcomes and a claim in one turn: the one whose lease another run took is refused
    and logged as `outcome_refused`, the other is written, and the freed slot's claim commits
    with them; a retried turn whose commit had landed counts as written and logs nothing
    twice."""
    write_config('[types.job]\ncommand = ["true"]\nlease = "1m"\n')
    set_now(monkeypatch, NOW)
    lines = "".join(f'{{"n": {i}}}\n' for i in range(3))
    assert run_cli(["enqueue", "job", "--jsonl", "-"], input=lines).code == 0
    db = _db()
    types = runnable(db.settings, (), {})
    try:
        claims = db.claim("run-a", 2, types).claims
        assert len(claims) == 2
        stolen = claims[1].task_id
        with psycopg.connect(pg_url) as conn:  # its lease ran out; run-b recovered and holds it
            conn.execute(
                "UPDATE sheetq_tasks SET lease_owner = 'run-b' WHERE task_id = %s", (stolen,)
            )
        outcomes = [_done(db, c, "run-a") for c in claims]
        landed, more = db.settle_and_claim("run-a", outcomes, 1, types)
        assert landed == [True, False]
        assert len(more.claims) == 1
        assert more.claims[0].task_id not in {c.task_id for c in claims}
        again, _ = db.settle_and_claim("run-a", outcomes[:1], 0, types)  # a retried commit
        assert again == [True]
    finally:
        db.close()
    book = PgBook(pg_url)
    first = book.log(claims[0].task_id)
    assert [e["event"] for e in first] == ["enqueued", "claimed", "done"]
    assert book.row_of(claims[0].task_id)["status"] == "done"
    late = book.log(stolen)[-1]
    assert late["event"] == "outcome_refused"
    assert late["message"].startswith("late outcome refused") and "run-b" in late["message"]
    assert book.row_of(stolen)["status"] == "processing"
    assert book.row_of(more.claims[0].task_id)["lease_owner"] == "run-a"


def test_a_claim_skips_a_task_whose_key_another_task_holds(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A row whose idempotency key ``sheetq_keys`` gives to another task (a duplicate loser
    that `sheetq migrate` brought over) is skipped as a duplicate naming the holder, never
    claimed; the holder runs."""
    write_config('[types.job]\ncommand = ["true"]\n')
    set_now(monkeypatch, NOW)
    lines = "".join(f'{{"n": {i}}}\n' for i in range(2))
    assert run_cli(["enqueue", "job", "--jsonl", "-"], input=lines).code == 0
    book = PgBook(pg_url)
    holder, loser = (r["task_id"] for r in book.records())
    with psycopg.connect(pg_url) as conn:
        conn.execute("UPDATE sheetq_keys SET task_id = %s WHERE task_id = %s", (holder, loser))
    db = _db()
    try:
        claimed = db.claim("run-a", 2, runnable(db.settings, (), {}))
    finally:
        db.close()
    assert [c.task_id for c in claimed.claims] == [holder] and claimed.skipped == 1
    row = book.row_of(loser)
    assert (row["status"], row["error_class"]) == ("skipped", "duplicate")
    assert holder in row["last_error"]
    assert [e["event"] for e in book.log(loser)] == ["enqueued", "skipped"]


def test_a_turn_on_the_server_clock_is_one_transaction_settle_logged_first(pg_url: str) -> None:
    """On the server's clock (no test clock to pin), a turn is one statement sent alone: two
    outcomes and two claims land in ONE transaction, the outcomes' log rows before the
    claims' (as when settle and claim were two statements)."""
    write_config('[types.job]\ncommand = ["true"]\n')
    lines = "".join(f'{{"n": {i}}}\n' for i in range(4))
    assert run_cli(["enqueue", "job", "--jsonl", "-"], input=lines).code == 0
    db = RunDb(load_settings(), SystemClock())
    db.open()
    types = runnable(db.settings, (), {})
    try:
        first = db.claim("run-a", 2, types).claims
        outcomes = [_done(db, c, "run-a") for c in first]
        landed, more = db.settle_and_claim("run-a", outcomes, 2, types)
        assert landed == [True, True] and len(more.claims) == 2
    finally:
        db.close()
    with psycopg.connect(pg_url) as conn:
        rows = conn.execute(
            "SELECT task_id, event, xmin::text FROM sheetq_log"
            " WHERE event IN ('claimed', 'done') ORDER BY id"
        ).fetchall()
    turn = rows[2:]
    assert [(t, e) for t, e, _ in turn[:2]] == [(c.task_id, "done") for c in first]
    assert {(t, e) for t, e, _ in turn[2:]} == {(c.task_id, "claimed") for c in more.claims}
    assert len({x for _, _, x in turn}) == 1
