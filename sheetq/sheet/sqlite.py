"""The embedded backend: a SQLite file holding worksheets as a spreadsheet would.

Each worksheet is a table ``ws_<id>(r INTEGER PRIMARY KEY, c0, c1, …)``: ``r``
is the sheet row number (row 1 is the header), ``cN`` the N-th column (0-based),
values stored as text or numbers, exactly as written. Every ``apply`` is one
``BEGIN IMMEDIATE`` transaction, so a change set is atomic and the lease
compare-and-set is exact. The time zone of a local workbook is UTC.

The methods under "people" act like a person editing the sheet; tests and
``sheetq demo`` use them.
"""

from __future__ import annotations

import contextlib
import functools
import sqlite3
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from sheetq.errors import LeaseConflict, SchemaError, StoreError, StoreUnavailable
from sheetq.model import FINISHED, Status
from sheetq.sheet.store import (
    WHITESPACE,
    AppendRow,
    ApplyResult,
    BlockMoved,
    CellValue,
    ChangeSet,
    DeleteRow,
    Read,
    Row,
    SheetInfo,
    Snapshot,
    WorkbookInfo,
    cell_text,
    row_identity,
)
from sheetq.sheet.workbook_file import (
    WORKBOOK_TABLES,
    content_refusal,
    path_refusal,
    table_names,
)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS workbook (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS worksheets (
    sheet_id INTEGER PRIMARY KEY, title TEXT NOT NULL UNIQUE, ncols INTEGER NOT NULL,
    position INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS leases (name TEXT PRIMARY KEY, token TEXT NOT NULL);
"""


def _cell(value: Any) -> CellValue:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if value is None or isinstance(value, str | int | float):
        return value
    return str(value)


F = TypeVar("F", bound=Callable[..., Any])


def _busy(exc: sqlite3.Error) -> bool:
    """Whether SQLite gave up waiting for another connection's lock (busy or locked,
    extended codes included; "database is locked")."""
    code = getattr(exc, "sqlite_errorcode", None)  # absent on errors not from SQLite
    return code is not None and code & 0xFF in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)


def _mapped(method: F) -> F:
    """SQLite errors (a damaged file, a read-only file, a full disk) become ``StoreError``
    (exit 1) naming the file, after rolling back any open transaction; a lock another
    writer kept past the timeout becomes ``StoreUnavailable`` (exit 1, as an unreachable
    store)."""

    @functools.wraps(method)
    def wrapper(self: SqliteStore, *args: Any, **kwargs: Any) -> Any:
        try:
            return method(self, *args, **kwargs)
        except sqlite3.Error as exc:
            if self._db.in_transaction:
                with contextlib.suppress(sqlite3.Error):
                    self._db.execute("ROLLBACK")
            if _busy(exc):
                raise self._locked("") from None
            raise StoreError(f"{self.path}: {exc}") from None

    return wrapper  # type: ignore[return-value]


def _planned(sheet_id: int, index: Mapping[str, int]) -> str:
    """The SQL condition of ``sheetq.sheet.plan.plan_needs`` on ``ws_<sheet_id>`` (the
    parameter ``:ws`` is ``WHITESPACE``, what Python's ``strip()`` strips): a finished row is
    left out unless it owes an alert, is a failed task of a group (docs/design.md §14) or
    another row holds its idempotency key."""
    status, alerted, key = (f"c{index[c]}" for c in ("status", "alerted_at", "idempotency_key"))
    group = f"c{index['group']}" if "group" in index else "NULL"
    text = f"lower(trim({status}, :ws))"
    finished = ", ".join(f"'{s}'" for s in sorted(FINISHED))
    key_text = (
        f"CASE typeof({key}) WHEN 'text' THEN trim({key}, :ws) WHEN 'null' THEN '' "
        f"ELSE sheetq_text({key}) END"
    )
    return (
        f"NOT (typeof({status}) = 'text' AND {text} IN ({finished}) "
        f"AND ({text} != '{Status.FAILED}' OR ({alerted} IS NOT NULL "
        f"AND (typeof({alerted}) != 'text' OR trim({alerted}, :ws) != '') "
        f"AND ({group} IS NULL OR (typeof({group}) = 'text' AND trim({group}, :ws) = '')))) "
        f"AND ({key_text} = '' OR {key_text} NOT IN (SELECT {key_text} FROM ws_{sheet_id} "
        f"WHERE r > 1 GROUP BY 1 HAVING COUNT(*) > 1)))"
    )


class SqliteStore:
    """A local workbook in the SQLite file ``path``.

    Raises ``SchemaError`` (exit 2) for what ``sheetq.sheet.workbook_file`` refuses: a
    folder, a missing folder, another program's file, and, unless ``create`` (`sheetq
    init`, which makes it), a file that is not there yet.
    """

    def __init__(
        self,
        path: str | Path,
        *,
        create: bool = False,
        timeout: float = 30.0,
        timeout_name: str = "",
    ) -> None:
        """``timeout``: seconds to wait for another writer's lock; ``timeout_name``: the
        setting it came from (``SHEETQ_ENQUEUE_TIMEOUT``), named when the wait runs out."""
        self.path = Path(path).expanduser()
        self._timeout, self._timeout_name = timeout, timeout_name
        refused = path_refusal(self.path, create=create)
        if refused is not None:
            raise SchemaError("; ".join(refused))
        try:
            self._db = sqlite3.connect(self.path, timeout=timeout, isolation_level=None)
            # Look before touching: another program's SQLite file is never changed.
            tables = table_names(self._db)
            refused = content_refusal(self.path, tables, create=create)
            if refused is not None:
                self._db.close()
                raise SchemaError("; ".join(refused))
            # the stripped text of a cell that is no text (a number): as the plan reads it
            self._db.create_function(
                "sheetq_text", 1, lambda v: cell_text(v).strip(), deterministic=True
            )
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            if create and not WORKBOOK_TABLES.issubset(tables or ()):
                self._db.executescript(_SCHEMA)
                self._db.execute(
                    "INSERT OR IGNORE INTO workbook VALUES ('title', ?)", (self.path.stem,)
                )
        except sqlite3.DatabaseError as exc:
            if _busy(exc):
                raise self._locked("") from None
            raise SchemaError(f"{self.path}: not a sheetq workbook ({exc})") from None
        self._requests = 0

    def _locked(self, doing: str) -> StoreUnavailable:
        """The error for a lock another writer held for all of ``self._timeout``."""
        source = f" ({self._timeout_name})" if self._timeout_name else ""
        return StoreUnavailable(
            f"{self.path}: {doing}the workbook stayed locked by another writer for "
            f"{self._timeout:g}s{source}; try again when it is done"
        )

    # --- port ---------------------------------------------------------------

    @property
    def requests_made(self) -> int:
        return self._requests

    @property
    def survives_power_loss(self) -> bool:
        """No: WAL with ``synchronous=NORMAL`` survives a killed process, but a power loss
        may roll back the last commits (SQLite syncs at checkpoints only)."""
        return False

    def close(self) -> None:
        self._db.close()

    @_mapped
    def version(self) -> int | None:
        """SQLite's ``PRAGMA data_version``: it changes when another connection commits."""
        return int(self._db.execute("PRAGMA data_version").fetchone()[0])

    @_mapped
    def open(self) -> WorkbookInfo:
        self._requests += 1
        return self._workbook()

    @_mapped
    def open_with(
        self, reads: Sequence[Read], *, layout: Mapping[str, Sequence[str]] | None = None
    ) -> tuple[WorkbookInfo, list[Snapshot]]:
        """``open()`` and ``read(reads)`` in one transaction (``layout`` is not needed: the
        columns are found by name). A missing worksheet reads as an empty snapshot."""
        self._requests += 1
        self._db.execute("BEGIN")
        try:
            info = self._workbook()
            snaps = [
                self._read_one(r) if r.worksheet in info.sheets else Snapshot(r.worksheet, (), [])
                for r in reads
            ]
        finally:
            self._db.execute("COMMIT")
        return info, snaps

    def _workbook(self) -> WorkbookInfo:
        meta = dict(self._db.execute("SELECT key, value FROM workbook"))
        sheets: dict[str, SheetInfo] = {}
        for sheet_id, title, ncols in self._db.execute(
            "SELECT sheet_id, title, ncols FROM worksheets ORDER BY position"
        ).fetchall():
            sheets[title] = SheetInfo(title, sheet_id, self._header(sheet_id, ncols))
        leases = dict(self._db.execute("SELECT name, token FROM leases"))
        return WorkbookInfo(
            title=meta.get("title", self.path.stem),
            sheets=sheets,
            time_zone="UTC",
            locale="en_US",
            url="",
            leases=leases,
        )

    def link(self, info: WorkbookInfo, worksheet: str, row: int, task_id: str) -> str:
        return task_id

    @_mapped
    def read(self, reads: Sequence[Read]) -> list[Snapshot]:
        self._requests += 1
        self._db.execute("BEGIN")
        try:
            return [self._read_one(read) for read in reads]
        finally:
            self._db.execute("COMMIT")

    @_mapped
    def apply(
        self,
        changes: ChangeSet,
        *,
        baseline: Sequence[Snapshot] = (),
    ) -> ApplyResult:
        """One transaction: every row re-located by its key inside it, so a person's edit
        can never come between locating and writing (``baseline`` is not needed)."""
        if not changes:
            return ApplyResult()
        self._requests += 1
        self._begin_write()
        try:
            result = self._apply(changes)
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")
        return result

    @_mapped
    def read_then_apply(
        self,
        reads: Sequence[Read],
        plan: Callable[[list[Snapshot]], Sequence[ChangeSet]],
        *,
        snapshots: Sequence[Snapshot] | None = None,
    ) -> list[ApplyResult]:
        """The read, the planning and every write in one ``BEGIN IMMEDIATE`` transaction:
        the write lock is taken before reading, so racing writers queue up behind it and
        each plans from what the one before it committed. ``snapshots`` (read before the
        transaction) are not used: the read is made again inside it."""
        self._requests += 1
        self._begin_write()
        try:
            writes = [c for c in plan([self._read_one(read) for read in reads]) if c]
            if writes:
                self._requests += 1
            results = [self._apply(changes) for changes in writes]
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")
        return results

    def _begin_write(self) -> None:
        try:
            self._db.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as exc:
            if _busy(exc):
                raise self._locked("cannot write: ") from None
            raise StoreError(f"{self.path}: cannot write: {exc}") from None

    def _apply(self, changes: ChangeSet) -> ApplyResult:
        """One change set inside the open transaction."""
        result = ApplyResult()
        if changes.lease is not None:
            self._lease(changes.lease.name, changes.lease.token, changes.lease.replaces)
        sheets = self._sheets()
        for update in changes.updates:
            sheet_id, cols = sheets[update.worksheet]
            row = self._locate(sheet_id, cols, update.key_column, update.key, update.row)
            if row is None:
                result.missing.append(str(update.key))
                continue
            if update.key is not None:
                result.rows[update.key] = row
            assignments = [
                (cols[name], value) for name, value in update.values.items() if name in cols
            ]
            if assignments:
                sets = ", ".join(f"c{index} = ?" for index, _ in assignments)
                self._db.execute(
                    f"UPDATE ws_{sheet_id} SET {sets} WHERE r = ?",
                    [value for _, value in assignments] + [row],
                )
        deletions: dict[int, list[int]] = {}
        for delete in changes.deletes:
            sheet_id, cols = sheets[delete.worksheet]
            row = self._locate(sheet_id, cols, delete.key_column, delete.key, delete.row)
            if row is None:
                result.missing.append(str(delete.key))
            else:
                deletions.setdefault(sheet_id, []).append(row)
        for move in changes.moves:
            sheet_id, cols = sheets[move.worksheet]
            row = self._locate(sheet_id, cols, move.key_column, move.key, move.row)
            if row is None:
                result.missing.append(move.key)
                continue
            to_id, to_cols = sheets[move.to]
            names = [n for n in cols if n in to_cols]
            picked = ", ".join(f"c{cols[n]}" for n in names)
            found = self._db.execute(
                f"SELECT {picked} FROM ws_{sheet_id} WHERE r = ?", (row,)
            ).fetchone()
            self._append(
                to_id,
                to_cols,
                {n: v for n, v in zip(names, found, strict=True) if v not in (None, "")},
            )
            deletions.setdefault(sheet_id, []).append(row)
            result.moved.append(move.key)
        for sheet_id, rows in deletions.items():
            self._delete_rows(sheet_id, rows)
        for append in changes.appends:
            sheet_id, cols = sheets[append.worksheet]
            self._append(sheet_id, cols, append.values)
        return result

    @_mapped
    def ensure_worksheets(self, spec: Mapping[str, Sequence[str]]) -> dict[str, list[str]]:
        self._requests += 1
        added: dict[str, list[str]] = {}
        self._db.execute("BEGIN IMMEDIATE")
        try:
            existing = {
                title: (sid, n)
                for sid, title, n in self._db.execute(
                    "SELECT sheet_id, title, ncols FROM worksheets"
                )
            }
            for title, columns in spec.items():
                if title not in existing:
                    position = self._db.execute(
                        "SELECT COALESCE(MAX(position), -1) + 1 FROM worksheets"
                    ).fetchone()[0]
                    cur = self._db.execute(
                        "INSERT INTO worksheets (title, ncols, position) VALUES (?, 0, ?)",
                        (title, position),
                    )
                    sheet_id = int(cur.lastrowid or 0)
                    self._db.execute(f"CREATE TABLE ws_{sheet_id} (r INTEGER PRIMARY KEY)")
                    existing[title] = (sheet_id, 0)
                sheet_id, ncols = existing[title]
                header = list(self._header(sheet_id, ncols))
                missing = [c for c in columns if c not in header]
                if not missing:
                    continue
                # After the last named column, unless unnamed columns beyond it hold data.
                start = len(header)
                if ncols > start:
                    cells = " OR ".join(
                        f"c{i} IS NOT NULL AND c{i} != ''" for i in range(start, ncols)
                    )
                    if self._db.execute(
                        f"SELECT 1 FROM ws_{sheet_id} WHERE {cells} LIMIT 1"
                    ).fetchone():
                        start = ncols
                new_cols = start + len(missing)
                for index in range(ncols, new_cols):
                    self._db.execute(f"ALTER TABLE ws_{sheet_id} ADD COLUMN c{index}")
                ncols = max(ncols, new_cols)
                self._db.execute(
                    "UPDATE worksheets SET ncols = ? WHERE sheet_id = ?", (ncols, sheet_id)
                )
                self._db.execute(f"INSERT OR IGNORE INTO ws_{sheet_id} (r) VALUES (1)")
                sets = ", ".join(f"c{start + i} = ?" for i in range(len(missing)))
                self._db.execute(f"UPDATE ws_{sheet_id} SET {sets} WHERE r = 1", missing)
                added[title] = missing
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")
        return added

    def format_worksheets(self, queue: str, log: str, archive: str) -> list[str]:
        return []

    def move_block(self, worksheet: str, to: str, rows: Sequence[Row], to_end: int) -> BlockMoved:
        """In one transaction: the rows still holding what was read are appended to ``to``
        and deleted from ``worksheet`` (``to_end`` is not needed: appends go to the end)."""
        names = [n for n in (rows[0].values if rows else {})]
        expected = {r.number: row_identity(r, names) for r in rows}
        outcome = BlockMoved()

        def plan(snaps: list[Snapshot]) -> list[ChangeSet]:
            changes = ChangeSet()
            for row in snaps[0].rows:
                if expected.get(row.number) == row_identity(row, names):
                    values = {k: v for k, v in row.values.items() if cell_text(v) != ""}
                    changes.appends.append(AppendRow(to, values))
                    changes.deletes.append(DeleteRow(worksheet, None, row.number))
            outcome.moved = len(changes.deletes)
            return [changes]

        self.read_then_apply([Read(worksheet)], plan)
        return outcome

    def fit_grids(self, titles: Sequence[str]) -> list[str]:
        return []  # no grid: a SQLite table has only the columns it holds

    # --- internals ----------------------------------------------------------

    def _sheets(self) -> dict[str, tuple[int, dict[str, int]]]:
        out: dict[str, tuple[int, dict[str, int]]] = {}
        for sheet_id, title, ncols in self._db.execute(
            "SELECT sheet_id, title, ncols FROM worksheets"
        ).fetchall():
            header = self._header(sheet_id, ncols)
            cols: dict[str, int] = {}
            for index, name in enumerate(header):
                if name:
                    cols.setdefault(name, index)
            out[title] = (sheet_id, cols)
        return out

    def _header(self, sheet_id: int, ncols: int) -> tuple[str, ...]:
        if ncols == 0:
            return ()
        names = ", ".join(f"c{i}" for i in range(ncols))
        row = self._db.execute(f"SELECT {names} FROM ws_{sheet_id} WHERE r = 1").fetchone()
        if row is None:
            return ()
        header = ["" if v is None else str(v).strip() for v in row]
        while header and header[-1] == "":
            header.pop()
        return tuple(header)

    def _sheet(self, title: str) -> tuple[int, int]:
        found = self._db.execute(
            "SELECT sheet_id, ncols FROM worksheets WHERE title = ?", (title,)
        ).fetchone()
        if found is None:
            raise SchemaError(f"worksheet '{title}' not found; run `sheetq init` to create it")
        return int(found[0]), int(found[1])

    def _read_one(self, read: Read) -> Snapshot:
        sheet_id, ncols = self._sheet(read.worksheet)
        header = self._header(sheet_id, ncols)
        index: dict[str, int] = {}
        for i, name in enumerate(header):
            if name:
                index.setdefault(name, i)
        wanted = list(index) if read.columns is None else [c for c in read.columns if c in index]
        select = ", ".join(["r"] + [f"c{index[c]}" for c in wanted])
        planned = read.planned and read.rows is None
        if planned and {"status", "alerted_at", "idempotency_key"} <= index.keys():
            # sheetq's spelling of a waiting or running task first: kept at once (the rule
            # only ever leaves out finished rows), the rule's trimming only for the others
            unfinished = ", ".join(f"'{s}'" for s in sorted(set(Status) - FINISHED))
            where = f"(c{index['status']} IN ({unfinished}) OR {_planned(sheet_id, index)})"
            cursor = self._db.execute(
                f"SELECT {select} FROM ws_{sheet_id} WHERE r > 1 AND {where} ORDER BY r",
                {"ws": WHITESPACE},
            )
            records: Iterable[Sequence[Any]] = cursor
        elif read.rows is None:
            planned = False
            cursor = self._db.execute(f"SELECT {select} FROM ws_{sheet_id} WHERE r > 1 ORDER BY r")
            records = cursor
        else:
            records = []
            numbers = sorted(set(read.rows))
            for start in range(0, len(numbers), 500):
                chunk = numbers[start : start + 500]
                marks = ", ".join("?" * len(chunk))
                records += self._db.execute(
                    f"SELECT {select} FROM ws_{sheet_id} WHERE r IN ({marks}) ORDER BY r", chunk
                ).fetchall()
        # SQLite gives back str, int, float or None as stored (never bytes: sheetq writes none)
        rows = [Row(rec[0], dict(zip(wanted, rec[1:], strict=True))) for rec in records]
        whole = read.rows is None and not planned
        return Snapshot(read.worksheet, header, rows, tuple(wanted), whole=whole)

    def _locate(
        self, sheet_id: int, cols: Mapping[str, int], key_column: str, key: str | None, hint: int
    ) -> int | None:
        if key is None:
            return hint
        index = cols.get(key_column)
        if index is None:
            raise SchemaError(f"column '{key_column}' is missing; run `sheetq init`")
        found = self._db.execute(
            f"SELECT c{index} FROM ws_{sheet_id} WHERE r = ?", (hint,)
        ).fetchone()
        if found is not None and found[0] == key:
            return hint
        found = self._db.execute(
            f"SELECT r FROM ws_{sheet_id} WHERE c{index} = ? AND r > 1 ORDER BY r LIMIT 1", (key,)
        ).fetchone()
        return None if found is None else int(found[0])

    def _append(
        self, sheet_id: int, cols: Mapping[str, int], values: Mapping[str, CellValue]
    ) -> None:
        pairs = [(cols[name], value) for name, value in values.items() if name in cols]
        names = ", ".join(["r"] + [f"c{i}" for i, _ in pairs])
        marks = ", ".join(
            [f"(SELECT COALESCE(MAX(r), 1) + 1 FROM ws_{sheet_id})"] + ["?"] * len(pairs)
        )
        self._db.execute(
            f"INSERT INTO ws_{sheet_id} ({names}) VALUES ({marks})", [value for _, value in pairs]
        )

    def _delete_rows(self, sheet_id: int, rows: list[int]) -> None:
        gone = sorted(set(rows))
        self._db.execute("CREATE TEMP TABLE IF NOT EXISTS _gone (r INTEGER PRIMARY KEY)")
        self._db.execute("DELETE FROM _gone")
        self._db.executemany("INSERT INTO _gone VALUES (?)", [(r,) for r in gone])
        self._db.execute(f"DELETE FROM ws_{sheet_id} WHERE r IN (SELECT r FROM _gone)")
        # Shift the rows below up, as deleting sheet rows does; negate first to keep r unique.
        self._db.execute(
            f"UPDATE ws_{sheet_id} SET r = -(r - (SELECT COUNT(*) FROM _gone g "
            f"WHERE g.r < ws_{sheet_id}.r)) WHERE r > ?",
            (gone[0],),
        )
        self._db.execute(f"UPDATE ws_{sheet_id} SET r = -r WHERE r < 0")
        self._db.execute("DELETE FROM _gone")

    def _lease(self, name: str, token: str | None, replaces: str | None) -> None:
        found = self._db.execute("SELECT token FROM leases WHERE name = ?", (name,)).fetchone()
        current = None if found is None else found[0]
        if current != replaces:
            raise LeaseConflict(f"lease '{name}' is held by another run")
        if token is None:
            self._db.execute("DELETE FROM leases WHERE name = ?", (name,))
        else:
            self._db.execute("INSERT OR REPLACE INTO leases VALUES (?, ?)", (name, token))

    # --- people: what a person does in the sheet (tests, demo) ---------------

    def values(self, worksheet: str) -> list[list[CellValue]]:
        """The whole worksheet, header first, as a grid (``None`` for empty cells)."""
        sheet_id, ncols = self._sheet(worksheet)
        names = ", ".join(["r"] + [f"c{i}" for i in range(ncols)])
        grid: list[list[CellValue]] = []
        for rec in self._db.execute(f"SELECT {names} FROM ws_{sheet_id} ORDER BY r"):
            while len(grid) < rec[0] - 1:
                grid.append([None] * ncols)
            grid.append([_cell(v) for v in rec[1:]])
        return grid

    def set_cell(self, worksheet: str, row: int, column: str | int, value: CellValue) -> None:
        """Type ``value`` into a cell (column by header name or 0-based index)."""
        sheet_id, ncols = self._sheet(worksheet)
        index = column if isinstance(column, int) else self._header(sheet_id, ncols).index(column)
        while index >= ncols:
            self._db.execute(f"ALTER TABLE ws_{sheet_id} ADD COLUMN c{ncols}")
            ncols += 1
            self._db.execute(
                "UPDATE worksheets SET ncols = ? WHERE sheet_id = ?", (ncols, sheet_id)
            )
        self._db.execute(f"INSERT OR IGNORE INTO ws_{sheet_id} (r) VALUES (?)", (row,))
        self._db.execute(f"UPDATE ws_{sheet_id} SET c{index} = ? WHERE r = ?", (value, row))

    def write_rows(self, worksheet: str, rows: list[list[CellValue]], start_row: int = 1) -> None:
        """Type whole rows from ``start_row`` (a person pasting)."""
        for offset, values in enumerate(rows):
            for index, value in enumerate(values):
                self.set_cell(worksheet, start_row + offset, index, value)

    def sort_rows(self, worksheet: str, column: str, *, descending: bool = False) -> None:
        """Sort the data rows by a column, as a person does with Data → Sort range."""
        grid = self.values(worksheet)
        header, body = grid[0], grid[1:]
        index = header.index(column)
        body.sort(key=lambda r: "" if r[index] is None else str(r[index]), reverse=descending)
        sheet_id, _ = self._sheet(worksheet)
        self._db.execute(f"DELETE FROM ws_{sheet_id} WHERE r > 1")
        self.write_rows(worksheet, body, start_row=2)

    def insert_column(self, worksheet: str, at: int, name: str) -> None:
        """Insert a column before 0-based index ``at`` (a manager adding a notes column)."""
        grid = self.values(worksheet)
        sheet_id, ncols = self._sheet(worksheet)
        self._db.execute(f"ALTER TABLE ws_{sheet_id} ADD COLUMN c{ncols}")
        self._db.execute(
            "UPDATE worksheets SET ncols = ? WHERE sheet_id = ?", (ncols + 1, sheet_id)
        )
        self._db.execute(f"DELETE FROM ws_{sheet_id}")
        for number, row in enumerate(grid, start=1):
            row = list(row) + [None] * (ncols - len(row))
            row.insert(at, name if number == 1 else None)
            names = ", ".join(["r"] + [f"c{i}" for i in range(ncols + 1)])
            marks = ", ".join("?" * (ncols + 2))
            self._db.execute(
                f"INSERT INTO ws_{sheet_id} ({names}) VALUES ({marks})", [number, *row]
            )
