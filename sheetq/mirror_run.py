"""One pass of the spreadsheet mirror (docs/design.md §12): read, apply managers' edits, write.

``mirror_pass(settings, clock)`` is what ``sheetq mirror`` runs, and what ``sheetq worker``
calls every ``[mirror] interval``. Its Sheets requests:

1. one ``spreadsheets.get`` (``Store.open_with``): the headers, the mirror's token (a named
   range) and every sheetq column of the Queue worksheet; on the first pass to a spreadsheet
   (no pass has written yet) also QueueLog's ``ts``, ``task_id`` and ``event``, so that the
   log rows ``sheetq migrate`` copied from it are recognised and not appended again;
2. when anything differs, one atomic ``batchUpdate`` (``Store.apply`` with that read as its
   baseline, so no locating read; verified by the write's echo): changed cells by
   ``task_id``, new rows, deletions, new QueueLog rows and the new token — one write per
   ``MAX_WRITE_BYTES`` when a pass has more than that to write.

Between the two, one PostgreSQL transaction reads the window, applies the managers' edits
with their log rows and reads the log rows not yet mirrored; after each write, one more
records what it wrote. The token makes the record trustworthy: it is written into the sheet
atomically with each write and into PostgreSQL after it, so when the two differ (the
process died between them) the pass trusts no cell as a manager's edit, applies none, and
puts every row back as PostgreSQL has it. It is also a compare-and-set: two passes at once
(cron and a worker) never both write; the later one is refused and changes nothing.
"""

from __future__ import annotations

import gc
import random
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import TYPE_CHECKING, Any

from sheetq.clock import Clock
from sheetq.errors import ConfigError, LeaseConflict
from sheetq.mirror import (
    MAX_WRITE_BYTES,
    LogRecogniser,
    Texts,
    plan_edits,
    plan_write,
    range_name,
    read_edits,
    sheet_rows,
    token_for,
    token_log_id,
)
from sheetq.model import CONNECTOR_COLUMNS, CONNECTORS_SHEET, LOG_COLUMNS, QUEUE_COLUMNS, new_run_id
from sheetq.sheet.store import (
    AppendRow,
    ChangeSet,
    LeaseChange,
    Read,
    Snapshot,
    UpdateRow,
    cell_text,
)
from sheetq.times import format_ts, zone

if TYPE_CHECKING:
    from sheetq.config import Settings
    from sheetq.sheet.store import Store, WorkbookInfo

LOG_ROWS_PER_PASS = 50_000  # a pass catching up after an outage appends at most this many
_LOG_IDENTITY = ("ts", "task_id", "event")  # what recognises a log row migrate copied


@dataclass
class MirrorReport:
    """What one pass did; ``as_json`` is the ``sheetq mirror --json`` document.
    ``lag_seconds``: how old the sheet was when the pass began (seconds since the previous
    pass that wrote; ``None`` on the first); ``requests``: Sheets API requests."""

    updated: int = 0
    appended: int = 0
    deleted: int = 0
    log_appended: int = 0
    requeued: int = 0
    owners_saved: int = 0
    priorities_saved: int = 0  # docs/design.md §14: priorities a manager typed
    put_back: int = 0
    recognised: int = 0  # log rows the first pass found in QueueLog already (migrate's)
    requests: int = 0
    lag_seconds: float | None = None
    warnings: list[str] = field(default_factory=list)
    owner_lines: list[str] = field(default_factory=list)  # stderr at -v, one per owner saved
    initialised: list[str] = field(default_factory=list)
    conflict: str = ""

    def as_json(self) -> dict[str, Any]:
        return {
            "updated": self.updated,
            "appended": self.appended,
            "deleted": self.deleted,
            "log_appended": self.log_appended,
            "requeued": self.requeued,
            "owners_saved": self.owners_saved,
            "priorities_saved": self.priorities_saved,
            "put_back": self.put_back,
            "log_recognised": self.recognised,
            "requests": self.requests,
            "lag_seconds": None if self.lag_seconds is None else round(self.lag_seconds),
        }

    def line(self) -> str:
        """The one-line summary of ``sheetq mirror``."""
        if self.conflict:
            return self.conflict
        present = (
            f" ({self.recognised} already in the log sheet, copied by migrate)"
            if self.recognised
            else ""
        )
        return (
            f"mirror: {self.updated} updated, {self.appended} appended, {self.deleted} removed, "
            f"{self.log_appended} log rows{present}; {self.requeued} requeued, "
            f"{self.owners_saved} owner(s) saved, "
            + (f"{self.priorities_saved} priorit(ies) saved, " if self.priorities_saved else "")
            + f"{self.put_back} put back; "
            f"{self.requests} Sheets request(s)"
        )


