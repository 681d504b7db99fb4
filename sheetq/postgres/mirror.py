"""The PostgreSQL side of the mirror (docs/design.md §12; planning in ``sheetq.mirror``).

Tables (migration 2): ``sheetq_mirror`` — per task, what the mirror last wrote into its row
(status cell, owner cell, digest of all sheetq cells); ``sheetq_mirror_state`` — per queue,
the token of the last write that landed in the sheet, the last log id mirrored, when the
last pass wrote and the last failure.

The window is read as the §2 cell texts straight from SQL (``to_char`` for times), so a pass
over 50,000 tasks builds no ``datetime`` per cell.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import psycopg
from psycopg import sql
from psycopg.rows import tuple_row

from sheetq.mirror import OPEN, Texts, Written
from sheetq.model import LOG_COLUMNS, QUEUE_COLUMNS
from sheetq.postgres.codec import TIME_COLUMNS, values_from_record
from sheetq.postgres.store import PgStore
from sheetq.sheet.store import CellValue, ChangeSet


def _text_columns() -> sql.Composable:
    parts: list[sql.Composable] = []
    for name in QUEUE_COLUMNS:
        column = sql.Identifier(name)
        if name in TIME_COLUMNS:
            parts.append(
                sql.SQL(
                    "coalesce(to_char({} AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"'), '')"
                ).format(column)
            )
        else:
            parts.append(sql.SQL("{}::text").format(column))
    return sql.SQL(", ").join(parts)


_TEXTS = _text_columns()


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
    """The mirror's reads and writes on one queue's tables, over a ``PgStore``."""

    def __init__(self, store: PgStore) -> None:
        self.store = store
        self.queue = store.queue

    # --- reads ---------------------------------------------------------------------------

    def state(self, conn: psycopg.Connection[Any]) -> MirrorState:
        row = conn.execute(
            "SELECT token, last_log_id, last_pass, last_attempt, last_error "
            "FROM sheetq_mirror_state WHERE queue = %s",
            (self.queue,),
        ).fetchone()
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
        since = now - timedelta(seconds=keep)
        truth = self._texts(
            conn,
            sql.SQL("(status = ANY(%s) OR updated_at >= %s)"),
            [list(OPEN), since],
        )
        with conn.cursor(row_factory=tuple_row) as cur:
            written = {
                str(t): Written(str(s), str(o), str(d))
                for t, s, o, d in cur.execute(
                    "SELECT task_id, status, owner, digest FROM sheetq_mirror WHERE queue = %s",
                    (self.queue,),
                )
            }
            top = cur.execute(
                "SELECT coalesce(max(id), 0) FROM sheetq_log WHERE queue = %s", (self.queue,)
            ).fetchone()
        return Loaded(state, truth, written, int(top[0]) if top else 0)

    def _texts(
        self,
        conn: psycopg.Connection[Any],
        where: sql.Composable,
        params: Sequence[Any],
        *,
        lock: bool = False,
    ) -> dict[str, Texts]:
        query = sql.SQL(
            "SELECT {} FROM sheetq_tasks WHERE queue = %s AND {} ORDER BY created_at, task_id{}"
        ).format(_TEXTS, where, sql.SQL(" FOR UPDATE" if lock else ""))
        with conn.cursor(row_factory=tuple_row) as cur:
            rows = cur.execute(query, [self.queue, *params]).fetchall()
        return {row[0]: tuple(row) for row in rows}

    def tasks(
        self, conn: psycopg.Connection[Any], task_ids: Iterable[str], *, lock: bool = False
    ) -> dict[str, Texts]:
        """Some tasks as cell texts (``lock``: ``FOR UPDATE``, for applying edits)."""
        return self._texts(conn, sql.SQL("task_id = ANY(%s)"), [list(task_ids)], lock=lock)

    def known(self, conn: psycopg.Connection[Any], task_ids: Iterable[str]) -> set[str]:
        """Which of ``task_ids`` are tasks of this queue, live or archived."""
        ids = list(task_ids)
        if not ids:
            return set()
        with conn.cursor(row_factory=tuple_row) as cur:
            rows = cur.execute(
                "SELECT task_id FROM sheetq_tasks WHERE queue = %s AND task_id = ANY(%s) "
                "UNION SELECT task_id FROM sheetq_archive WHERE queue = %s AND task_id = ANY(%s)",
                (self.queue, ids, self.queue, ids),
            ).fetchall()
        return {str(r[0]) for r in rows}

    def logs_since(
        self, conn: psycopg.Connection[Any], after: int, limit: int
    ) -> list[tuple[int, Mapping[str, CellValue]]]:
        """Log rows with an id above ``after``, oldest first, at most ``limit``."""
        query = sql.SQL(
            "SELECT id, {} FROM sheetq_log WHERE queue = %s AND id > %s ORDER BY id LIMIT %s"
        ).format(sql.SQL(", ").join(sql.Identifier(c) for c in LOG_COLUMNS))
        return [
            (int(r["id"]), values_from_record(r, LOG_COLUMNS))
            for r in conn.execute(query, (self.queue, after, limit))
        ]

    # --- writes --------------------------------------------------------------------------

    def apply_edits(self, conn: psycopg.Connection[Any], changes: ChangeSet) -> None:
        """The managers' edits (planned by ``sheetq.mirror.plan_edits`` from locked rows),
        with their log rows, in the caller's transaction."""
        if changes:
            self.store.apply_in(conn, changes)

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
                "INSERT INTO sheetq_mirror (queue, task_id, status, owner, digest) "
                "SELECT %s, * FROM unnest(%s::text[], %s::text[], %s::text[], %s::text[]) "
                "ON CONFLICT (queue, task_id) DO UPDATE SET status = EXCLUDED.status, "
                "owner = EXCLUDED.owner, digest = EXCLUDED.digest",
                (
                    self.queue,
                    ids,
                    [record[i].status for i in ids],
                    [record[i].owner for i in ids],
                    [record[i].digest for i in ids],
                ),
            )
        if forget:
            conn.execute(
                "DELETE FROM sheetq_mirror WHERE queue = %s AND task_id = ANY(%s)",
                (self.queue, list(forget)),
            )
        if token is None and now is None:
            return
        conn.execute(
            "INSERT INTO sheetq_mirror_state AS s (queue, token, last_log_id, last_pass, "
            "last_attempt, last_error) VALUES (%s, coalesce(%s, ''), coalesce(%s, 0), %s, %s, '') "
            "ON CONFLICT (queue) DO UPDATE SET token = coalesce(%s, s.token), "
            "last_log_id = coalesce(%s, s.last_log_id), last_pass = coalesce(%s, s.last_pass), "
            "last_attempt = coalesce(%s, s.last_attempt), last_error = ''",
            (self.queue, token, last_log_id, now, now, token, last_log_id, now, now),
        )

    def record_failure(self, now: datetime, error: str) -> None:
        """A pass that could not write to the sheet: when, and why (for ``status``)."""
        with self.store.transaction() as conn:
            conn.execute(
                "INSERT INTO sheetq_mirror_state AS s (queue, last_attempt, last_error) "
                "VALUES (%s, %s, %s) ON CONFLICT (queue) DO UPDATE SET "
                "last_attempt = EXCLUDED.last_attempt, last_error = EXCLUDED.last_error",
                (self.queue, now, error[:500]),
            )

    def lag(self, now: datetime) -> dict[str, Any]:
        """How far behind the sheet is: the last pass that wrote, tasks changed since it,
        log rows not yet mirrored, the last failure."""
        with self.store.transaction() as conn:
            state = self.state(conn)
            with conn.cursor(row_factory=tuple_row) as cur:
                tasks = cur.execute(
                    "SELECT count(*) FROM sheetq_tasks WHERE queue = %s AND updated_at > %s",
                    (self.queue, state.last_pass or datetime.min.replace(tzinfo=now.tzinfo)),
                ).fetchone()
                logs = cur.execute(
                    "SELECT count(*) FROM sheetq_log WHERE queue = %s AND id > %s",
                    (self.queue, state.last_log_id),
                ).fetchone()
        return {
            "last_pass": state.last_pass,
            "lag_seconds": None
            if state.last_pass is None
            else max(0, round((now - state.last_pass).total_seconds())),
            "tasks_pending": int(tasks[0]) if tasks else 0,
            "log_rows_pending": int(logs[0]) if logs else 0,
            "last_error": state.last_error
            if state.last_attempt and (not state.last_pass or state.last_attempt > state.last_pass)
            else "",
        }
