"""What ``sheetq status`` counts over the Queue (DESIGN.md §8): one pass over parsed rows.

``tally_rows`` is the shared path (sheet, local, and PostgreSQL when forced); PostgreSQL
computes the same ``QueueTally`` with ``GROUP BY`` (``sheetq.postgres.reports``).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sheetq.config import Settings
from sheetq.model import Status
from sheetq.queue import QueueRow
from sheetq.times import Unparseable


@dataclass
class QueueTally:
    """Counts by status and by type × status; ``oldest`` is seconds (the largest age of a
    waiting row, at least 0); ``processing``: the processing rows (for ``sheetq.held``);
    ``created``: every row's ``created_at`` (for the cell-usage forecast)."""

    counts: Counter[str] = field(default_factory=Counter)
    by_type: dict[str, Counter[str]] = field(default_factory=lambda: defaultdict(Counter))
    strange: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    oldest: float | None = None
    due: int = 0
    owed: int = 0
    unrecognised: int = 0
    without_handler: int = 0
    total: int = 0
    unparseable: list[str] = field(default_factory=list)
    processing: list[QueueRow] = field(default_factory=list)
    created: list[datetime | None] = field(default_factory=list)


def tally_rows(rows: Iterable[QueueRow], settings: Settings, now: datetime) -> QueueTally:
    """Count ``rows`` as ``sheetq status`` reports them (unrecognised statuses apart, waiting
    rows' unparseable ``next_retry_at`` counted as due and listed)."""
    t = QueueTally()
    by_type: Any = t.by_type
    for row in rows:
        t.total += 1
        t.created.append(row.created)
        if row.status is None:
            t.unrecognised += 1
            t.strange[row.type or "(empty)"] += 1
            by_type[row.type or "(empty)"]  # the type has a line in the table even so
            continue
        name = str(row.status)
        t.counts[name] += 1
        by_type[row.type or "(empty)"][name] += 1
        if row.status is Status.PROCESSING:
            t.processing.append(row)
        if row.status in (Status.PENDING, Status.RETRY):
            created = row.created
            if created is not None:
                age = (now - created).total_seconds()
                t.oldest = max(0.0, age if t.oldest is None else max(t.oldest, age))
            if settings.type_config(row.type).handler is None:
                t.without_handler += 1
            when = row.next_retry_at
            if isinstance(when, Unparseable):
                t.unparseable.append(f"{row.task_id} ({when.text!r})")
            if row.status is Status.RETRY and (not isinstance(when, datetime) or when <= now):
                t.due += 1
        if row.status is Status.FAILED and not row.alerted_at:
            t.owed += 1
    return t