def require_mirror(settings: Settings) -> None:
    """Both variables are needed: refuse (exit 2) naming the one that is missing."""
    missing = [
        name
        for name, value in (
            ("SHEETQ_DATABASE_URL", settings.database_url),
            ("SHEETQ_SPREADSHEET", settings.spreadsheet),
        )
        if not value
    ]
    if missing:
        raise ConfigError(
            f"sheetq mirror needs {' and '.join(missing)}: the queue in PostgreSQL "
            "(SHEETQ_DATABASE_URL) is mirrored into the spreadsheet (SHEETQ_SPREADSHEET)"
        )


MAX_PASS_SECONDS = 60.0  # a pass gives up within [mirror] interval, at most this


def sheet_store(settings: Settings) -> Store:
    """The mirror's spreadsheet (Google, or a ``local:`` workbook), not PostgreSQL; its
    requests and retries end within ``[mirror] interval`` (at most ``MAX_PASS_SECONDS``),
    so passes from cron never overlap."""
    from sheetq.sheet import open_store

    return open_store(
        replace(settings, database_url=""),
        time_limit=min(settings.mirror_interval, MAX_PASS_SECONDS),
        time_limit_name="[mirror] interval",
    )


def mirror_pass(
    settings: Settings,
    clock: Clock,
    *,
    rng: random.Random | None = None,
    max_bytes: int = MAX_WRITE_BYTES,
) -> MirrorReport:
    """One pass (see the module docstring). Raises ``StoreError``/``StoreUnavailable`` when
    Google fails (the failure is recorded for ``status``; the queue is untouched and the
    next pass catches up) and ``ConfigError`` without both variables."""
    from sheetq.postgres.mirror import PgMirror
    from sheetq.postgres.session import Session

    require_mirror(settings)
    pg = Session(settings)
    try:
        sheet = sheet_store(settings)
        try:
            with _gc_paused():
                return _Pass(settings, clock, pg, PgMirror(pg), sheet, rng, max_bytes).run()
        finally:
            sheet.close()
    finally:
        pg.close()


