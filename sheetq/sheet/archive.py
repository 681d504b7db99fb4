"""``sheetq archive``: move finished rows from Queue to QueueArchive (docs/design.md §2, §8).

Which rows: ``done`` and ``skipped`` — and ``failed`` with ``include_failed`` — whose
``updated_at`` (or, when that is empty or unreadable, ``created_at``) is before the
cutoff. Never ``pending``, ``processing``, ``retry`` or a status sheetq does not know.

How: per task, its whole row is appended to QueueArchive **by column name** (every named
column, a manager's own ones too, values as read: text stays text, numbers numbers), its
Queue row is deleted (re-located by ``task_id``) and one ``archived`` QueueLog row is
added — all in one atomic ``store.apply``. A Queue cell whose column QueueArchive lacks
cannot be kept; the caller warns about it once.

Chunks: Google refuses a request body over 10,485,760 bytes, and a batchUpdate costs
about 1.2 kB of JSON per archived task (its row, its log row, its deletion), so a
20,000-row archive (~25 MB) cannot be one request. Rows are therefore moved in writes of
at most ``MAX_WRITE_BYTES`` of estimated JSON, each atomic on its own. Every write is
planned from a fresh read of Queue (so it copies current values, and skips rows a person
changed meanwhile); a failure between two writes leaves the earlier ones complete and the
rest untouched in Queue, so running ``sheetq archive`` again finishes the job — nothing is
lost and nothing is doubled. One write per 20,000-row archive is not possible within
Google's cap; the local backend, which has no cap, is chunked the same way so both behave
alike.

Google requests: open 1, then per write: read 1 (Queue, and QueueArchive's ``task_id``) and
write 1, which uses the row numbers of that read — 3 for an archive of up to ~6,000 small
rows, 7 for 20,000 rows.

The planning functions (``select``, ``plan_chunk``) are pure; ``run_archive`` drives them
through the storage port.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta, tzinfo
from json.encoder import encode_basestring_ascii

from sheetq.config import Settings
from sheetq.errors import LeaseConflict, StoreError
from sheetq.model import LOG_COLUMNS, Event, Status
from sheetq.port import ArchiveReport
from sheetq.sheet.plan import QueueRow, as_int, log_row, parse_rows
from sheetq.sheet.store import (
    AppendRow,
    CellValue,
    ChangeSet,
    DeleteRow,
    LeaseChange,
    MoveRow,
    Read,
    Row,
    Store,
    WorkbookInfo,
    cell_text,
)
from sheetq.times import parse_ts, zone

MAX_WRITE_BYTES = 9_000_000  # estimated batchUpdate JSON per write; Google's cap is 10,485,760
ARCHIVABLE = (Status.DONE, Status.SKIPPED)

# Sizes of the JSON the Google adapter sends (gspread: json.dumps, ", " and ": " separators).
_CELL = len('{"userEnteredValue": {"stringValue": }}, ')  # + the encoded value
_EMPTY_CELL = len("{}, ")
_ROW = len('{"values": []}, ')
_DELETE = 140  # one deleteDimension per run of adjacent rows
_COPY = 330  # one copyPaste (source and destination GridRange)
_LOG_WIDTH = len(LOG_COLUMNS)


@dataclass
class Selection:
    """Queue rows to move, in sheet order, the finished rows left behind (task ids), and
    the failed rows moved with their alert still owed."""

    moves: list[QueueRow] = field(default_factory=list)
    already_archived: list[str] = field(default_factory=list)
    ambiguous: list[str] = field(default_factory=list)
    undated: list[str] = field(default_factory=list)
    unalerted: list[str] = field(default_factory=list)

    @property
    def by_status(self) -> Counter[str]:
        return Counter(str(r.status) for r in self.moves)


@dataclass
class Chunk:
    """One atomic write: the rows it moves, its change set, and the Queue columns whose
    non-empty cells it had to drop (QueueArchive has no such column)."""

    rows: list[QueueRow]
    changes: ChangeSet
    dropped: set[str] = field(default_factory=set)
    estimated_bytes: int = 0


def moved_at(row: QueueRow, tz: tzinfo, locale: str) -> datetime | None:
    """When a finished row last changed: ``updated_at``, else ``created_at`` (UTC), else None."""
    when = parse_ts(row.raw.values.get("updated_at"), tz, locale)
    if isinstance(when, datetime):
        return when
    return row.created


def select(
    rows: Sequence[QueueRow],
    *,
    cutoff: datetime,
    include_failed: bool,
    archived_ids: Collection[str],
    tz: tzinfo,
    locale: str,
) -> Selection:
    """The finished rows last changed before ``cutoff``, in sheet order.

    Left in Queue (reported, never moved): a task id already in QueueArchive (moving it
    would double it), a task id on more than one Queue row (re-location by task id would
    be ambiguous), and a finished row with neither a readable ``updated_at`` nor
    ``created_at`` (its age is unknown). ``unalerted``: the failed rows it moves whose
    alert is still owed (blank ``alerted_at``, docs/design.md §9): once archived, no run
    alerts them, so the command says so.
    """
    statuses = set(ARCHIVABLE) | ({Status.FAILED} if include_failed else set())
    seen = Counter(r.task_id for r in rows)
    picked = Selection()
    for row in sorted(rows, key=lambda r: r.row):
        if row.status not in statuses:
            continue
        when = moved_at(row, tz, locale)
        if when is None:
            picked.undated.append(row.task_id)
            continue
        if when >= cutoff:
            continue
        if seen[row.task_id] > 1:
            picked.ambiguous.append(row.task_id)
        elif row.task_id in archived_ids:
            picked.already_archived.append(row.task_id)
        else:
            picked.moves.append(row)
            if row.status is Status.FAILED and not row.alerted_at:
                picked.unalerted.append(row.task_id)
    picked.ambiguous = sorted(set(picked.ambiguous))
    return picked


def _value_bytes(value: CellValue) -> int:
    if isinstance(value, str):
        return _CELL + len(encode_basestring_ascii(value))
    return _CELL + len(repr(value))


def _row_bytes(values: dict[str, CellValue], width: int) -> int:
    empty = max(0, width - len(values))
    return _ROW + _EMPTY_CELL * empty + sum(_value_bytes(v) for v in values.values())


def archive_values(
    row: QueueRow, archive_columns: Collection[str]
) -> tuple[dict[str, CellValue], set[str]]:
    """The row's non-empty cells keyed by the archive's column names, and the names of the
    Queue columns with a value that QueueArchive lacks (those cells are dropped)."""
    values: dict[str, CellValue] = {}
    dropped: set[str] = set()
    for name, value in row.raw.values.items():
        if value is None or value == "":
            continue
        if name in archive_columns:
            values[name] = value
        else:
            dropped.add(name)
    return values, dropped


def plan_chunk(
    moves: Sequence[QueueRow],
    *,
    settings: Settings,
    archive_columns: Collection[str],
    now: datetime,
    run_id: str,
    max_bytes: int = MAX_WRITE_BYTES,
    copy_runs: int = 1,
    logged: Collection[str] = (),
) -> Chunk:
    """The first rows of ``moves`` that fit one write of at most ``max_bytes`` (always at
    least one row): a move per row (copied by position with ``copy_runs`` copy requests per
    run of adjacent rows, then deleted) and an ``archived`` QueueLog row per task not
    already in ``logged`` (a task whose earlier move was put back is not logged twice)."""
    chunk = Chunk([], ChangeSet())
    log_rows: list[AppendRow] = []
    message = f"moved to {settings.archive_sheet}"
    previous = -1
    for row in moves:
        _values, dropped = archive_values(row, archive_columns)
        entry = log_row(
            now,
            row.task_id,
            row.type,
            Event.ARCHIVED,
            str(row.status),
            row.retry_count,
            message,
            run_id,
            worksheet=settings.log_sheet,
        )
        size = _row_bytes(dict(entry.values), _LOG_WIDTH) if row.task_id not in logged else 0
        size += (_DELETE + _COPY * copy_runs) if row.row != previous + 1 else 0
        if chunk.rows and chunk.estimated_bytes + size > max_bytes:
            break
        previous = row.row
        chunk.rows.append(row)
        chunk.estimated_bytes += size
        chunk.dropped |= dropped
        if row.task_id not in logged:
            log_rows.append(entry)
        chunk.changes.moves.append(
            MoveRow(settings.queue_sheet, settings.archive_sheet, row.task_id, row.row)
        )
    chunk.changes.appends = log_rows
    return chunk


def column_runs(source: Sequence[str], dest: Sequence[str]) -> int:
    """How many copy requests one run of rows takes: runs of columns that sit side by side
    in both worksheets (1 when QueueArchive has Queue's column order)."""
    where = {name: i for i, name in enumerate(dest) if name}
    runs, last = 0, None
    for i, name in enumerate(source):
        j = where.get(name) if name else None
        if j is None:
            last = None
            continue
        if last is None or (i, j) != (last[0] + 1, last[1] + 1):
            runs += 1
        last = (i, j)
    return max(runs, 1)


def whole_rows(
    misplaced: Sequence[dict[str, CellValue]],
    read: Sequence[Row],
    archive_columns: Collection[str],
) -> list[dict[str, CellValue]]:
    """The rows an archive write carried by mistake, made whole again: the copy carried only
    the columns QueueArchive has, so a cell of a column it lacks (a manager's ``note``) is
    taken from ``read``, the Queue read the write was planned from. A row is found there
    by its ``task_id``; a row without one (a manager's own row) by the cells the copy
    carried, each read row used once. A row that was not in Queue when it was read (a
    person added it after) keeps what the copy carried."""
    by_id: dict[str, Row] = {}
    keyless: list[Row] = []
    for row in read:
        task_id = row.text("task_id").strip()
        if task_id:
            by_id.setdefault(task_id, row)
        else:
            keyless.append(row)

    def carried(values: Mapping[str, CellValue]) -> dict[str, str]:
        return {
            name: cell_text(value)
            for name, value in values.items()
            if name in archive_columns and not name.startswith("_") and cell_text(value) != ""
        }

    out: list[dict[str, CellValue]] = []
    for found in misplaced:
        task_id = cell_text(found.get("task_id")).strip()
        source = by_id.get(task_id) if task_id else None
        if source is None and not task_id:
            cells = carried(found)
            source = next((r for r in keyless if carried(r.values) == cells), None)
            if source is not None:
                keyless.remove(source)
        whole = dict(found)
        if source is not None:
            for name, value in source.values.items():
                if name and name not in archive_columns and cell_text(value) != "":
                    whole.setdefault(name, value)
        out.append(whole)
    return out


def put_back(
    misplaced: Sequence[dict[str, CellValue]],
    *,
    settings: Settings,
    now: datetime,
    run_id: str,
) -> ChangeSet:
    """Rows an archive write carried by mistake (a person sorted or inserted rows between
    the read and the write; made whole by ``whole_rows``): appended back to Queue, every
    named cell, removed from QueueArchive, and a ``recovered`` log row each (with its own
    status, so the log still agrees)."""
    changes = ChangeSet()
    for found in misplaced:
        values = {k: v for k, v in found.items() if not k.startswith("_")}
        task_id = cell_text(values.get("task_id")).strip()
        changes.appends.append(AppendRow(settings.queue_sheet, values))
        changes.deletes.append(
            DeleteRow(str(found["_worksheet"]), task_id or None, int(str(found["_row"])))
        )
        if task_id:
            changes.appends.append(
                log_row(
                    now,
                    task_id,
                    cell_text(values.get("type")),
                    Event.RECOVERED,
                    cell_text(values.get("status")).strip().lower(),
                    as_int(values.get("retry_count")),
                    f"put back from {settings.archive_sheet}: archive moved it by mistake "
                    "(rows moved while it wrote)",
                    run_id,
                    worksheet=settings.log_sheet,
                )
            )
    return changes


# --- the run, through the storage port --------------------------------------------------


def run_archive(
    store: Store,
    info: WorkbookInfo,
    settings: Settings,
    *,
    now: datetime,
    older_than: float,
    include_failed: bool,
    dry_run: bool,
    run_id: str,
    lease_name: str,
    max_bytes: int | None = None,
) -> ArchiveReport:
    """Move finished rows older than ``older_than`` seconds, one atomic write per chunk.

    ``info`` is the opened workbook (its schema already checked). Refuses to write while
    a ``process`` run holds the queue's lease ``lease_name`` (``report.locked`` says so):
    each write carries a lease check, so it also fails, changing nothing, if a run took
    the lease meanwhile. A ``StoreError`` after some writes names how many rows moved.
    """
    from sheetq.sheet.runner import lease_expiry

    tz, locale = zone(info.time_zone), info.locale
    report = ArchiveReport(dry_run, now - timedelta(seconds=older_than))
    held = info.leases.get(lease_name)
    if held is not None and not dry_run:
        expiry = lease_expiry(held)
        if expiry is None or expiry > now:
            report.locked = "a sheetq process run holds this queue's lease"
            return report
    first = True
    logged: set[str] = set()
    stalled = 0
    while True:
        queue_snap, archive_snap = store.read(
            [Read(settings.queue_sheet), Read(settings.archive_sheet, ("task_id",))]
        )
        archived_ids = {r.text("task_id").strip() for r in archive_snap.rows}
        archived_ids.discard("")
        picked = select(
            parse_rows(queue_snap.rows, tz, locale),
            cutoff=report.cutoff,
            include_failed=include_failed,
            archived_ids=archived_ids,
            tz=tz,
            locale=locale,
        )
        if first:
            report.already_archived = picked.already_archived
            report.ambiguous = picked.ambiguous
            report.undated = picked.undated
            report.unalerted = picked.unalerted
        columns = {name for name in archive_snap.header if name}
        moves = picked.moves
        if dry_run:
            for row in moves:
                report.dropped_columns |= archive_values(row, columns)[1]
            report.by_status = picked.by_status
            report.task_ids = [r.task_id for r in moves]
            return report
        if not moves:
            return report
        chunk = plan_chunk(
            moves,
            settings=settings,
            archive_columns=columns,
            now=now,
            run_id=run_id,
            max_bytes=max_bytes or MAX_WRITE_BYTES,
            copy_runs=column_runs(queue_snap.header, archive_snap.header),
            logged=logged,
        )
        # A stale lease (its run died) is removed by the first write; later writes only check.
        chunk.changes.lease = LeaseChange(lease_name, None, held if first else None)
        first = False
        try:
            # planned from a read made moments ago: it locates the rows for the write
            result = store.apply(chunk.changes, baseline=(queue_snap, archive_snap))
            logged.update(r.task_id for r in chunk.rows)
            if result.misplaced:
                whole = whole_rows(result.misplaced, queue_snap.rows, columns)
                back = put_back(whole, settings=settings, now=now, run_id=run_id)
                store.apply(back)
                report.put_back.extend(
                    cell_text(m.get("task_id")).strip() or "(a row without task_id)"
                    for m in result.misplaced
                )
        except LeaseConflict:
            report.locked = "a sheetq process run took this queue's lease"
            return report
        except StoreError as exc:
            if report.writes:
                raise StoreError(
                    f"{exc.message} — {report.archived} row(s) were archived before this "
                    "failure, the rest are untouched in the queue; run `sheetq archive` "
                    "again to move them"
                ) from None
            raise
        report.writes += 1
        gone = set(result.missing)
        report.vanished.extend(sorted(gone))
        report.dropped_columns |= chunk.dropped
        arrived = set(result.moved)
        for row in chunk.rows:
            if row.task_id in arrived:
                report.by_status[str(row.status)] += 1
                report.task_ids.append(row.task_id)
        if len(arrived) + len(gone) < len(chunk.rows):
            # rows moved under the write: those not carried are still in Queue; go again
            stalled += 1
            if stalled > 3:
                raise StoreError(
                    "rows kept moving while archive wrote (a person sorting or inserting "
                    f"rows); {report.archived} row(s) were archived; run `sheetq archive` "
                    "again"
                )
            continue
        if len(chunk.rows) == len(moves):
            return report
