"""CPU time and peak memory of `process`, `status` and `stats` on large local workbooks.

Each measurement is a fresh child process (``_child.py``) on a fresh copy of the
workbook, so one run's work (10 tasks done) or caches never help the next.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from benchmarks._google import bench_config
from benchmarks._report import Measure
from benchmarks._workbook import NOW, build_local, with_due

CHILD = Path(__file__).resolve().parent / "_child.py"
PRIVATE = ("SHEETQ_", "TELEGRAM_")
COMMANDS = (
    ("process, nothing due", ("process", "--json"), "idle"),
    ("process, batch of 10 due", ("process", "--json"), "due"),
    ("status", ("status", "--json"), "idle"),
    ("stats", ("stats", "--json"), "idle"),
)


def child(args: Sequence[str], db: Path, work: Path) -> dict[str, Any]:
    """One command in a fresh interpreter on ``db``; its cost (see ``_child.py``)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(PRIVATE)}
    env.pop("GOOGLE_APPLICATION_CREDENTIALS", None)
    env.update(
        SHEETQ_SPREADSHEET=f"local:{db}",
        SHEETQ_NOW=NOW.strftime("%Y-%m-%dT%H:%M:%SZ"),
        SHEETQ_CONFIG=str(work / "sheetq.toml"),
        SHEETQ_LOCK_DIR=str(work / "locks"),
    )
    done = subprocess.run(
        [sys.executable, str(CHILD), *args],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        return {"code": done.returncode or 1, "error": done.stderr.strip()[-200:]}
    doc: dict[str, Any] = json.loads(lines[-1])
    return doc


def cpu_and_memory(
    sizes: Sequence[int], repeats: int, progress: Callable[[str], None]
) -> tuple[list[Measure], list[Measure]]:
    """(CPU rows for every size, peak-memory rows for the largest size)."""
    cpu_rows: list[Measure] = []
    memory: list[Measure] = []
    with tempfile.TemporaryDirectory(prefix="sheetq-bench-") as tmp:
        work = Path(tmp)
        (work / "sheetq.toml").write_text(bench_config())
        for size in sizes:
            progress(f"building a local workbook: {size:,} Queue rows, {4 * size:,} log rows")
            sources = {"idle": build_local(work / f"idle-{size}.db", size)}
            sources["due"] = with_due(sources["idle"], work / f"due-{size}.db")
            for name, args, source in COMMANDS:
                progress(f"{name} @ {size:,} rows")
                runs = []
                for _ in range(repeats):
                    db = work / "run.db"
                    shutil.copyfile(sources[source], db)
                    runs.append(child(args, db, work))
                    if runs[-1]["code"] != 0:
                        break
                label = f"{name} @ {size:,} rows"
                if runs[-1]["code"] != 0:
                    note = f"failed: {runs[-1].get('error', '')}"[:90]
                    cpu_rows.append(Measure("2 cpu (local)", label, "n/a", "CPU s", note))
                    continue
                if source == "due" and runs[-1].get("result", {}).get("done") != 10:
                    note = f"expected 10 tasks done, got {runs[-1].get('result')}"[:90]
                    cpu_rows.append(Measure("2 cpu (local)", label, "n/a", "CPU s", note))
                    continue
                cpu = statistics.median(r["cpu_s"] for r in runs)
                wall = statistics.median(r["wall_s"] for r in runs)
                peak = max(r["peak_rss_mb"] for r in runs)
                base = min(r["rss_after_imports_mb"] for r in runs)
                cpu_rows.append(
                    Measure(
                        "2 cpu (local)",
                        label,
                        round(cpu, 3),
                        "CPU s",
                        f"median of {repeats}; wall {wall:.2f} s",
                    )
                )
                if size == max(sizes) and name != "stats":
                    memory.append(
                        Measure(
                            "4 memory",
                            f"{name} @ {size:,} rows",
                            round(peak, 1),
                            "MB peak RSS",
                            f"{base:.0f} MB after imports",
                        )
                    )
            for path in sources.values():
                path.unlink()
    return cpu_rows, memory
