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
from sheetq.order import blocked
from sheetq.policy import due_since
from sheetq.port import BlockedGroup, DueAtPriority, QueueTally
from sheetq.sheet.plan import QueueRow, group_members
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
    rows = list(rows)
    levels: dict[int, DueAtPriority] = {}
    ages: dict[str, float] = {}  # task id → seconds due, of the due waiting tasks
    behind = blocked_members(rows, settings)  # shown under their blocked group instead
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
                ages[row.task_id] = max(0.0, age)
                if row.task_id not in behind:  # a blocked group's tasks are shown under it
                    _count_due(levels, row.level(settings), row.task_id, max(0.0, age))
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
    t.by_priority = [levels[p] for p in sorted(levels, reverse=True)]
    t.blocked = blocked_groups(rows, settings, ages)
    return out


def _count_due(levels: dict[int, DueAtPriority], level: int, task_id: str, age: float) -> None:
    """One more due task at ``level`` (``age``: seconds due), kept if it is the oldest."""
    seen = levels.get(level)
    if seen is None:
        levels[level] = DueAtPriority(level, 1, task_id, age)
        return
    seen.due += 1
    if age > seen.oldest or (age == seen.oldest and task_id < seen.task_id):
        seen.task_id, seen.oldest = task_id, age


def blocked_members(rows: list[QueueRow], settings: Settings) -> set[str]:
    """The ids of the waiting tasks of groups a failed task blocks (``sheetq.order.blocked``):
    ``status`` shows them under their group, not as due by priority."""
    out: set[str] = set()
    for members in group_members(rows, settings).values():
        if blocked(members) is not None:
            out.update(m.task_id for m in members if m.status in (Status.PENDING, Status.RETRY))
    return out


def blocked_groups(
    rows: list[QueueRow], settings: Settings, ages: dict[str, float]
) -> list[BlockedGroup]:
    """Groups held by a failed task whose type says ``group_blocks_on_failure``, by group
    (``ages``: task id → seconds due, for the waiting tasks' oldest)."""
    by_id = {row.task_id: row for row in rows}
    out = []
    for group, members in sorted(group_members(rows, settings).items()):
        holder = blocked(members)
        if holder is None:
            continue
        row = by_id[holder.task_id]
        waiting = [m.task_id for m in members if m.status in (Status.PENDING, Status.RETRY)]
        due = [ages[i] for i in waiting if i in ages]
        out.append(
            BlockedGroup(
                group,
                row.task_id,
                row.type,
                str(row.status),
                row.error_class,
                len(waiting),
                max(due) if due else None,
            )
        )
    return out
