"""``status``, ``stats``, ``list`` and ``show`` on PostgreSQL: computed in SQL
(``sheetq.postgres.reports``) against the shared Python path over every row
(``SHEETQ_PG_REPORTS=python``), end to end through the CLI (one subprocess per run,
median of ``--repeat``). Prints one table.

    python benchmarks/pg_reports.py                       # 100,000 tasks, 400,000 log rows
    python benchmarks/pg_reports.py --tasks 20000 --log 80000
    SHEETQ_TEST_DATABASE_URL=postgresql://… python benchmarks/pg_reports.py   # your server

The queue: tasks of four types over the last 10 days in every status, four log rows per
task (enqueued, claimed, then done/retry/failed…), loaded with ``COPY``.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

NOW = datetime(2026, 3, 10, 12, 0, tzinfo=UTC)
STATUSES = ["done"] * 6 + ["failed", "skipped", "pending", "retry", "processing"]
OUTCOME = {"done": "done", "failed": "failed", "skipped": "skipped", "retry": "retry"}


def load(url: str, tasks: int, log: int, rng: random.Random) -> str:
    """Fill the queue; returns one task id (for ``show``)."""
    import psycopg

    from sheetq.model import LOG_COLUMNS, QUEUE_COLUMNS

    per_task = max(1, log // max(1, tasks))
    with psycopg.connect(url) as conn, conn.cursor() as cur:
        names = ", ".join(f'"{c}"' for c in QUEUE_COLUMNS)
        lnames = ", ".join(f'"{c}"' for c in LOG_COLUMNS)
        written = 0
        with cur.copy(f"COPY sheetq_tasks (queue, {names}) FROM STDIN") as cp:
            for n in range(tasks):
                status = rng.choice(STATUSES)
                created = NOW - timedelta(seconds=rng.random() * 10 * 86400)
                row = {c: "" for c in QUEUE_COLUMNS} | {
                    "task_id": f"t_{n:08d}",
                    "created_at": created,
                    "type": rng.choice(["lead", "mail", "sync", "orphan"]),
                    "payload_json": "{}",
                    "status": status,
                    "retry_count": 0,
                    "next_retry_at": created + timedelta(minutes=5) if status == "retry" else None,
                    "idempotency_key": f"k{n}",
                    "updated_at": created,
                    "error_class": "transient" if status in ("failed", "retry") else "",
                    "payload_hash": "h",
                    "lease_until": NOW + timedelta(minutes=5) if status == "processing" else None,
                    "lease_owner": "r_1" if status == "processing" else "",
                    "alerted_at": None,
                }
                cp.write_row(["Queue", *(row[c] for c in QUEUE_COLUMNS)])
        rng.seed(1)
        with cur.copy(f"COPY sheetq_log (queue, {lnames}) FROM STDIN") as cp:
            for n in range(tasks):
                created = NOW - timedelta(seconds=rng.random() * 10 * 86400)
                events = ["enqueued", "claimed", rng.choice(list(OUTCOME)), "claimed", "done"]
                for i, event in enumerate(events[:per_task]):
                    if written >= log:
                        break
                    status = OUTCOME.get(event, "pending" if event == "enqueued" else "processing")
                    values = {
                        "ts": created + timedelta(seconds=30 * i),
                        "task_id": f"t_{n:08d}",
                        "type": "lead",
                        "event": event,
                        "status": status,
                        "retry_count": 0,
                        "message": "",
                        "run_id": "r_1",
                        "duration_ms": rng.randint(5, 900) if event == "done" else None,
                    }
                    cp.write_row(["Queue", *(values[c] for c in LOG_COLUMNS)])
                    written += 1
        conn.execute("ANALYZE")
    return f"t_{tasks // 2:08d}"


def timed(url: str, work: Path, args: list[str], python: bool, repeat: int) -> float:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SHEETQ_", "TELEGRAM_"))}
    env |= {
        "SHEETQ_DATABASE_URL": url,
        "SHEETQ_NOW": NOW.isoformat(),
        "SHEETQ_LOCK_DIR": str(work / "locks"),
        "PYTHONPATH": str(ROOT),
    }
    if python:
        env["SHEETQ_PG_REPORTS"] = "python"
    times = []
    for _ in range(repeat):
        begun = time.perf_counter()
        done = subprocess.run(
            [sys.executable, "-m", "sheetq", *args],
            env=env,
            cwd=work,
            capture_output=True,
            text=True,
            check=False,
        )
        times.append(time.perf_counter() - begun)
        if done.returncode != 0:
            raise RuntimeError(f"sheetq {' '.join(args)}: exit {done.returncode}: {done.stderr}")
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=100_000)
    parser.add_argument("--log", type=int, default=400_000)
    parser.add_argument("--repeat", type=int, default=3)
    opts = parser.parse_args()
    from tests.pgserver import PgServer

    with tempfile.TemporaryDirectory(prefix="sheetq-reports-") as tmp:
        work = Path(tmp)
        server = PgServer(work / "pgdata")
        try:
            url = str(server.new_database())
            task = load(url, opts.tasks, opts.log, random.Random(0))
            print(f"{opts.tasks:,} tasks, {opts.log:,} log rows; median of {opts.repeat}, wall s")
            print(f"{'command':34} {'Python':>8} {'SQL':>8}")
            for args in (
                ["status", "--json"],
                ["stats", "--json"],
                ["stats", "--json", "--since", "7d", "--type", "lead"],
                ["list", "--json"],
                ["list", "--json", "--status", "failed", "--limit", "0"],
                ["show", task, "--json"],
                ["--version"],
            ):
                before = timed(url, work, args, True, opts.repeat)
                after = timed(url, work, args, False, opts.repeat)
                print(f"{' '.join(args):34} {before:8.2f} {after:8.2f}", flush=True)
        finally:
            server.stop()


if __name__ == "__main__":
    main()
