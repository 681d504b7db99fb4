"""A run's next batches from the last plan (``sheetq.sheet.plan.next_batch``) claim exactly what
a new read and plan would claim, while its conditions hold (docs/decisions.md "A run's
next batches").

Swept over generated queues (a person's typed statuses, requeues, shared keys, delays, leases,
``max_age``, priorities typed as text, types without a handler) with time moving on between
batches by steps from none to hours: one run plans once and takes ``next_batch`` until
``Lookahead.horizon`` (then plans again), the other plans before every batch. Both must claim
the same tasks in the same order and write the same cells and QueueLog rows.
"""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from sheetq.config import Settings, load_settings
from sheetq.model import FINISHED, Status
from sheetq.sheet.plan import BatchPlan, Lookahead, next_batch, parse_rows, plan_batch
from sheetq.sheet.store import Row

NOW = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
STATUSES: list[Any] = [
    "pending", "pending", "pending", "retry", "retry", "processing", "done", "failed",
    "Pending", "retry ", "skipped",
]  # fmt: skip
TIMES: list[Any] = [
    "", "", None, "2026-01-05T08:00:00Z", "2026-01-05T08:59:00Z", "2026-01-05T09:20:00Z",
    "2026-01-05T10:00:00Z", "2026-01-05T13:30:00Z", "2026-01-03T09:40:00Z",
    "2026-01-03T11:00:00Z", "not a time",
]  # fmt: skip
PRIORITIES: list[Any] = [None, "", None, 0, 5, -2, 10, "high", "3"]
STEPS = [timedelta(0), timedelta(seconds=1), timedelta(minutes=7), timedelta(minutes=40)]


def _settings(tmp_path: Path) -> Settings:
    path = tmp_path / "sheetq.toml"
    path.write_text(
        "[types.job]\ncommand = ['true']\n"
        "[types.aged]\ncommand = ['true']\nmax_age = '2d'\n"
        "[types.urgent]\ncommand = ['true']\npriority = 7\n"
        "[types.short]\ncommand = ['true']\nlease = '5m'\ntimeout = '1m'\n"
    )
    return load_settings(config=str(path), env={}, require_spreadsheet=False)


def _queue(rng: random.Random, size: int) -> list[dict[str, Any]]:
    return [
        {
            "task_id": f"t_{n:03d}",
            "created_at": rng.choice(TIMES),
            "type": rng.choice(["job", "job", "aged", "urgent", "short", "nohandler"]),
            "status": rng.choice(STATUSES),
            "retry_count": rng.choice([0, 0, 1, 3]),
            "next_retry_at": rng.choice(TIMES),
            "idempotency_key": rng.choice(["", "", "", "k1", "k2", f"own{n}"]),
            "error_class": rng.choice(["", "", "", "transient", "permanent"]),
            "lease_owner": rng.choice(["", "run_old"]),
            "lease_until": rng.choice(TIMES),
            "alerted_at": rng.choice(["", "", "", "2026-01-01T00:00:00Z"]),
            "priority": rng.choice(PRIORITIES),
            "group": "",
        }
        for n in range(size)
    ]


def _apply(queue: list[dict[str, Any]], plan: BatchPlan) -> None:
    """The plan's write, then every claimed task finishes ``done`` (its result written)."""
    by_id = {row["task_id"]: row for row in queue}
    for update in plan.changes.updates:
        assert update.key is not None
        by_id[update.key].update(update.values)
    for claim in plan.claims:
        by_id[claim.row.task_id].update(
            status="done", lease_owner="", lease_until="", result=claim.row.task_id
        )


