"""``PgStore``: the worksheet-shaped ``Store`` port (``sheetq.sheet.store``) over PostgreSQL.

The Queue, QueueLog, QueueArchive and QueueLogArchive "worksheets" of one queue are the
rows of ``sheetq_tasks``, ``sheetq_log``, ``sheetq_archive`` and ``sheetq_log_archive``
whose ``queue`` is the queue's name. A read gives each row a number (2, 3, … in
``created_at`` order, or log order) only so that the shared code, written for sheets, has
one; every write is addressed by ``task_id`` (log rows by their id), inside one
transaction per change set, so nothing a number says can misplace a write.

Transitional: what still uses it is the mirror (``sheetq.postgres.mirror``,
``sheetq.mirror_run``). The run path (``run``, ``runner``, ``worker``), enqueue, requeue,
skip, archive, the alert digest and the reports have their own statements
(``queries/*.sql``) over a plain connection.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from time import monotonic
from typing import Any

import psycopg
from psycopg import sql
from psycopg.rows import dict_row

from sheetq.config import Settings
from sheetq.errors import LeaseConflict, SchemaError, StoreError, StoreUnavailable
from sheetq.model import LOG_COLUMNS, QUEUE_COLUMNS
from sheetq.postgres import schema
from sheetq.postgres.codec import INT_COLUMNS, TIME_COLUMNS, to_db, values_from_record
from sheetq.postgres.connection import connect, describe, explain
from sheetq.sheet.store import (
    ApplyResult,
    BlockMoved,
    ChangeSet,
    LeaseChange,
    Read,
    Row,
    SheetInfo,
    Snapshot,
    WorkbookInfo,
)

LOG_ID = "_id"  # log rows carry their database id under this name (never a header)


class _Table:
    def __init__(self, name: str, columns: tuple[str, ...], order: str, is_log: bool) -> None:
        self.name = name
        self.columns = columns
        self.order = order
        self.is_log = is_log


_TASKS = _Table("sheetq_tasks", QUEUE_COLUMNS, "created_at, task_id", False)
_ARCHIVE = _Table("sheetq_archive", QUEUE_COLUMNS, "created_at, task_id", False)
_LOG = _Table("sheetq_log", LOG_COLUMNS, "id", True)
_LOG_ARCHIVE = _Table("sheetq_log_archive", LOG_COLUMNS, "id", True)


def _guard(
    table: _Table, key: str, expect: Mapping[str, str]
) -> tuple[sql.Composable, tuple[str, ...]]:
    """`` AND status = %s`` when the plan saw ``key``'s status (see ``PgStore.apply_in``)."""
    if table is _TASKS and key in expect:
        return sql.SQL(" AND status = %s"), (expect[key],)
    return sql.SQL(""), ()


class _Cells:
    """New rows' cells as the database stores them (``codec.to_db``), the times of one batch
    (mostly one stamp) parsed once."""

    def __init__(self, table: _Table) -> None:
        self.table = table
        self.times: dict[Any, Any] = {}

    def __call__(self, column: str, value: Any) -> Any:
        if value is None or value == "":
            if column in ("created_at", "updated_at", "ts"):
                raise StoreError(f"{self.table.name}: a new row without {column}")
            return to_db(column, "")
        if column in TIME_COLUMNS:
            key = (column, value)
            if key not in self.times:
                self.times[key] = to_db(column, value)
            return self.times[key]
        if isinstance(value, str) and column not in INT_COLUMNS:
            return value
        return to_db(column, value)


