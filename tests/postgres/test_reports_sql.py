"""The reports and operator commands on PostgreSQL over random queues (docs/design.md §10,
§11): the statements of requeue, skip, archive, the alert claim, status and stats choose and
count what the shared Python rules do over the same rows
(``test_requeue_skip_archive_alerts_status_and_stats_pick_what_the_python_rules_pick``); every
report's output is stable from one run to the next (the sweep)."""

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
        "priority": rng.choice([0, 0, 5, -1]),
        "group": rng.choice(["", "", "g1", "g2"]),
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


# a failure's class at the head of its message, as sheetq writes it, and near misses
MESSAGES = [
    "", "", "permanent: exit 65 (EX_DATAERR): VAT", "transient: 503", "auth: 401",
    "rate_limited: 429", " unknown: timeout", "Permanent: typed", "permanent:no space",
    "permanent", "expired: old", "nosuch: x", "lost outcome; retrying", "config: no cmd",
]  # fmt: skip


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
            "message": rng.choice(MESSAGES),
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
    """The report twice: it must not change between two runs on an unchanged queue (the
    rules themselves are compared with Python's below)."""
    first = run_cli(args)
    assert first.code == (2 if "t_nowhere" in args else 0), first.stderr
    return first, run_cli(args)


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
        first, again = _both(args, monkeypatch)
        assert (first.code, first.stdout, first.stderr) == (
            again.code,
            again.stdout,
            again.stderr,
        ), f"seed {seed}: sheetq {' '.join(args)}"
        compared += 1
    return compared


