"""Enqueue (DESIGN.md §4): keyed tasks in, one read of the keys, one atomic write out.

``plan_enqueue`` is the pure part: new rows for new keys, ``duplicate``/``conflict`` log
rows for known ones; ``enqueue`` drives it through the storage port.

Google budget (DESIGN.md §6): open 1 + keys of Queue and QueueArchive 1 +
the write 1 = 3 requests, for one task or a 1,000-line batch.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sheetq.config import Settings
from sheetq.idempotency import canonical_json, check_size, derive_key, payload_hash
from sheetq.model import Event, Status, new_run_id, new_task_id
from sheetq.queue import log_row
from sheetq.store.base import AppendRow, ChangeSet, Read, Row, Store, WorkbookInfo
from sheetq.times import format_ts

KEY_COLUMNS = ("task_id", "idempotency_key", "payload_hash", "status")


@dataclass
class NewTask:
    """A parsed, keyed task waiting to be enqueued. ``line`` is 1-based for ``--jsonl``."""

    type: str
    canonical: str
    payload_hash: str
    key: str
    line: int | None = None
    not_before: datetime | None = None


@dataclass
class Enqueued:
    outcome: str  # enqueued | duplicate | conflict
    task_id: str
    key: str
    status: str
    line: int | None = None
    existing_hash: str = ""


@dataclass
class KnownKey:
    task_id: str
    payload_hash: str
    status: str
    archived: bool = False


def index_keys(queue: Iterable[Row], archive: Iterable[Row]) -> dict[str, KnownKey]:
    """Idempotency key → the earliest task holding it, in Queue then QueueArchive."""
    known: dict[str, KnownKey] = {}
    for rows, archived in ((queue, False), (archive, True)):
        for row in rows:
            key = row.text("idempotency_key").strip()
            task_id = row.text("task_id").strip()
            if key and task_id and key not in known:
                known[key] = KnownKey(
                    task_id,
                    row.text("payload_hash").strip(),
                    Status.parse(row.text("status")) or row.text("status"),
                    archived,
                )
    return known


def plan_enqueue(
    tasks: Sequence[NewTask],
    known: Mapping[str, KnownKey],
    *,
    settings: Settings,
    now: datetime,
    run_id: str = "",
) -> tuple[list[Enqueued], ChangeSet]:
    """New rows for new keys; ``duplicate`` / ``conflict`` log rows for known ones (§4).

    Lines of one batch are checked against each other too.
    """
    seen = dict(known)
    results: list[Enqueued] = []
    changes = ChangeSet()
    stamp = format_ts(now)
    queue_rows: list[AppendRow] = []
    for task in tasks:
        found = seen.get(task.key)
        if found is None:
            task_id = new_task_id()
            config = settings.type_config(task.type)
            queue_rows.append(
                AppendRow(
                    settings.queue_sheet,
                    {
                        "task_id": task_id,
                        "created_at": stamp,
                        "type": task.type,
                        "payload_json": task.canonical,
                        "status": str(Status.PENDING),
                        "retry_count": 0,
                        "next_retry_at": format_ts(task.not_before) if task.not_before else "",
                        "idempotency_key": task.key,
                        "updated_at": stamp,
                        "payload_hash": task.payload_hash,
                        "owner": config.owner,
                    },
                )
            )
            changes.appends.append(
                log_row(
                    now,
                    task_id,
                    task.type,
                    Event.ENQUEUED,
                    Status.PENDING,
                    0,
                    f"delayed until {format_ts(task.not_before)}" if task.not_before else "",
                    run_id=run_id,
                    worksheet=settings.log_sheet,
                )
            )
            seen[task.key] = KnownKey(task_id, task.payload_hash, str(Status.PENDING))
            results.append(Enqueued("enqueued", task_id, task.key, str(Status.PENDING), task.line))
            continue
        where = " (archived)" if found.archived else ""
        line = f" (line {task.line})" if task.line else ""
        if found.payload_hash == task.payload_hash:
            results.append(Enqueued("duplicate", found.task_id, task.key, found.status, task.line))
            changes.appends.append(
                log_row(
                    now,
                    found.task_id,
                    task.type,
                    Event.DUPLICATE,
                    found.status,
                    0,
                    f"same key and payload enqueued again{line}{where}; nothing added",
                    run_id=run_id,
                    worksheet=settings.log_sheet,
                )
            )
        else:
            results.append(
                Enqueued(
                    "conflict", found.task_id, task.key, found.status, task.line, found.payload_hash
                )
            )
            changes.appends.append(
                log_row(
                    now,
                    found.task_id,
                    task.type,
                    Event.CONFLICT,
                    found.status,
                    0,
                    f"same key {task.key!r}, different payload{line}{where}: "
                    f"{task.payload_hash[:19]}… vs {found.payload_hash[:19]}…; nothing added",
                    run_id=run_id,
                    worksheet=settings.log_sheet,
                )
            )
    # Queue rows first so a reader never sees a log row for a task that is not there yet.
    changes.appends[:0] = queue_rows
    return results, changes


def prepare(
    task_type: str,
    payloads: Iterable[tuple[int | None, dict[str, Any]]],
    settings: Settings,
    *,
    key: str | None = None,
    source: str = "payload",
) -> list[NewTask]:
    """Canonicalise, size-check and key each payload. ``InputError`` names the line."""
    config = settings.type_config(task_type)
    tasks: list[NewTask] = []
    for line, body in payloads:
        canonical = canonical_json(body)
        check_size(canonical, where=f"{source} line {line}" if line else source)
        tasks.append(
            NewTask(
                task_type,
                canonical,
                payload_hash(canonical),
                derive_key(task_type, body, canonical, explicit=key, key_fields=config.key_fields),
                line,
            )
        )
    return tasks


def enqueue(
    store: Store,
    info: WorkbookInfo,
    settings: Settings,
    tasks: Sequence[NewTask],
    *,
    now: datetime,
    run_id: str | None = None,
) -> list[Enqueued]:
    """Add the new tasks and log duplicates/conflicts, in one atomic write.

    ``info`` is the opened workbook (its schema already checked). Keys are
    checked against Queue and QueueArchive.
    """
    queue_snap, archive_snap = store.read(
        [Read(settings.queue_sheet, KEY_COLUMNS), Read(settings.archive_sheet, KEY_COLUMNS)]
    )
    known = index_keys(queue_snap.rows, archive_snap.rows)
    results, changes = plan_enqueue(
        tasks, known, settings=settings, now=now, run_id=run_id or new_run_id("enqueue")
    )
    store.apply(changes)
    return results
