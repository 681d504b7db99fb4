"""The PostgreSQL side of the mirror (docs/design.md §12; planning in ``sheetq.mirror``).

Tables (migration 2): ``sheetq_mirror`` — per task, what the mirror last wrote into its row
(status cell, owner cell, digest of all sheetq cells); ``sheetq_mirror_state`` — per queue,
the token of the last write that landed in the sheet, the last log id mirrored, when the
last pass wrote and the last failure.

Every statement is a named query of ``queries/mirror.sql``, run on the connection of a
``sheetq.postgres.session.Session`` (one transaction at a time, the schema checked on the
first). The window is read as the §2 cell texts straight from SQL (``to_char`` for times),
so a pass over 50,000 tasks builds no ``datetime`` per cell. The managers' edits are
written with their own statements (``mirror_requeue``, ``mirror_owner``, ``mirror_log``),
stamped with the server's clock unless ``SHEETQ_NOW`` pretends (``stamp``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import psycopg
from psycopg.rows import tuple_row

from sheetq.errors import StoreError
from sheetq.mirror import OPEN, Texts, Written
from sheetq.model import LOG_COLUMNS
from sheetq.postgres.codec import INT_COLUMNS, TIME_COLUMNS, to_db, values_from_record
from sheetq.postgres.queries import QUERIES
from sheetq.postgres.session import Session, pretend
from sheetq.sheet.store import CellValue, ChangeSet

# What a manager's edit may change (``sheetq.mirror.plan_edits``), each set of columns
# written by its own statement; an update of any other columns is refused.
_REQUEUE = frozenset(
    {
        "status",
        "next_retry_at",
        "error_class",
        "alerted_at",
        "lease_owner",
        "lease_until",
        "updated_at",
    }
)
_OWNER = frozenset({"owner", "updated_at"})
_PRIORITY = frozenset({"priority", "updated_at"})
_EDITS = {_REQUEUE: "mirror_requeue", _OWNER: "mirror_owner", _PRIORITY: "mirror_priority"}
_STAMPED = ("ts",)  # a log row's cells that must not be empty


def _log_cell(column: str, value: CellValue | None) -> Any:
    """One cell of a new log row as the database stores it (``codec.to_db``): text cells
    as they are, an empty cell as the column's empty value. Raises ``StoreError`` for a
    row without its time stamp, ``InputError`` for a time or number that is not one."""
    if value is None or value == "":
        if column in _STAMPED:
            raise StoreError(f"sheetq_log: a new row without {column}")
        return to_db(column, "")
    if isinstance(value, str) and column not in INT_COLUMNS and column not in TIME_COLUMNS:
        return value
    return to_db(column, value)


@dataclass
class MirrorState:
    """``sheetq_mirror_state`` of one queue (defaults when no pass ran yet)."""

    token: str = ""
    last_log_id: int = 0
    last_pass: datetime | None = None
    last_attempt: datetime | None = None
    last_error: str = ""


@dataclass
class Loaded:
    """What a pass reads from PostgreSQL before the sheet write."""

    state: MirrorState
    truth: dict[str, Texts]
    written: dict[str, Written]
    max_log_id: int


class PgMirror:
    """The mirror's reads and writes on one queue's tables, over ``session``'s connection
    (``session.transaction()`` for the transactions it opens itself; the other methods run
    in the caller's). Database errors become ``StoreError`` (exit 1) there."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self.queue = session.queue

    # --- reads ---------------------------------------------------------------------------

    def state(self, conn: psycopg.Connection[Any]) -> MirrorState:
        row = conn.execute(QUERIES["mirror_state"], {"queue": self.queue}).fetchone()
        if row is None:
            return MirrorState()
        return MirrorState(
            str(row["token"]),
            int(row["last_log_id"]),
            row["last_pass"],
            row["last_attempt"],
            str(row["last_error"]),
        )

    def load(self, conn: psycopg.Connection[Any], now: datetime, keep: float) -> Loaded:
        """The window (open tasks, and finished ones updated within ``keep`` seconds of
        ``now``) as cell texts in ``created_at`` order, what the mirror last wrote, its
        state, and the newest log id."""
        state = self.state(conn)
        params = {"queue": self.queue, "open": list(OPEN), "since": now - timedelta(seconds=keep)}
        with conn.cursor(row_factory=tuple_row) as cur:
            truth = {row[0]: tuple(row) for row in cur.execute(QUERIES["mirror_window"], params)}
            written = {
                str(t): Written(str(s), str(o), str(d))
                for t, s, o, d in cur.execute(QUERIES["mirror_written"], {"queue": self.queue})
            }
            top = cur.execute(QUERIES["mirror_top_log_id"], {"queue": self.queue}).fetchone()
        return Loaded(state, truth, written, int(top[0]) if top else 0)

    def tasks(self, conn: psycopg.Connection[Any], task_ids: Iterable[str]) -> dict[str, Texts]:
        """Some tasks as cell texts, in ``created_at`` order, each locked (``FOR UPDATE``)
        until the transaction ends: the managers' edits are planned from them."""
        with conn.cursor(row_factory=tuple_row) as cur:
            rows = cur.execute(
                QUERIES["mirror_tasks"], {"queue": self.queue, "ids": list(task_ids)}
            ).fetchall()
        return {row[0]: tuple(row) for row in rows}

    def known(self, conn: psycopg.Connection[Any], task_ids: Iterable[str]) -> set[str]:
        """Which of ``task_ids`` are tasks of this queue, live or archived."""
        ids = list(task_ids)
        if not ids:
            return set()
        rows = conn.execute(QUERIES["mirror_known"], {"queue": self.queue, "ids": ids})
        return {str(r["task_id"]) for r in rows}

    def logs_since(
        self, conn: psycopg.Connection[Any], after: int, limit: int
    ) -> list[tuple[int, Mapping[str, CellValue]]]:
        """Log rows with an id above ``after``, oldest first, at most ``limit``."""
        rows = conn.execute(
            QUERIES["mirror_logs_since"], {"queue": self.queue, "after": after, "limit": limit}
        )
        return [(int(r["id"]), values_from_record(r, LOG_COLUMNS)) for r in rows]

    # --- writes --------------------------------------------------------------------------

    def stamp(self, conn: psycopg.Connection[Any], now: datetime) -> datetime:
        """The moment the managers' edits are stamped with (``updated_at``, a requeue's
        ``next_retry_at``, the log rows' ``ts``), to the second: the server's clock, or
        ``now`` when it is pretended (``SHEETQ_NOW``; ``session.pretend``)."""
        row = conn.execute(QUERIES["clock"], {"at": pretend(now)}).fetchone()
        assert row is not None
        return row["now"]  # type: ignore[no-any-return]

    def apply_edits(self, conn: psycopg.Connection[Any], changes: ChangeSet) -> list[str]:
        """The managers' edits (planned by ``sheetq.mirror.plan_edits`` from the rows
        ``tasks`` locked), with their log rows, in the caller's transaction: each requeue
        (``mirror_requeue``) and owner (``mirror_owner``) by task id, the log rows appended
        in the order planned (``mirror_log``). Cell texts become database values by
        ``codec.to_db``. Returns the task ids not found (gone meanwhile). Raises
        ``StoreError`` for a change a manager's edit never makes (other columns, another
        table, a delete, a move, a lease)."""
        if changes.deletes or changes.moves or changes.lease is not None:
            raise StoreError("the mirror writes only requeues and owners from the sheet")
        missing: list[str] = []
        for update in changes.updates:
            name = _EDITS.get(frozenset(update.values))
            if name is None or update.key is None:
                raise StoreError(
                    f"the mirror cannot write {sorted(update.values)} of task {update.key!r} "
                    "from the sheet"
                )
            params = {column: to_db(column, value) for column, value in update.values.items()}
            params |= {"queue": self.queue, "task_id": update.key}
            if conn.execute(QUERIES[name], params).fetchone() is None:
                missing.append(update.key)
        rows = []
        for append in changes.appends:
            if append.worksheet != self.session.settings.log_sheet:
                raise StoreError(f"the mirror appends only log rows, not to {append.worksheet!r}")
            row = {column: _log_cell(column, append.values.get(column)) for column in LOG_COLUMNS}
            rows.append({"queue": self.queue, **row})
        if rows:
            with conn.cursor() as cur:
                cur.executemany(QUERIES["mirror_log"], rows)
        return missing

    def record(
        self,
        conn: psycopg.Connection[Any],
        *,
        record: Mapping[str, Written],
        forget: Sequence[str],
        token: str | None,
        last_log_id: int | None,
        now: datetime | None,
    ) -> None:
        """What a write put in the sheet: rows recorded / forgotten, and (when given) the
        token it carried, the last log id it appended and the time it landed."""
        if record:
            ids = list(record)
            conn.execute(
                QUERIES["mirror_record"],
                {
                    "queue": self.queue,
                    "ids": ids,
                    "statuses": [record[i].status for i in ids],
                    "owners": [record[i].owner for i in ids],
                    "digests": [record[i].digest for i in ids],
                },
            )
        if forget:
            conn.execute(QUERIES["mirror_forget"], {"queue": self.queue, "ids": list(forget)})
        if token is None and now is None:
            return
        conn.execute(
            QUERIES["mirror_landed"],
            {"queue": self.queue, "token": token, "last_log_id": last_log_id, "now": now},
        )

    def record_failure(self, now: datetime, error: str) -> None:
        """A pass that could not write to the sheet: when, and why (for ``status``)."""
        with self.session.transaction() as conn:
            conn.execute(
                QUERIES["mirror_failed"], {"queue": self.queue, "now": now, "error": error[:500]}
            )

    def lag(self, now: datetime) -> dict[str, Any]:
        """How far behind the sheet is: the last pass that wrote, tasks changed since it,
        log rows not yet mirrored, the last failure."""
        with self.session.transaction() as conn:
            state = self.state(conn)
            pending = conn.execute(
                QUERIES["mirror_pending"],
                {
                    "queue": self.queue,
                    "since": state.last_pass or datetime.min.replace(tzinfo=now.tzinfo),
                    "last_log_id": state.last_log_id,
                },
            ).fetchone()
        return {
            "last_pass": state.last_pass,
            "lag_seconds": None
            if state.last_pass is None
            else max(0, round((now - state.last_pass).total_seconds())),
            "tasks_pending": int(pending["tasks"]) if pending else 0,
            "log_rows_pending": int(pending["logs"]) if pending else 0,
            "last_error": state.last_error
            if state.last_attempt and (not state.last_pass or state.last_attempt > state.last_pass)
            else "",
        }
