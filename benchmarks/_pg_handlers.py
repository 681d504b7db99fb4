"""Handlers for the PostgreSQL benchmarks (``python = "_pg_handlers:…"`` in sheetq.toml)."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any


def noop(task: Any) -> str:
    """Does nothing: measures the queue, not the work."""
    return ""


def record(task: Any) -> str:
    """Appends ``task_id start_time`` to a file per process under ``BENCH_RECORD_DIR``: the
    record of which task ran where and when (to count tasks run twice, or lost)."""
    folder = Path(os.environ["BENCH_RECORD_DIR"])
    with (folder / f"{os.getpid()}.txt").open("a", encoding="utf-8") as out:
        out.write(f"{task.task_id} {time.time():.6f}\n")
    return ""
