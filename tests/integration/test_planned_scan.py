"""The local workbook's `process` scan reads only the rows a batch plan can need.

``Read.planned`` is filtered in SQL (``sheetq.sheet.sqlite``) by the rule of
``sheetq.sheet.plan.plan_needs``; both run on the same generated queues here, and a plan made
from the filtered rows must equal the plan made from every row.
"""

from __future__ import annotations

import random
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from sheetq.config import Settings, load_settings
from sheetq.model import LOG_COLUMNS, QUEUE_COLUMNS, cell_text
from sheetq.sheet.alerts import owed
from sheetq.sheet.plan import SCAN_COLUMNS, parse_rows, plan_batch, plan_needs, shared_keys
from sheetq.sheet.sqlite import SqliteStore
from sheetq.sheet.store import WHITESPACE, AppendRow, ChangeSet, Read, Row, Snapshot
from tests.conftest import LocalBook, run_cli, write_config

NOW = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
KELVIN_SKIPPED = "s\u212aipped"  # Python lower-cases it to "skipped"; SQLite does not
STATUSES: list[Any] = [
    "pending", "retry", "processing", "done", "failed", "skipped", " Done", "DONE ", "Failed",
    "\u00a0done", "done\u3000", "\tskipped\n", "dnoe", "fail", "", None, 5, 2.0, KELVIN_SKIPPED,
    "pending ", "Retry", "PROCESSING",
]  # fmt: skip
KEYS: list[Any] = [
    "", None, " ", "k1", " k1", "k1\u00a0", "k2", "K2", 5, 5.0, "5", " 5", 5.5, "5.5", "k3",
    "\u3000k3",
]  # fmt: skip
ALERTED: list[Any] = [
    "", None, " ", "\t", "\u00a0", "2026-01-01T00:00:00Z", 0, 45000.5, "yes"
]  # fmt: skip
TIMES: list[Any] = [
    "", None, "2026-01-05T08:00:00Z", "2026-01-01T00:00:00Z", "2025-06-01T00:00:00Z",
    "2026-01-05T10:00:00Z", "not a time", 46000.25,
]  # fmt: skip
ERRORS: list[Any] = ["", None, "transient", "permanent", "unknown", "duplicate", "Expired"]
TYPES: list[Any] = ["job", "job", "aged", "nohandler", "", "strict"]
GROUPS: list[Any] = ["", "", None, " ", "\u00a0", "g1", "g1", "g2", 5]  # docs/design.md §14


def _settings(tmp_path: Path) -> Settings:
    path = tmp_path / "sheetq.toml"
    path.write_text(
        "[types.job]\ncommand = ['true']\n[types.aged]\ncommand = ['true']\nmax_age = '2d'\n"
        "[types.strict]\ncommand = ['true']\ngroup_blocks_on_failure = true\n"
    )
    return load_settings(config=str(path), env={}, require_spreadsheet=False)


def _queue(rng: random.Random, size: int) -> list[dict[str, Any]]:
    rows = []
    for n in range(size):
        rows.append(
            {
                "task_id": "" if rng.random() < 0.05 else f"t_{n:03d}",
                "created_at": rng.choice(TIMES),
                "type": rng.choice(TYPES),
                "status": rng.choice(STATUSES),
                "retry_count": rng.choice([0, 1, 4, "2", ""]),
                "next_retry_at": rng.choice(TIMES),
                "idempotency_key": rng.choice(KEYS),
                "error_class": rng.choice(ERRORS),
                "lease_owner": rng.choice(["", "run_x"]),
                "lease_until": rng.choice(TIMES),
                "alerted_at": rng.choice(ALERTED),
                "group": rng.choice(GROUPS),
                "payload_json": "{}",
            }
        )
    return rows


def _store(path: Path, rows: list[dict[str, Any]]) -> SqliteStore:
    store = SqliteStore(path, create=True)
    store.ensure_worksheets({"Queue": QUEUE_COLUMNS, "QueueLog": LOG_COLUMNS})
    store.apply(ChangeSet(appends=[AppendRow("Queue", r) for r in rows]))
    return store


def _plan(snapshot: Snapshot, settings: Settings, batch: int) -> tuple[Any, ...]:
    rows = parse_rows(snapshot.rows, UTC, "en_US")
    plan = plan_batch(
        rows,
        settings=settings,
        now=NOW,
        run_id="run_t",
        batch_size=batch,
        rng=random.Random(7),
    )
    return (
        [(u.key, dict(u.values)) for u in plan.changes.updates],
        [dict(a.values) for a in plan.changes.appends],
        [(c.row.task_id, c.previous, c.reconcile) for c in plan.claims],
        plan.lease_until,
        (plan.recovered, plan.expired, plan.requeued, plan.skipped, plan.failed),
        (plan.unrecognised, dict(plan.without_handler), plan.invalid_times),
        sorted(a.task_id for a in owed(rows, link=lambda row, task_id: "")),
    )


