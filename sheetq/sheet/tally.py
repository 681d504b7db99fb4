"""What ``sheetq status`` counts over a sheet's Queue: one pass over parsed rows.

``tally_rows`` gives the port's ``QueueTally`` (PostgreSQL computes the same with
``GROUP BY``), and what the sheet engine needs besides: the ``processing`` rows (to tell a
person which runs are gone, ``sheetq.sheet.held``) and every row's ``created_at`` (the
cell-usage forecast, ``sheetq.sheet.cells``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sheetq.config import Settings
from sheetq.model import Status
from sheetq.policy import due_since
from sheetq.port import QueueTally
from sheetq.sheet.plan import QueueRow
from sheetq.times import Unparseable


@dataclass
class Tallied:
    """The tally, the processing rows, and every row's ``created_at``."""

    tally: QueueTally
    processing: list[QueueRow] = field(default_factory=list)
    created: list[datetime | None] = field(default_factory=list)


def tally_rows(rows: Iterable[QueueRow], settings: Settings, now: datetime) -> Tallied:
    """Count ``rows`` as ``sheetq status`` reports them (unrecognised statuses apart, waiting
    rows' unparseable ``next_retry_at`` counted as due and listed). ``oldest`` is how long
    the longest-due waiting task has been due; a task not due yet (delayed, backing off)
    is not waiting for a run."""
    out = Tallied(QueueTally())
    t = out.tally
    by_type: Any = t.by_type
    for row in rows:
        t.total += 1
        out.created.append(row.created)
        if row.status is None:
            t.unrecognised += 1
            t.strange[row.type or "(empty)"] += 1
            by_type[row.type or "(empty)"]  # the type has a line in the table even so
            continue
        name = str(row.status)
        t.counts[name] += 1
        by_type[row.type or "(empty)"][name] += 1
        if row.status is Status.PROCESSING:
            out.processing.append(row)
        if row.status in (Status.PENDING, Status.RETRY):
            when = row.next_retry_at
            since = due_since(row.created, when)
            if since is not None and since <= now:
                age = (now - since).total_seconds()
                t.oldest = max(0.0, age if t.oldest is None else max(t.oldest, age))
            if settings.type_config(row.type).handler is None:
                t.without_handler += 1
            if isinstance(when, Unparseable):
                t.unparseable.append(f"{row.task_id} ({when.text!r})")
            if row.priority_typo:
                level = settings.type_config(row.type).priority
                t.bad_priorities.append((row.task_id, row.priority_typo, level))
            if row.status is Status.RETRY and (not isinstance(when, datetime) or when <= now):
                t.due += 1
        if row.status is Status.FAILED and not row.alerted_at:
            t.owed += 1
    return out
