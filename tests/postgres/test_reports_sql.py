"""`status`, `stats`, `list` and `show` computed in SQL on PostgreSQL give, byte for byte,
the `--json` documents of the shared Python path (`SHEETQ_PG_REPORTS=python`) on the same
rows: a sweep over random queues (docs/design.md §11)."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

from sheetq.model import LOG_COLUMNS, QUEUE_COLUMNS
from tests.conftest import Result, run_cli, write_config

pytestmark = pytest.mark.postgres

NOW = datetime(2026, 3, 10, 12, 0, 0, 654321, tzinfo=UTC)
TYPES = ["job", "lead", "orphan", "", " job"]  # orphan: no handler; "" and " job": typed by hand
STATUSES = ["pending", "processing", "retry", "done", "failed", "skipped"]
CLASSES = ["", "transient", "Permanent ", "auth", "timeout", "  "]
RUNS = ["r_a", "r_b", ""]
CONFIG = "[types.job]\ncommand = ['true']\n\n[types.lead]\ncommand = ['true']\n"


def _when(rng: random.Random, back_hours: float, ahead_hours: float = 0.0) -> datetime:
    """A time between ``back_hours`` before NOW and ``ahead_hours`` after, with microseconds."""
    span = (back_hours + ahead_hours) * 3600
    return NOW - timedelta(hours=back_hours) + timedelta(seconds=rng.random() * span)


def _task(rng: random.Random, n: int) -> dict[str, Any]:
    status = rng.choice(STATUSES)
    created = _when(rng, 24 * 9, 0.5)
    row: dict[str, Any] = {c: "" for c in QUEUE_COLUMNS}
    row |= {
        "task_id": f"t_{n:04d}",
        "created_at": created,
        "type": rng.choice(TYPES),
        "payload_json": "{}",
        "status": status,
        "retry_count": rng.randint(0, 5),
        "idempotency_key": f"k{n}",
        "updated_at": created,
        "payload_hash": "h",
        "next_retry_at": None,
        "lease_until": None,
        "alerted_at": None,
    }
    if status in ("retry", "pending"):
        row["next_retry_at"] = rng.choice([None, _when(rng, 2, 2), NOW.replace(microsecond=0)])
    if status == "processing":
        row["lease_owner"] = rng.choice(RUNS)
        row["lease_until"] = rng.choice([None, _when(rng, 1, 1), _when(rng, 1, 1)])
    if status == "failed":
        row["alerted_at"] = rng.choice([None, _when(rng, 5)])
    if status in ("failed", "retry", "done"):
        row["error_class"] = rng.choice(CLASSES)
        row["last_error"] = "boom"
    return row


def _log(rng: random.Random, task: dict[str, Any]) -> list[dict[str, Any]]:
    """A task's history: enqueued (sometimes before the window, sometimes missing), then
    random events, some late outcomes refused (status ≠ event), some statuses typed oddly."""
    rows = []
    kind = task["type"] if rng.random() < 0.85 else rng.choice(TYPES)
    at = task["created_at"]
    if rng.random() < 0.9:
        rows.append({"event": "enqueued", "status": "pending", "ts": at})
    for _ in range(rng.randint(0, 6)):
        at = at + timedelta(seconds=rng.random() * 3600 * rng.choice([0.01, 1, 8]))
        event = rng.choice(
            ["claimed", "done", "done", "retry", "failed", "skipped", "expired", "recovered",
             "duplicate", "conflict", "requeued", "archived", "alerted", "enqueued"]
        )  # fmt: skip
        status = event if event in ("done", "retry", "failed", "skipped") else "processing"
        if event == "recovered":
            status = rng.choice(["done", "retry", "failed", "pending"])
        if rng.random() < 0.1:
            status = rng.choice(["DONE", " done", "retry", "failed ", "processing"])
        rows.append({"event": event, "status": status, "ts": at})
    for r in rows:
        r |= {
            "task_id": task["task_id"],
            "type": kind,
            "retry_count": 0,
            "message": "",
            "run_id": "r",
            "duration_ms": rng.choice([None, rng.randint(0, 9000)])
            if r["event"] == "done"
            else None,
        }
    return rows


def _load(url: str, seed: int) -> dict[str, list[str]]:
    """Fill a fresh database with a random queue; returns task ids to `show`."""
    rng = random.Random(seed)
    tasks = [_task(rng, n) for n in range(rng.randint(0, 70))]
    archived = [
        t for t in tasks if t["status"] in ("done", "failed", "skipped") and rng.random() < 0.3
    ]
    live = [t for t in tasks if t not in archived]
    ghosts = [_task(rng, 9000 + n) for n in range(rng.randint(0, 4))]  # only in the log
    log = [row for t in tasks + ghosts for row in _log(rng, t)]
    rng.shuffle(log)  # log order (id) is not time order: a person or a clock skew
    log.sort(key=lambda r: r["ts"] + timedelta(seconds=rng.choice([0, 0, 0, 30, -30])))
    with psycopg.connect(url, autocommit=False) as conn:
        for table, rows, cols in (
            ("sheetq_tasks", live, QUEUE_COLUMNS),
            ("sheetq_archive", archived, QUEUE_COLUMNS),
            ("sheetq_log", log, LOG_COLUMNS),
        ):
            names = ", ".join(f'"{c}"' for c in cols)
            with conn.cursor() as cur, cur.copy(f"COPY {table} (queue, {names}) FROM STDIN") as cp:
                for row in rows:
                    cp.write_row(["Queue", *(row[c] for c in cols)])
        if rng.random() < 0.5:  # a live run lease whose expiry matches one run's rows
            from sheetq.sheet.runner import lease_name, lease_token

            expires = rng.choice([NOW + timedelta(minutes=5), NOW - timedelta(minutes=5)])
            conn.execute(
                "INSERT INTO sheetq_leases (queue, name, token) VALUES ('Queue', %s, %s)",
                (lease_name("Queue"), lease_token(expires, rng)),
            )
            conn.execute(
                "UPDATE sheetq_tasks SET lease_until = %s WHERE lease_owner = 'r_a'", (expires,)
            )
    return {
        "live": [t["task_id"] for t in live[:2]],
        "archived": [t["task_id"] for t in archived[:1]],
        "ghost": [t["task_id"] for t in ghosts[:1]],
    }


REPORTS: list[list[str]] = [
    ["status", "--json"],
    ["status"],
    ["stats", "--json"],
    ["stats", "--json", "--since", "7d"],
    ["stats", "--json", "--since", "90d", "--type", "job"],
    ["stats", "--json", "--since", "3h", "--type", "orphan", "--type", ""],
    ["stats", "--json", "--since", "2026-03-09T10:30:00Z", "--type", "lead"],
    ["stats"],
    ["list", "--json"],
    ["list", "--json", "--limit", "0"],
    ["list", "--json", "--status", "failed", "--status", "RETRY", "--limit", "0"],
    ["list", "--json", "--type", "lead", "--type", " job", "--limit", "3"],
    ["list", "--status", "done"],
]


def _both(args: list[str], monkeypatch: pytest.MonkeyPatch) -> tuple[Result, Result]:
    monkeypatch.delenv("SHEETQ_PG_REPORTS", raising=False)
    in_sql = run_cli(args)
    monkeypatch.setenv("SHEETQ_PG_REPORTS", "python")
    in_python = run_cli(args)
    monkeypatch.delenv("SHEETQ_PG_REPORTS")
    return in_sql, in_python


def _sweep(seed: int, pg_server: Any, monkeypatch: pytest.MonkeyPatch) -> int:
    url = str(pg_server.new_database())
    monkeypatch.setenv("SHEETQ_DATABASE_URL", url)
    monkeypatch.setenv("SHEETQ_NOW", NOW.isoformat())
    monkeypatch.setenv("COLUMNS", "200")
    write_config(CONFIG)
    ids = _load(url, seed)
    shows = [["show", i, "--json"] for group in ids.values() for i in group]
    shows += [["show", "t_nowhere", "--json"], ["show", *(ids["live"][:1] or ["t_x"])]]
    compared = 0
    for args in REPORTS + shows:
        in_sql, in_python = _both(args, monkeypatch)
        assert (in_sql.code, in_sql.stdout, in_sql.stderr) == (
            in_python.code,
            in_python.stdout,
            in_python.stderr,
        ), f"seed {seed}: sheetq {' '.join(args)}"
        compared += 1
    return compared


@pytest.mark.parametrize("seed", range(3))
def test_sql_reports_equal_the_python_path(
    seed: int, pg_server: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every report (JSON and human) is identical in SQL and in Python on a random queue."""
    assert _sweep(seed, pg_server, monkeypatch) >= len(REPORTS)


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(3, 16))
def test_sql_reports_equal_the_python_path_sweep(
    seed: int, pg_server: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same comparison over 13 more random queues (16 in all; each ~7 s of CPU: the
    suite's time on 2 cores decides the count)."""
    assert _sweep(seed, pg_server, monkeypatch) >= len(REPORTS)


def test_percentile_disc_is_the_nearest_rank_percentile(pg_url: str) -> None:
    """PostgreSQL's percentile_disc(0.5/0.95) is sheetq.stats.percentile for 1..400 values."""
    from sheetq.stats import percentile

    rng = random.Random(7)
    with psycopg.connect(pg_url) as conn:
        for n in range(1, 401):
            values = [rng.randint(0, 50) for _ in range(n)]
            got = conn.execute(
                "SELECT percentile_disc(0.5) WITHIN GROUP (ORDER BY v),"
                " percentile_disc(0.95) WITHIN GROUP (ORDER BY v) FROM unnest(%s::int[]) v",
                (values,),
            ).fetchone()
            assert got == (percentile(values, 50), percentile(values, 95)), n


def test_the_whitespace_sql_strips_is_what_python_strips() -> None:
    """reports.WS is exactly the characters str.strip() removes (str.isspace)."""
    import sys

    from sheetq.postgres.reports import WS

    assert "".join(c for c in map(chr, range(sys.maxunicode + 1)) if c.isspace()) == WS