def _run(
    queue: list[dict[str, Any]], settings: Settings, seed: int, *, ahead: bool
) -> tuple[list[Any], int]:
    """Batches until a plan claims nothing: what each wrote, and how many plans were read."""
    rng = random.Random(seed)
    now = NOW
    left: Lookahead | None = None
    batches: list[Any] = []
    plans = 0
    for _ in range(200):
        usable = (
            ahead
            and left is not None
            and left.rest
            and (left.horizon is None or now < left.horizon)
        )
        if usable:
            assert left is not None
            plan = next_batch(left, settings=settings, now=now, run_id="run_t", batch_size=3)
        else:
            rows = parse_rows([Row(n + 2, dict(r)) for n, r in enumerate(queue)], UTC, "en_US")
            plan = plan_batch(
                rows,
                settings=settings,
                now=now,
                run_id="run_t",
                batch_size=3,
                rng=random.Random(1),
            )
            plans += 1
            left = plan.ahead
        batches.append(
            (
                now,
                [(c.row.task_id, c.previous, c.reconcile) for c in plan.claims],
                sorted((u.key or "", sorted(u.values.items())) for u in plan.changes.updates),
                [a.values for a in plan.changes.appends],
                plan.lease_until,
                dict(plan.without_handler),
            )
        )
        if not plan.claims:
            break
        _apply(queue, plan)
        now += rng.choice(STEPS)
    return batches, plans


@pytest.mark.parametrize("seed", range(40))
def test_next_batches_claim_what_a_new_plan_would(tmp_path: Path, seed: int) -> None:
    settings = _settings(tmp_path)
    queue = _queue(random.Random(seed), 40)
    again, plans_again = _run([dict(r) for r in queue], settings, seed, ahead=False)
    reused, plans_reused = _run([dict(r) for r in queue], settings, seed, ahead=True)
    assert reused == again
    assert plans_reused <= plans_again


def test_the_horizon_is_the_first_moment_a_decision_changes(tmp_path: Path) -> None:
    """A delayed task becoming due, a lease running out and a task reaching its ``max_age``
    each end the lookahead; the earliest of them is its horizon."""
    settings = _settings(tmp_path)
    base = {"retry_count": 0, "idempotency_key": "", "error_class": "", "alerted_at": ""}
    base |= {"type": "job", "status": "pending", "created_at": "2026-01-05T08:00:00Z"}
    queue = [
        {**base, "task_id": "t_1"},
        {**base, "task_id": "t_2", "next_retry_at": "2026-01-05T11:00:00Z"},
        {**base, "task_id": "t_3", "status": "processing", "lease_until": "2026-01-05T10:30:00Z"},
        {**base, "task_id": "t_4", "type": "aged", "created_at": "2026-01-03T10:00:00Z"},
    ]
    rows = parse_rows([Row(n + 2, r) for n, r in enumerate(queue)], UTC, "en_US")

    def horizon(kept: list[dict[str, Any]]) -> datetime | None:
        ids = {r["task_id"] for r in kept}
        plan = plan_batch(
            [r for r in rows if r.task_id in ids],
            settings=settings,
            now=NOW,
            run_id="run_t",
            batch_size=1,
            rng=random.Random(1),
        )
        assert plan.ahead is not None
        return plan.ahead.horizon

    assert horizon(queue) == datetime(2026, 1, 5, 10, 0, tzinfo=UTC)  # t_4 reaches 2 days
    assert horizon(queue[:3]) == datetime(2026, 1, 5, 10, 30, tzinfo=UTC)  # t_3's lease
    assert horizon(queue[:2]) == datetime(2026, 1, 5, 11, 0, tzinfo=UTC)  # t_2 becomes due
    max_age = settings.type_config("job").policy.max_age  # the default
    assert max_age is not None
    assert horizon(queue[:1]) == datetime(2026, 1, 5, 8, 0, tzinfo=UTC) + timedelta(seconds=max_age)


def test_groups_and_reconciles_leave_nothing_ahead(tmp_path: Path) -> None:
    """A grouped queue's next task depends on the last one's outcome: every batch plans."""
    settings = _settings(tmp_path)
    queue = _queue(random.Random(3), 20)
    queue[0].update(status="pending", group="order-1", next_retry_at="")
    rows = parse_rows([Row(n + 2, r) for n, r in enumerate(queue)], UTC, "en_US")
    plan = plan_batch(
        rows, settings=settings, now=NOW, run_id="run_t", batch_size=1, rng=random.Random(1)
    )
    assert plan.ahead is None
    assert Status.DONE in FINISHED