class PgStore:
    """The ``Store`` port on PostgreSQL for one queue (``settings.queue_sheet``).

    ``requests_made`` counts transactions (round trips of a kind). Raises
    ``StoreUnavailable`` when the server cannot be reached, ``SchemaError`` (exit 2) when
    its schema is older than this sheetq (run ``sheetq init``)."""

    has_positions = False  # rows have no sheet position: reports print ``row: null``

    def __init__(
        self, settings: Settings, *, time_limit: float | None = None, time_limit_name: str = ""
    ) -> None:
        """``time_limit`` (seconds from now; ``enqueue``'s ``SHEETQ_ENQUEUE_TIMEOUT``, named
        ``time_limit_name`` in errors) bounds the connect and, as each transaction's own
        ``lock_timeout`` (``SET LOCAL``: nothing stays on a pooled server connection), the
        wait for the queue's lock: a queue held by another transaction makes the command give
        up (``StoreUnavailable``, exit 1, the transaction rolled back) instead of waiting. The
        work itself is not cut off: a ``--jsonl`` batch of 200,000 lines takes what it takes."""
        self.settings = settings
        self.url = settings.database_url
        self.queue = settings.queue_sheet
        self._limit: tuple[float, str, float] | None = None
        if time_limit is not None:
            name = time_limit_name or "its time limit"
            self._limit = (time_limit, name, monotonic() + time_limit)
        self.conn = connect(self.url, time_limit=time_limit)
        self.conn.row_factory = dict_row
        self._requests = 0
        self._tables = {
            settings.queue_sheet: _TASKS,
            settings.log_sheet: _LOG,
            settings.archive_sheet: _ARCHIVE,
            settings.log_archive_sheet: _LOG_ARCHIVE,
        }

    # --- plumbing ----------------------------------------------------------------------

    @contextmanager
    def transaction(self) -> Iterator[psycopg.Connection[Any]]:
        """One transaction; database errors become ``StoreError`` (the transaction rolled
        back, nothing written)."""
        self._requests += 1
        try:
            with self.conn.transaction():
                if self._limit is not None:
                    self._bound_transaction()
                yield self.conn
        except psycopg.errors.LockNotAvailable as exc:
            if self._limit is None:
                raise explain(exc, self.url) from None
            raise self._out_of_time() from None
        except psycopg.errors.UndefinedTable:
            raise SchemaError(
                "the PostgreSQL database has no sheetq schema: run `sheetq init`"
            ) from None
        except psycopg.Error as exc:
            raise explain(exc, self.url) from None

    def _bound_transaction(self) -> None:
        """``lock_timeout`` of this transaction: what is left of the time limit."""
        assert self._limit is not None
        left = self._limit[2] - monotonic()
        if left <= 0:
            raise self._out_of_time()
        self.conn.execute(
            "SELECT set_config('lock_timeout', %s, true)", (f"{max(1, int(left * 1000))}ms",)
        )

    def _out_of_time(self) -> StoreUnavailable:
        assert self._limit is not None
        seconds, name, _ = self._limit
        return StoreUnavailable(
            f"PostgreSQL {describe(self.url)}: gave up after {name} ({seconds:g}s) waiting "
            "for the queue's lock, held by another transaction (a `sheetq migrate` under way, "
            "or a session left open); nothing was written"
        )

    def table(self, worksheet: str) -> _Table:
        try:
            return self._tables[worksheet]
        except KeyError:
            raise SchemaError(f"no table for worksheet {worksheet!r} in PostgreSQL") from None

    # --- the Store port ----------------------------------------------------------------

    def open(self) -> WorkbookInfo:
        with self.transaction() as conn:
            schema.check(conn)
            return self._info(conn)

    def _info(self, conn: psycopg.Connection[Any]) -> WorkbookInfo:
        leases = {
            str(r["name"]): str(r["token"])
            for r in conn.execute(
                "SELECT name, token FROM sheetq_leases WHERE queue = %s", (self.queue,)
            )
        }
        sheets = {
            title: SheetInfo(title, index, table.columns)
            for index, (title, table) in enumerate(self._tables.items())
        }
        return WorkbookInfo(
            title=f"PostgreSQL {describe(self.url)}",
            sheets=sheets,
            time_zone="UTC",
            url="",
            leases=leases,
        )

    def read(self, reads: Sequence[Read]) -> list[Snapshot]:
        with self.transaction() as conn:
            return [self._read(conn, r) for r in reads]

    def _read(self, conn: psycopg.Connection[Any], read: Read) -> Snapshot:
        table = self.table(read.worksheet)
        columns = tuple(c for c in (read.columns or table.columns) if c in table.columns)
        wanted = list(columns) + (["id"] if table.is_log else [])
        query = sql.SQL("SELECT {} FROM {} WHERE queue = %s ORDER BY {}").format(
            sql.SQL(", ").join(sql.Identifier(c) for c in wanted),
            sql.Identifier(table.name),
            sql.SQL(table.order),
        )
        only = set(read.rows) if read.rows is not None else None
        rows: list[Row] = []
        for number, record in enumerate(conn.execute(query, (self.queue,)), start=2):
            if only is not None and number not in only:
                continue
            values = values_from_record(record, columns)
            if table.is_log:
                values[LOG_ID] = int(record["id"])
            rows.append(Row(number, values))
        return Snapshot(read.worksheet, table.columns, rows, columns, whole=read.rows is None)

    def open_with(
        self, reads: Sequence[Read], *, layout: Mapping[str, Sequence[str]] | None = None
    ) -> tuple[WorkbookInfo, list[Snapshot]]:
        with self.transaction() as conn:
            schema.check(conn)
            return self._info(conn), [self._read(conn, r) for r in reads]

    def apply(self, changes: ChangeSet, *, baseline: Sequence[Snapshot] = ()) -> ApplyResult:
        with self.transaction() as conn:
            return self.apply_in(conn, changes)

    def apply_as_read(self, changes: ChangeSet, read: Sequence[Snapshot]) -> ApplyResult:
        """Apply ``changes`` planned from ``read`` (a fresh read of Queue) in one transaction,
        each Queue row only while its status is still the one read: a task a worker claimed
        or a person requeued meanwhile is left alone and reported ``missing``, with its log
        rows (``sheetq.sheet.store.apply_as_read``)."""
        expect = {
            str(row.values["task_id"]): str(row.values["status"])
            for snap in read
            if snap.worksheet == self.queue
            for row in snap.rows
            if "task_id" in row.values and "status" in row.values
        }
        with self.transaction() as conn:
            return self.apply_in(conn, changes, expect=expect)

    def apply_in(
        self,
        conn: psycopg.Connection[Any],
        changes: ChangeSet,
        *,
        fence: str | None = None,
        expect: Mapping[str, str] | None = None,
    ) -> ApplyResult:
        """Apply ``changes`` inside the caller's transaction. ``fence``: a run id; each
        Queue update then applies only to a row still ``processing`` under that run's lease
        (the others are reported ``missing``). ``expect``: task id → the status the plan
        saw; a Queue update, delete or move of that task applies only while the row still
        has it (compare-and-set), and the log rows of tasks left alone are not written."""
        result = ApplyResult()
        expect = expect or {}
        if changes.lease is not None:
            self._lease(conn, changes.lease)
        for update in changes.updates:
            table = self.table(update.worksheet)
            values = {k: v for k, v in update.values.items() if k in table.columns}
            if update.key is None or not values:
                if update.key is None:
                    result.missing.append("")
                continue
            where: sql.Composable = sql.SQL("queue = %s AND task_id = %s")
            params: list[Any] = [to_db(k, v) for k, v in values.items()]
            params += [self.queue, update.key]
            if fence is not None and table is _TASKS:
                where = sql.SQL("{} AND status = 'processing' AND lease_owner = %s").format(where)
                params.append(fence)
            if table is _TASKS and update.key in expect:
                where = sql.SQL("{} AND status = %s").format(where)
                params.append(expect[update.key])
            query = sql.SQL("UPDATE {} SET {} WHERE {}").format(
                sql.Identifier(table.name),
                sql.SQL(", ").join(sql.SQL("{} = %s").format(sql.Identifier(k)) for k in values),
                where,
            )
            if conn.execute(query, params).rowcount == 0:
                result.missing.append(update.key)
        for delete in changes.deletes:
            table = self.table(delete.worksheet)
            if delete.key is None:
                result.missing.append("")
                continue
            guard, extra = _guard(table, delete.key, expect)
            query = sql.SQL("DELETE FROM {} WHERE queue = %s AND task_id = %s{}").format(
                sql.Identifier(table.name), guard
            )
            if conn.execute(query, (self.queue, delete.key, *extra)).rowcount == 0:
                result.missing.append(delete.key)
        for move in changes.moves:
            source, dest = self.table(move.worksheet), self.table(move.to)
            cols = sql.SQL(", ").join(sql.Identifier(c) for c in source.columns)
            guard, extra = _guard(source, move.key, expect)
            query = sql.SQL(
                "WITH moved AS (DELETE FROM {} WHERE queue = %s AND task_id = %s{} RETURNING *) "
                "INSERT INTO {} (queue, {}) SELECT queue, {} FROM moved RETURNING task_id"
            ).format(sql.Identifier(source.name), guard, sql.Identifier(dest.name), cols, cols)
            if conn.execute(query, (self.queue, move.key, *extra)).fetchone():
                result.moved.append(move.key)
            else:
                result.missing.append(move.key)
        left = set(result.missing) & set(expect)
        if left:  # the log rows of tasks left alone describe changes that did not happen
            changes = ChangeSet(
                appends=[
                    a
                    for a in changes.appends
                    if not (self.table(a.worksheet).is_log and a.values.get("task_id") in left)
                ]
            )
        self._append(conn, changes)
        return result

    def _append(self, conn: psycopg.Connection[Any], changes: ChangeSet) -> None:
        """Insert the appended rows, one ``COPY`` per table (100,000 rows in about a second,
        inside the caller's transaction; statement triggers fire once)."""
        by_table: dict[str, list[Mapping[str, Any]]] = {}
        for append in changes.appends:
            by_table.setdefault(append.worksheet, []).append(append.values)
        for worksheet, rows in by_table.items():
            table = self.table(worksheet)
            cols = table.columns
            query = sql.SQL("COPY {} (queue, {}) FROM STDIN").format(
                sql.Identifier(table.name),
                sql.SQL(", ").join(sql.Identifier(c) for c in cols),
            )
            cell = _Cells(table)
            with conn.cursor() as cur, cur.copy(query) as copy:
                for row in rows:
                    copy.write_row([self.queue, *(cell(c, row.get(c)) for c in cols)])
            if table is _TASKS or table is _ARCHIVE:
                self._claim_keys(conn, rows)

    def _claim_keys(self, conn: psycopg.Connection[Any], rows: Sequence[Mapping[str, Any]]) -> None:
        """Record new rows' idempotency keys in ``sheetq_keys``. A key that another task holds
        already raises ``StoreError`` and the whole transaction rolls back: two tasks never
        share a key, live or archived, whatever races (docs/design.md §4, §11)."""
        keys = [str(r.get("idempotency_key") or "") for r in rows]
        tasks = [str(r.get("task_id") or "") for r in rows]
        hashes = [str(r.get("payload_hash") or "") for r in rows]
        clash = conn.execute(
            "WITH wanted AS (SELECT * FROM unnest(%s::text[], %s::text[], %s::text[])"
            "   AS n(k, t, h) WHERE k <> ''),"
            " added AS (INSERT INTO sheetq_keys (queue, idempotency_key, task_id, payload_hash)"
            "   SELECT %s, k, t, h FROM wanted ON CONFLICT (queue, idempotency_key) DO NOTHING"
            "   RETURNING idempotency_key)"
            " SELECT w.k FROM wanted w JOIN sheetq_keys s"
            "   ON s.queue = %s AND s.idempotency_key = w.k AND s.task_id <> w.t"
            " WHERE w.k NOT IN (SELECT idempotency_key FROM added) LIMIT 1",
            (keys, tasks, hashes, self.queue, self.queue),
        ).fetchone()
        if clash:
            raise StoreError(
                f"idempotency key {clash['k']!r} is held by another task (an enqueue raced "
                "this one); nothing was written, run the command again"
            )

    def _lease(self, conn: psycopg.Connection[Any], change: LeaseChange) -> None:
        row = conn.execute(
            "SELECT token FROM sheetq_leases WHERE queue = %s AND name = %s FOR UPDATE",
            (self.queue, change.name),
        ).fetchone()
        current = str(row["token"]) if row else None
        if current != change.replaces:
            raise LeaseConflict(f"lease {change.name!r} is held by another run")
        if change.token is None:
            conn.execute(
                "DELETE FROM sheetq_leases WHERE queue = %s AND name = %s",
                (self.queue, change.name),
            )
        else:
            conn.execute(
                "INSERT INTO sheetq_leases (queue, name, token) VALUES (%s, %s, %s) "
                "ON CONFLICT (queue, name) DO UPDATE SET token = EXCLUDED.token",
                (self.queue, change.name, change.token),
            )

    def read_then_apply(
        self,
        reads: Sequence[Read],
        plan: Callable[[list[Snapshot]], Sequence[ChangeSet]],
        *,
        snapshots: Sequence[Snapshot] | None = None,
    ) -> list[ApplyResult]:
        """Read, plan and apply in one transaction that holds the queue's advisory lock, so
        two of them (two enqueues of one key) never interleave (docs/design.md §4)."""
        with self.transaction() as conn:
            self.lock_queue(conn)
            fresh = [self._read(conn, r) for r in reads]
            return [self.apply_in(conn, changes) for changes in plan(fresh)]

    def lock_queue(self, conn: psycopg.Connection[Any]) -> None:
        """Hold this queue's transaction-level advisory lock (enqueue's check-then-insert)."""
        conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (f"sheetq:{self.queue}",))

    def move_block(self, worksheet: str, to: str, rows: Sequence[Row], to_end: int) -> BlockMoved:
        """Move log rows (by their ids) to the log archive, in one transaction."""
        source, dest = self.table(worksheet), self.table(to)
        ids = [r.values[LOG_ID] for r in rows if isinstance(r.values.get(LOG_ID), int)]
        cols = sql.SQL(", ").join(sql.Identifier(c) for c in source.columns)
        query = sql.SQL(
            "WITH moved AS (DELETE FROM {} WHERE queue = %s AND id = ANY(%s) RETURNING *) "
            "INSERT INTO {} (queue, {}) SELECT queue, {} FROM moved ORDER BY id"
        ).format(sql.Identifier(source.name), sql.Identifier(dest.name), cols, cols)
        with self.transaction() as conn:
            moved = conn.execute(query, (self.queue, ids)).rowcount
        return BlockMoved(moved=max(moved, 0))

    def ensure_worksheets(self, spec: Mapping[str, Sequence[str]]) -> dict[str, list[str]]:
        """Create or upgrade the schema (``sheetq init``). Returns ``{"PostgreSQL": [lines]}``
        when migrations ran."""
        self._requests += 1
        try:
            lines = schema.upgrade(self.conn)
        except psycopg.Error as exc:
            raise explain(exc, self.url) from None
        return {"PostgreSQL": lines} if lines else {}

    def upgrade_schema(self) -> tuple[list[tuple[int, str]], int]:
        """Create or upgrade the schema (``sheetq init``): the migrations applied now (number,
        name; empty when it was current) and the schema version the database has."""
        self._requests += 1
        try:
            with self.conn.transaction():
                before = schema.installed(self.conn)
            schema.upgrade(self.conn)
        except psycopg.Error as exc:
            raise explain(exc, self.url) from None
        applied = [(m.version, m.name) for m in schema.MIGRATIONS if m.version > before]
        return applied, schema.VERSION

    @property
    def where(self) -> str:
        """``user@host:port/dbname``, never the password (for messages)."""
        return describe(self.url)

    def fit_grids(self, titles: Sequence[str]) -> list[str]:
        return []

    def format_worksheets(self, queue: str, log: str, archive: str) -> list[str]:
        return []

    def close(self) -> None:
        self.conn.close()

    @property
    def requests_made(self) -> int:
        return self._requests

    def link(self, info: WorkbookInfo, worksheet: str, row: int, task_id: str) -> str:
        return f"sheetq show {task_id}"