@pytest.mark.parametrize("seed", range(3))
def test_sql_reports_run_and_are_stable(
    seed: int, pg_server: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every report (JSON and human) runs on a random queue and says the same twice."""
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


# --- the same rules in SQL and in the shared Python, on the same generated queues ----------


def _cells(url: str) -> dict[str, list[Any]]:
    """The queue's tables as the cell rows the shared Python reads (``codec.from_db``)."""
    from psycopg.rows import dict_row

    from sheetq.model import Row
    from sheetq.postgres.codec import values_from_record

    out: dict[str, list[Any]] = {}
    with psycopg.connect(url, row_factory=dict_row) as conn:
        for table, cols, order in (
            ("sheetq_tasks", QUEUE_COLUMNS, "created_at, task_id"),
            ("sheetq_archive", QUEUE_COLUMNS, "created_at, task_id"),
            ("sheetq_log", LOG_COLUMNS, "id"),
        ):
            names = ", ".join(f'"{c}"' for c in cols)
            records = conn.execute(
                f"SELECT {names} FROM {table} WHERE queue = 'Queue' ORDER BY {order}"
            ).fetchall()
            out[table] = [Row(n, values_from_record(r, cols)) for n, r in enumerate(records, 2)]
    return out


@pytest.mark.parametrize("seed", range(6))
def test_requeue_skip_archive_alerts_status_and_stats_pick_what_the_python_rules_pick(
    seed: int, pg_server: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    _agree(seed, pg_server, monkeypatch)


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(6, 16))
def test_the_sql_and_python_rules_agree_sweep(
    seed: int, pg_server: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same comparison over 10 more random queues (16 in all)."""
    _agree(seed, pg_server, monkeypatch)


def _agree(seed: int, pg_server: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """On a random queue, the SQL statements of PostgreSQL (requeue, skip, archive dry
    runs; the alert claim's owed tasks and their order; status's tally; stats) choose and
    count what the shared Python rules choose over the same rows (``plan_requeue``,
    ``plan_skip``, ``archive.select``, ``sheet.alerts.owed``, ``tally_rows``,
    ``stats.compute``): types and error classes as Python strips them, times to the
    second."""
    from sheetq.clock import FixedClock
    from sheetq.config import load_settings
    from sheetq.model import Status
    from sheetq.port import AlertReport, Delivery
    from sheetq.postgres.engine import PgQueue
    from sheetq.sheet.alerts import owed
    from sheetq.sheet.archive import select
    from sheetq.sheet.operations import plan_requeue, plan_skip
    from sheetq.sheet.plan import parse_rows
    from sheetq.sheet.tally import tally_rows
    from sheetq.stats import compute

    url = str(pg_server.new_database())
    monkeypatch.setenv("SHEETQ_DATABASE_URL", url)
    write_config(CONFIG)
    _load(url, seed)
    settings = load_settings()
    cells = _cells(url)
    rows = parse_rows(cells["sheetq_tasks"], UTC, "en_US")
    rng = random.Random(seed)
    clock = FixedClock(NOW)
    queue = PgQueue(settings)
    try:
        every = [r.task_id for r in rows]
        for _ in range(12):
            ids = (
                rng.sample(every, min(len(every), rng.randint(0, 4)))
                + ["t_nowhere"][: rng.randint(0, 1)]
            )
            statuses = rng.sample(list(Status), rng.randint(1, 3))
            types = rng.sample(["job", "lead", "orphan", "", "nope"], rng.randint(0, 2))
            classes = rng.sample(["transient", "permanent", "auth", ""], rng.randint(0, 2))
            got = queue.requeue(
                task_ids=ids,
                statuses=statuses,
                types=types,
                error_classes=classes,
                reset_attempts=False,
                dry_run=True,
                clock=clock,
            )
            want, _ = plan_requeue(
                rows,
                settings=settings,
                now=NOW,
                task_ids=ids,
                statuses=statuses,
                types=types,
                error_classes=classes,
            )
            assert [s.task_id for s in got.picked] == [r.task_id for r in want], (ids, statuses)
            assert [(s.type, s.error_class, s.retry_count) for s in got.picked] == [
                (r.type, r.error_class, r.retry_count) for r in want
            ]
            skipped = queue.skip(task_ids=ids, reason="", dry_run=True, clock=clock)
            want, _ = plan_skip(rows, settings=settings, now=NOW, task_ids=ids)
            assert [s.task_id for s in skipped.picked] == [r.task_id for r in want]
        archived_ids = {r.text("task_id") for r in cells["sheetq_archive"]}
        for days in (0.0, 0.5, 2.0, 3.25, 8.0):
            for include_failed in (False, True):
                report = queue.archive(
                    clock=clock,
                    older_than=days * 86400,
                    log_older_than=None,
                    include_failed=include_failed,
                    dry_run=True,
                    lock_wait=0,
                ).report
                assert report is not None
                want = select(
                    rows,
                    cutoff=NOW - timedelta(days=days),
                    include_failed=include_failed,
                    archived_ids=archived_ids,
                    tz=UTC,
                    locale="en_US",
                )
                assert report.task_ids == [r.task_id for r in want.moves], days
                assert report.already_archived == want.already_archived
                assert report.unalerted == want.unalerted  # failed, alert owed: kept
        offered: list[list[str]] = []

        def send(items: Any, title: str) -> Any:
            offered.append([i.task_id for i in items])
            return AlertReport([], []), Delivery(sent=False, problem="network")

        queue.send_alerts(send, clock=clock)
        want_owed = [i.task_id for i in owed(rows, link=lambda row, task_id: "")]
        assert offered == ([want_owed] if want_owed else [])

        tally = queue.status(clock=clock).tally
        expected = tally_rows(rows, settings, NOW).tally
        for name in (
            "counts",
            "oldest",
            "due",
            "owed",
            "without_handler",
            "total",
            "by_priority",
            "blocked",
        ):
            assert getattr(tally, name) == getattr(expected, name), name
        assert {k: dict(v) for k, v in tally.by_type.items()} == {
            k: dict(v) for k, v in expected.by_type.items()
        }
        for since_days, types in ((1.0, ()), (7.0, ("job",)), (90.0, ("orphan", ""))):
            since = NOW - timedelta(days=since_days)
            got_stats = queue.stats(since=since, now=NOW, types=types)
            want_stats = compute(
                cells["sheetq_log"],
                cells["sheetq_tasks"],
                cells["sheetq_archive"],
                since=since,
                now=NOW,
                types=types,
            )
            assert got_stats.as_json() == want_stats.as_json(), (since_days, types)
    finally:
        queue.close()
