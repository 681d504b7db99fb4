"""Enqueue on a sheet: keyed tasks in, one read of the keys, one atomic write out.

``plan_enqueue`` is the pure part: new rows for new keys, ``duplicate``/``conflict`` log
rows for known ones, grouped into writes under Google's request cap; ``enqueue`` drives it
through the store.

Google budget (docs/design.md §6): opening and the keys of Queue and QueueArchive 1 (one
``spreadsheets.get``, ``Store.open_with``; 1 more when a person moved a key column away from
where ``init`` puts it) + the write 1 = 2 requests, for one task or a 1,000-line batch. A
batch over ~9 MB of request JSON (Google refuses a body over 10,485,760 bytes) takes one more
write per ~9 MB: 300 lines of 40,000 characters (12 MB) are 2 writes, 3 requests.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime

from sheetq.accept import Enqueued, KnownKey, NewTask, decide_keys
from sheetq.config import Settings
from sheetq.model import QUEUE_COLUMNS, Event, Status, new_run_id
from sheetq.sheet.plan import log_row
from sheetq.sheet.store import (
    AppendRow,
    CellValue,
    ChangeSet,
    Read,
    Row,
    Snapshot,
    Store,
    WorkbookInfo,
)
from sheetq.times import format_not_before, format_ts

KEY_COLUMNS = ("task_id", "idempotency_key", "payload_hash", "status")
# Google refuses a request body over 10,485,760 bytes; a write is planned to stay under this.
MAX_WRITE_BYTES = 9_000_000
# JSON the Google adapter sends around values (gspread: json.dumps, ", " and ": " separators).
_CELL = len('{"userEnteredValue": {"stringValue": }}, ')
_EMPTY_CELL = len("{}, ")
_ROW = len('{"values": []}, ')
_WRITE = 1_000  # {"requests": […]} and one appendCells per worksheet


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


def append_bytes(values: Mapping[str, CellValue], width: int) -> int:
    """Bytes of one appended row in the JSON body of a Google ``batchUpdate``: each value as
    ``{"userEnteredValue": {"stringValue": …}}`` with JSON escaping (``ensure_ascii``, as
    requests encodes it: a Cyrillic letter is 6 bytes, an emoji 12), ``{}`` for each of the
    ``width`` columns left empty. Exact to within a few bytes per row."""
    filled = [v for v in values.values() if v is not None and v != ""]
    return (
        _ROW
        + _EMPTY_CELL * max(0, width - len(filled))
        + sum(_CELL + len(json.dumps(v)) for v in filled)
    )


def plan_enqueue(
    tasks: Sequence[NewTask],
    known: Mapping[str, KnownKey],
    *,
    settings: Settings,
    now: datetime,
    run_id: str = "",
    max_write_bytes: int | None = None,
    widths: Mapping[str, int] | None = None,
) -> tuple[list[Enqueued], list[ChangeSet]]:
    """New rows for new keys; ``duplicate`` / ``conflict`` log rows for known ones
    (``sheetq.accept.decide_keys``).

    The changes come as writes in line order, each at most ``max_write_bytes`` of Google
    request JSON (``None``: one write); a line's Queue row and its log row always share a
    write, so a failure between two writes leaves whole lines enqueued, and running the
    batch again finds them as duplicates. ``widths``: worksheet → columns, for the size
    estimate.
    """
    owners: dict[str, str] = {}  # type → its owner (type_config copies the defaults)
    stamp = format_ts(now)
    lines: list[tuple[AppendRow | None, AppendRow]] = []
    decided = decide_keys(tasks, known)
    for one in decided:
        task = one.task
        row: AppendRow | None = None
        if one.found is None:
            if task.type not in owners:
                owners[task.type] = settings.type_config(task.type).owner
            row = AppendRow(
                settings.queue_sheet,
                {
                    "task_id": one.task_id,
                    "created_at": stamp,
                    "type": task.type,
                    "payload_json": task.canonical,
                    "status": str(Status.PENDING),
                    "retry_count": 0,
                    "next_retry_at": format_not_before(task.not_before) if task.not_before else "",
                    "idempotency_key": task.key,
                    "updated_at": stamp,
                    "payload_hash": task.payload_hash,
                    "owner": owners[task.type],
                    "priority": task.priority,
                    "group": task.group,
                },
            )
        status = one.found.status if one.found is not None else str(Status.PENDING)
        entry = log_row(
            now,
            one.task_id,
            task.type,
            Event(one.outcome),
            status,
            0,
            one.message(),
            run_id=run_id,
            worksheet=settings.log_sheet,
        )
        lines.append((row, entry))
    return [one.enqueued() for one in decided], _writes(lines, max_write_bytes, widths or {})


def _writes(
    lines: Sequence[tuple[AppendRow | None, AppendRow]],
    max_bytes: int | None,
    widths: Mapping[str, int],
) -> list[ChangeSet]:
    """Consecutive lines grouped into writes of at most ``max_bytes`` (a line never split;
    ``None``: one write, sizes not estimated)."""
    if max_bytes is None:
        rows = [row for row, _ in lines if row is not None]
        return [ChangeSet(appends=rows + [entry for _, entry in lines])] if lines else []
    groups: list[list[tuple[AppendRow | None, AppendRow]]] = []
    size = 0
    for row, entry in lines:
        cost = sum(
            append_bytes(a.values, widths.get(a.worksheet, len(a.values)))
            for a in (row, entry)
            if a is not None
        )
        if not groups or (max_bytes is not None and size + cost > max_bytes - _WRITE):
            groups.append([])
            size = 0
        groups[-1].append((row, entry))
        size += cost
    writes = []
    for group in groups:
        # Queue rows first so a reader never sees a log row for a task that is not there yet.
        appends = [row for row, _ in group if row is not None] + [entry for _, entry in group]
        writes.append(ChangeSet(appends=appends))
    return writes


def key_reads(settings: Settings) -> list[Read]:
    """The read enqueue plans from: ``KEY_COLUMNS`` of Queue, then of QueueArchive."""
    return [Read(settings.queue_sheet, KEY_COLUMNS), Read(settings.archive_sheet, KEY_COLUMNS)]


def open_for_enqueue(store: Store, settings: Settings) -> tuple[WorkbookInfo, list[Snapshot]]:
    """The workbook and ``key_reads``, in one request on Google when the key columns are
    where ``init`` puts them (``QUEUE_COLUMNS`` order), two when a person moved one."""
    layout = {settings.queue_sheet: QUEUE_COLUMNS, settings.archive_sheet: QUEUE_COLUMNS}
    return store.open_with(key_reads(settings), layout=layout)


def enqueue(
    store: Store,
    info: WorkbookInfo,
    settings: Settings,
    tasks: Sequence[NewTask],
    *,
    now: datetime,
    run_id: str | None = None,
    max_write_bytes: int = MAX_WRITE_BYTES,
    snapshots: Sequence[Snapshot] | None = None,
) -> list[Enqueued]:
    """Add the new tasks and log duplicates/conflicts: one read of the keys (Queue and
    QueueArchive), then one atomic write, or several under Google's request cap.

    ``info`` is the opened workbook (its schema already checked); ``snapshots``: the
    ``key_reads`` read with it (``open_for_enqueue``), so Google does not read them again.
    The read, the plan and the writes go through ``store.read_then_apply``: on the local
    backend one transaction that reads the keys again inside it, so two racing enqueues of
    one key never both insert (docs/design.md §4).
    """
    widths = {
        title: len(info.sheet(title).header) for title in (settings.queue_sheet, settings.log_sheet)
    }
    run = run_id or new_run_id("enqueue")
    results: list[Enqueued] = []

    def plan(snapshots: list[Snapshot]) -> list[ChangeSet]:
        queue_snap, archive_snap = snapshots
        known = index_keys(queue_snap.rows, archive_snap.rows)
        planned, writes = plan_enqueue(
            tasks,
            known,
            settings=settings,
            now=now,
            run_id=run,
            max_write_bytes=max_write_bytes,
            widths=widths,
        )
        results[:] = planned
        return writes

    store.read_then_apply(key_reads(settings), plan, snapshots=snapshots)
    return results
