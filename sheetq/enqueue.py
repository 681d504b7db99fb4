"""Enqueue as a library call: keyed tasks in, one read of the keys, one atomic write out.

Google budget (DESIGN.md §6): open 1 + keys of Queue and QueueArchive 1 +
the write 1 = 3 requests, for one task or a 1,000-line batch.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

from sheetq.config import Settings
from sheetq.idempotency import canonical_json, check_size, derive_key, payload_hash
from sheetq.model import new_run_id
from sheetq.queue import KEY_COLUMNS, Enqueued, NewTask, index_keys, plan_enqueue
from sheetq.store.base import Read, Store, WorkbookInfo


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
    store.apply(changes, verify_rows=False)
    return results