@contextmanager
def _gc_paused() -> Iterator[None]:
    """No cyclic garbage collection during a pass. A pass over 50,000 tasks builds about a
    million short-lived, acyclic objects (the read's cells, rows, texts); each of them
    counts towards the collector's thresholds, which then ran 2–4 full collections per
    pass over everything the process holds (0.3 s each in the benchmark: a third to half
    of the pass's CPU, and its noise). Reference counting frees them as before; cycles
    wait for the first collection after the pass."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


class _Pass:
    def __init__(
        self,
        settings: Settings,
        clock: Clock,
        pg: Any,
        mirror: Any,
        sheet: Store,
        rng: random.Random | None,
        max_bytes: int,
    ) -> None:
        self.settings = settings
        self.clock = clock
        self.pg = pg
        self.mirror = mirror
        self.sheet = sheet
        self.rng = rng or random.Random()
        self.max_bytes = max_bytes
        self.report = MirrorReport()
        self.name = range_name(settings.queue_sheet)

    def run(self) -> MirrorReport:
        from sheetq.errors import StoreError

        start = self.sheet.requests_made
        now = self.clock.now()
        with self.pg.transaction() as conn:
            before = self.mirror.state(conn)
        first = before.last_pass is None and not before.token  # no pass has written yet
        try:
            info, snap, log, connectors = self._read(first)
        except StoreError as exc:
            self.mirror.record_failure(now, str(exc))
            raise
        self.report.requests = self.sheet.requests_made - start
        sheet_token = info.leases.get(self.name)
        with self.pg.transaction() as conn:
            loaded = self.mirror.load(conn, now, self.settings.mirror_keep_finished)
            state = loaded.state
            if state.last_pass is not None:
                self.report.lag_seconds = max(0.0, (now - state.last_pass).total_seconds())
            trusted = (sheet_token or "") == state.token
            rows = sheet_rows(snap)
            edits = read_edits(snap, loaded.truth, loaded.written if trusted else {}, rows)
            self.report.warnings += edits.warnings
            if edits.requeue or edits.owners or edits.priorities:
                self._apply_edits(conn, edits, loaded.truth, now)
            ids = {r.task_id for r in rows}
            known = self.mirror.known(conn, ids - set(loaded.truth) - set(loaded.written))
            mark = token_log_id(sheet_token)
            after = mark if mark is not None and mark <= loaded.max_log_id else state.last_log_id
            if log is None:
                logs = self.mirror.logs_since(conn, after, LOG_ROWS_PER_PASS)
            else:
                logs, after = self._unseen(
                    conn, after, LogRecogniser(log, zone(info.time_zone), info.locale)
                )
        connector_rows = self._connectors(connectors, info, now)
        plan = plan_write(
            snap,
            loaded.truth,
            loaded.written,
            logs,
            settings=self.settings,
            known=known,
            max_bytes=self.max_bytes,
            rows=rows,
        )
        self.report.put_back = plan.put_back
        if plan.chunks:  # the Connectors rows ride in the pass's one write
            plan.chunks[0].changes.extend(connector_rows)
        elif connector_rows:
            self.sheet.apply(connector_rows)
        token = sheet_token
        try:
            for index, chunk in enumerate(plan.chunks):
                new = token_for(
                    chunk.last_log_id if chunk.last_log_id is not None else after,
                    self.rng.randrange(10**6),
                )
                chunk.changes.lease = LeaseChange(self.name, new, token)
                self.sheet.apply(chunk.changes, baseline=self._baseline(snap) if index == 0 else ())
                token = new
                if chunk.last_log_id is not None:
                    after = chunk.last_log_id
                with self.pg.transaction() as conn:
                    self.mirror.record(
                        conn,
                        record={**(plan.record if index == 0 else {}), **chunk.record},
                        forget=[*(plan.forget if index == 0 else []), *chunk.forget],
                        token=new,
                        last_log_id=after,
                        now=now,
                    )
                self.report.updated += chunk.updated
                self.report.appended += chunk.appended
                self.report.deleted += chunk.deleted
                self.report.log_appended += chunk.log_appended
        except LeaseConflict:
            self.report.conflict = (
                "mirror: another mirror pass wrote to the sheet meanwhile; this one wrote "
                "nothing more (the next pass carries on)"
            )
        except StoreError as exc:
            self.mirror.record_failure(now, str(exc))
            raise
        finally:
            self.report.requests = self.sheet.requests_made - start
        if not plan.chunks:
            with self.pg.transaction() as conn:
                self.mirror.record(
                    conn,
                    record=plan.record,
                    forget=plan.forget,
                    token=sheet_token or "",
                    last_log_id=after,
                    now=now,
                )
        return self.report

    @staticmethod
    def _baseline(snap: Snapshot) -> list[Snapshot]:
        """The read as ``apply``'s baseline: whole (it locates every row: no locating read)
        and as the targets' pre-image (sheetq's columns; a manager's cells are never
        written, so only a column dragged during the write could reach them)."""
        rows = Snapshot(snap.worksheet, snap.header, snap.rows, snap.columns, whole=False)
        return [snap, rows]

    def _unseen(
        self, conn: Any, after: int, recogniser: LogRecogniser
    ) -> tuple[list[tuple[int, Any]], int]:
        """The first pass's log rows: those after ``after`` that QueueLog does not hold yet
        (``migrate`` copied the others from it, docs/design.md §12), at most
        ``LOG_ROWS_PER_PASS``, looking through as many pages as that takes; and the id the
        pass counts as mirrored when it appends none."""
        cursor = after
        while True:
            page = self.mirror.logs_since(conn, cursor, LOG_ROWS_PER_PASS)
            whole = recogniser.feed(page, LOG_ROWS_PER_PASS)
            if not whole or len(page) < LOG_ROWS_PER_PASS:
                break
            cursor = page[-1][0]
        found = recogniser.result()
        self.report.recognised = found.present
        if found.logs or found.last_id is None:
            return found.logs, after
        return [], found.last_id  # every row looked at is in QueueLog already

    def _connectors(self, snap: Snapshot | None, info: WorkbookInfo, now: datetime) -> ChangeSet:
        """The Connectors worksheet (docs/design.md §13): a manager's typed ``paused`` or
        ``closed`` pauses or resumes the connector in PostgreSQL (logged there); then the
        rows that differ from PostgreSQL's connectors are planned (same rules as a sheet:
        ``sheetq.sheet.connectors``)."""
        if snap is None:
            return ChangeSet()
        from sheetq.postgres import connectors as pg_connectors
        from sheetq.sheet.connectors import parse, view_values

        seen = parse(snap.rows, now, zone(info.time_zone), info.locale)
        for name, item in seen.items():
            if item.edit is None or name not in self.settings.connectors:
                continue
            if item.edit.event == "paused":
                pg_connectors.pause(
                    self.pg, name, seconds=None, reason="typed in the mirror", now=now
                )
            else:
                pg_connectors.resume(self.pg, name, reason="typed in the mirror", now=now)
            self.report.warnings.append(f"connector {name}: {item.edit.event} from the sheet")
        changes = ChangeSet()
        by_row = {r.text("name").strip(): r for r in snap.rows}
        for view in pg_connectors.views(self.pg, now):
            cells = view_values(view)
            row = by_row.get(view.name)
            if row is None:
                changes.appends.append(AppendRow(CONNECTORS_SHEET, {"name": view.name, **cells}))
            elif any(row.text(k).strip() != cell_text(v) for k, v in cells.items()):
                changes.updates.append(
                    UpdateRow(CONNECTORS_SHEET, view.name, row.number, cells, "name")
                )
        return changes

    def _read(self, first: bool) -> tuple[WorkbookInfo, Snapshot, Snapshot | None, Snapshot | None]:
        """One ``open_with``; the first time, ``init``'s sheet side (worksheets, headers,
        format) and the read again. On the first pass to this spreadsheet the same request
        also reads QueueLog's ``ts``, ``task_id`` and ``event`` (returned third, else
        ``None``)."""
        settings = self.settings
        queue, log = settings.queue_sheet, settings.log_sheet
        reads = [Read(queue, QUEUE_COLUMNS)]
        layout = {queue: QUEUE_COLUMNS}
        if first:
            reads.append(Read(log, _LOG_IDENTITY))
            layout[log] = LOG_COLUMNS
        connectors = settings.connectors_sheet  # its rows ride in the same request
        if connectors:
            reads.append(Read(CONNECTORS_SHEET, CONNECTOR_COLUMNS))
            layout[CONNECTORS_SHEET] = CONNECTOR_COLUMNS
        info, snaps = self.sheet.open_with(reads, layout=layout)
        sheets = info.sheets
        if (
            queue not in sheets
            or log not in sheets
            or sheets[queue].missing(QUEUE_COLUMNS)
            or sheets[log].missing(LOG_COLUMNS)
            or (connectors and CONNECTORS_SHEET not in sheets)
        ):
            wanted = {queue: QUEUE_COLUMNS, log: LOG_COLUMNS, settings.archive_sheet: QUEUE_COLUMNS}
            if connectors:
                wanted[CONNECTORS_SHEET] = CONNECTOR_COLUMNS
            added = self.sheet.ensure_worksheets(wanted)
            self.report.initialised += [f"{t}: added {', '.join(c)}" for t, c in added.items()]
            self.report.initialised += self.sheet.fit_grids([queue, log, settings.archive_sheet])
            self.report.initialised += self.sheet.format_worksheets(
                queue, log, settings.archive_sheet
            )
            info, snaps = self.sheet.open_with(reads, layout=layout)
        info.sheet(queue).columns(QUEUE_COLUMNS)  # refuses a repeated sheetq header
        return (
            info,
            snaps[0],
            snaps[1] if first else None,
            snaps[-1] if connectors else None,
        )

    def _apply_edits(self, conn: Any, edits: Any, truth: dict[str, Texts], now: datetime) -> None:
        """Requeues and owners, planned from the tasks under a row lock, applied with their
        log rows, stamped with the server's clock (``now`` when pretended, ``SHEETQ_NOW``);
        ``truth`` gets the tasks as they are after."""
        ids = {*edits.requeue, *edits.owners, *edits.priorities}
        locked = self.mirror.tasks(conn, ids)
        stamp = self.mirror.stamp(conn, now)
        changes, requeued, owners, levels = plan_edits(
            edits, locked, settings=self.settings, now=stamp, run_id=new_run_id("mirror")
        )
        self.mirror.apply_edits(conn, changes)
        self.report.requeued += len(requeued)
        self.report.owners_saved += len(owners)
        owner_at = QUEUE_COLUMNS.index("owner")
        self.report.owner_lines += [
            f"{task_id}: owner {locked[task_id][owner_at]!r} -> {edits.owners[task_id]!r} "
            f"saved from the spreadsheet (updated_at {format_ts(stamp)}; no QueueLog row)"
            for task_id in owners
        ]
        priority_at = QUEUE_COLUMNS.index("priority")
        self.report.priorities_saved += len(levels)
        self.report.owner_lines += [
            f"{task_id}: priority {locked[task_id][priority_at]} -> "
            f"{edits.priorities[task_id]} saved from the spreadsheet (updated_at "
            f"{format_ts(stamp)}; no QueueLog row)"
            for task_id in levels
        ]
        truth.update(self.mirror.tasks(conn, ids))


def mirror_status(settings: Settings, now: datetime) -> dict[str, Any] | None:
    """The mirror's lag for ``sheetq status`` (``None`` when no mirror is configured):
    ``last_pass`` (ISO text or ``None``), ``lag_seconds``, ``tasks_pending`` (tasks changed
    since the last pass), ``log_rows_pending`` and ``last_error`` (of a failed pass since)."""
    if not (settings.database_url and settings.spreadsheet):
        return None
    from sheetq.postgres.mirror import PgMirror
    from sheetq.postgres.session import Session

    pg = Session(settings)
    try:
        doc = PgMirror(pg).lag(now)
    finally:
        pg.close()
    last = doc["last_pass"]
    doc["last_pass"] = None if last is None else format_ts(last)
    return doc


def mirror_status_line(doc: dict[str, Any]) -> str:
    """``status``'s line about the mirror."""
    if doc["last_pass"] is None:
        text = "mirror: no pass has written yet (run `sheetq mirror`)"
    else:
        text = (
            f"mirror: last pass {doc['last_pass']} ({doc['lag_seconds']}s ago); "
            f"{doc['tasks_pending']} task(s) and {doc['log_rows_pending']} log row(s) to write"
        )
    if doc.get("last_error"):
        text += f"; last attempt failed: {doc['last_error']}"
    return text
