"""A Python task handler for the benchmarks: instant, so the numbers are sheetq's own."""

from __future__ import annotations

from typing import Any


def ok(task: Any) -> str:
    """Done at once; the result is the task id."""
    return str(task.task_id)