def test_whitespace_is_what_python_strips() -> None:
    """SQL's trim() is given exactly the characters ``str.strip()`` removes."""
    assert set(WHITESPACE) == {c for c in map(chr, range(0x110000)) if c.isspace()}


@pytest.mark.parametrize("seed", range(8))
def test_sql_filter_and_python_rule_agree_and_plan_the_same(tmp_path: Path, seed: int) -> None:
    """On random queues (typed statuses, unicode spaces, numbers in cells, shared keys, owed
    alerts): SQL keeps exactly the rows ``plan_needs`` keeps, and the plan and owed alerts
    made from them equal those made from every row."""
    settings = _settings(tmp_path)
    rng = random.Random(seed)
    left_out = 0
    for case in range(25):
        store = _store(tmp_path / f"q{case}.db", _queue(rng, rng.randint(1, 40)))
        try:
            full, planned = store.read(
                [Read("Queue", SCAN_COLUMNS), Read("Queue", SCAN_COLUMNS, planned=True)]
            )
        finally:
            store.close()
        assert full.whole and not planned.whole
        shared = shared_keys(full.rows)
        expected = [r.number for r in full.rows if plan_needs(r.values, shared)]
        assert [r.number for r in planned.rows] == expected, (seed, case)
        left_out += len(full.rows) - len(planned.rows)
        for batch in (1, 10):
            assert _plan(planned, settings, batch) == _plan(full, settings, batch), (seed, case)
    assert left_out > 0  # the sweep exercises the filter, not only the rows it keeps


def test_rule_keeps_each_kind_of_row_a_plan_needs() -> None:
    """The rule, case by case: a finished row is left out unless it owes an alert or shares
    its key; anything not finished (a typo, a number) is kept."""
    shared = {"k"}

    def needs(**values: Any) -> bool:
        return plan_needs(values, shared)

    assert not needs(status="done", idempotency_key="")
    assert not needs(status=" Skipped ", idempotency_key="other")
    assert not needs(status="failed", alerted_at="2026-01-01T00:00:00Z")
    assert needs(status="failed", alerted_at="\u00a0")  # blank to Python: owed
    assert needs(status="done", idempotency_key=" k")  # shared key: may decide a winner
    assert needs(status="dnoe") and needs(status=5) and needs(status=KELVIN_SKIPPED)
    assert needs(status="pending") and needs(status="processing")


def test_process_skips_a_later_duplicate_of_a_finished_row(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Through the CLI: a pending row whose key an earlier `done` row holds is skipped as its
    duplicate (the finished row is read because the key is shared); a finished row with a key
    of its own is not read and not touched."""
    book = LocalBook(tmp_path / "book.db")
    monkeypatch.setenv("SHEETQ_SPREADSHEET", book.spreadsheet)
    monkeypatch.setenv("SHEETQ_NOW", "2026-01-05T09:00:00Z")
    write_config("[types.job]\ncommand = ['true']\n")
    assert run_cli(["init"]).code == 0
    assert run_cli(["enqueue", "job", '{"n": 1}', "--key", "same"]).code == 0
    assert run_cli(["enqueue", "job", '{"n": 2}', "--key", "own"]).code == 0
    assert run_cli(["process"]).code == 0
    header, *body = book.grid("Queue")
    status, key = header.index("status"), header.index("idempotency_key")
    assert [(r[key], r[status]) for r in body] == [("job:same", "done"), ("job:own", "done")]
    # a person pastes a later row with the finished task's key, status pending
    later = ["t_later" if c == "task_id" else "" for c in header]
    later[header.index("created_at")] = "2026-01-05T09:30:00Z"
    later[header.index("payload_json")] = "{}"
    later[header.index("type")] = "job"
    later[status], later[key] = "pending", " job:same"
    store = SqliteStore(book.path)
    try:
        store.write_rows("Queue", [later], start_row=len(body) + 2)
    finally:
        store.close()
    monkeypatch.setenv("SHEETQ_NOW", "2026-01-05T10:00:00Z")
    done = run_cli(["process", "--json"])
    assert done.code == 0, done.stderr
    rows = {r[header.index("task_id")]: r for r in book.grid("Queue")[1:]}
    assert rows["t_later"][status] == "skipped"
    assert "duplicate of" in cell_text(rows["t_later"][header.index("last_error")])


def test_a_planned_read_of_a_sheet_without_the_filter_columns_reads_every_row(
    tmp_path: Path,
) -> None:
    """A worksheet lacking a column the rule needs is read whole (never a guess)."""
    store = SqliteStore(tmp_path / "q.db", create=True)
    try:
        store.ensure_worksheets({"Queue": ("task_id", "status")})
        store.apply(ChangeSet(appends=[AppendRow("Queue", {"task_id": "t", "status": "done"})]))
        (snap,) = store.read([Read("Queue", None, planned=True)])
    finally:
        store.close()
    assert snap.whole and snap.rows == [Row(2, {"task_id": "t", "status": "done"})]
