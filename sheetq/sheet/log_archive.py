"""``sheetq archive --log-older-than D``: move old QueueLog rows to QueueLogArchive.

QueueLog rows have no unique key (a row is told apart only by all its cells), so rows are
moved as **a block from the top**: QueueLog is append-only and in time order, so the rows
older than the cutoff are the first ones. The block is moved by ``Store.move_block`` (one
atomic copy-and-delete by position on Google, then a read-back that compares each arrived
row whole with what was read); rows that moved under the write stay where they are and the
next write takes them, and rows that were not meant but arrived (a person's sort put them
under the write) are put back at the end of QueueLog. If a row older than the cutoff sits
below a newer one (a person sorted QueueLog another way), nothing is moved and the command
says which row: sort QueueLog by ``ts``, oldest first, and run it again.

Writes: at most ``MAX_WRITE_BYTES`` of row data each (on Google the request itself carries
no values, only positions; the bound keeps each write's read-back under Google's 10 MB
too). A failure between two writes leaves the earlier blocks moved and the rest in
QueueLog; running the command again moves the rest, never a row twice.

Google requests: per write, 1 read (QueueLog, and QueueLogArchive's ``ts``/``task_id`` for
its last row) + 1 write + 1 read-back; plus one ``spreadsheets.get`` for QueueLogArchive's
header.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta

from sheetq.config import Settings
from sheetq.errors import StoreError, UsageError
from sheetq.model import LOG_COLUMNS
from sheetq.port import LogArchiveReport
from sheetq.sheet.archive import MAX_WRITE_BYTES, _row_bytes
from sheetq.sheet.store import (
    AppendRow,
    ChangeSet,
    DeleteRow,
    Read,
    Row,
    Store,
    WorkbookInfo,
    cell_text,
)
from sheetq.times import parse_ts, zone


def old_block(rows: list[Row], cutoff: datetime, info: WorkbookInfo, title: str) -> list[Row]:
    """The consecutive rows from row 2 whose ``ts`` is before ``cutoff``. Raises
    ``UsageError`` when a row older than the cutoff sits below a newer (or undated) one:
    the log is not in time order and a block from the top would not be the old rows."""
    tz, locale = zone(info.time_zone), info.locale
    block: list[Row] = []
    stop: Row | None = None
    for row in sorted(rows, key=lambda r: r.number):
        when = parse_ts(row.values.get("ts"), tz, locale)
        old = isinstance(when, datetime) and when < cutoff
        if stop is None and old and row.number == 2 + len(block):
            block.append(row)
        elif stop is None:
            stop = row
        elif old:
            raise UsageError(
                f"worksheet '{title}' is not in time order: row {row.number} (ts "
                f"{row.text('ts')!r}) is older than the cutoff but comes after row "
                f"{stop.number} (ts {stop.text('ts')!r}); sort {title} by ts, oldest first, "
                "and run `sheetq archive --log-older-than` again. Nothing was moved."
            )
    return block


def _put_back(store: Store, source: str, dest: str, strays: Sequence[Row]) -> None:
    """Rows a block move carried by mistake (a person sorted the log under the write): back
    at the end of ``source``, every cell as it arrived, and out of ``dest`` (by the rows they
    arrived at), in one atomic write."""
    changes = ChangeSet()
    for row in strays:
        values = {k: v for k, v in row.values.items() if cell_text(v) != ""}
        changes.appends.append(AppendRow(source, values))
        changes.deletes.append(DeleteRow(dest, None, row.number))
    store.apply(changes)


def run_log_archive(
    store: Store,
    info: WorkbookInfo,
    settings: Settings,
    *,
    now: datetime,
    older_than: float,
    dry_run: bool,
    max_bytes: int | None = None,
) -> LogArchiveReport:
    """Move QueueLog rows older than ``older_than`` seconds, a block per atomic write."""
    report = LogArchiveReport(now - timedelta(seconds=older_than), dry_run)
    source, dest = settings.log_sheet, settings.log_archive_sheet
    limit = max_bytes or MAX_WRITE_BYTES
    stalled = 0
    while True:
        log_snap, dest_snap = store.read([Read(source), Read(dest, ("ts", "task_id"))])
        try:
            block = old_block(log_snap.rows, report.cutoff, info, source)
        except UsageError as exc:
            if not report.writes:
                raise
            moved = f"{report.archived} old row(s) were moved to {dest} before it was sorted"
            if report.put_back:
                moved += f"; {report.put_back} newer row(s) carried along were put back in {source}"
            raise UsageError(  # a person sorted the log while this run wrote
                exc.message.replace("Nothing was moved.", moved + ".")
            ) from None
        if dry_run:
            report.archived = len(block)
            return report
        if not block:
            return report
        chunk: list[Row] = []
        size = 0
        for row in block:
            cost = _row_bytes({k: v for k, v in row.values.items() if v}, len(LOG_COLUMNS))
            if chunk and size + cost > limit:
                break
            chunk.append(row)
            size += cost
        to_end = max(
            (r.number for r in dest_snap.rows if r.text("ts") or r.text("task_id")), default=1
        )
        try:
            done = store.move_block(source, dest, chunk, to_end)
        except StoreError as exc:
            if report.writes:
                raise StoreError(
                    f"{exc.message} — {report.archived} log row(s) were moved to {dest} before "
                    f"this failure, the rest are untouched in {source}; run the command again "
                    "to move them"
                ) from None
            raise
        report.writes += 1
        report.archived += done.moved
        report.stray += done.stray
        if done.strays:
            _put_back(store, source, dest, done.strays)
            report.put_back += len(done.strays)
        if done.moved < len(chunk):
            stalled += 1
            if stalled > 3:
                raise StoreError(
                    f"rows kept moving in {source} while archive wrote; {report.archived} log "
                    "row(s) were moved; run the command again"
                )
        elif len(chunk) == len(block):
            return report
