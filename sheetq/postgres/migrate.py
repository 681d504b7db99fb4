"""Writing ``sheetq migrate``'s rows into PostgreSQL (docs/design.md §11 "Moving a queue").

Everything lands in ONE transaction that holds the queue's advisory lock (the lock
``enqueue`` takes), so a half-copied queue is never visible and no enqueue on the
destination races the keys. Running it again never doubles anything:

* tasks are inserted by (queue, ``task_id``) with ``ON CONFLICT DO NOTHING``, and a task
  already in the other table (copied live, then archived in PostgreSQL, or the reverse) is
  not inserted again;
* keys go to ``sheetq_keys`` for each key's winner, ``ON CONFLICT DO NOTHING``;
* a log row is identified by (``task_id``, ``ts``, ``event``, ``run_id``, ``message``),
  counted as a multiset: the n-th source row with one identity is copied only if the
  destination's log and log archive together hold fewer than n rows with it. Two identical
  rows in the sheet (two duplicate enqueues in one second) stay two; a rerun adds none;
  log rows moved to QueueLogArchive in the sheet between two runs are not copied twice.
  No marker table is needed, and nothing depends on sheet row numbers, which shift.

Rows go through ``COPY`` into temporary tables, then one ``INSERT … SELECT`` per table.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

import psycopg
from psycopg import sql

from sheetq.config import Settings
from sheetq.migrate import Source, Written, settle_keys
from sheetq.model import LOG_COLUMNS, QUEUE_COLUMNS
from sheetq.postgres import schema
from sheetq.postgres.codec import to_db
from sheetq.postgres.connection import connect, explain

_IDENTITY = ("task_id", "ts", "event", "run_id", "message")


def write(url: str, settings: Settings, source: Source, *, now: datetime, run_id: str) -> Written:
    """Upgrade the destination's schema if needed, then copy ``source`` into queue
    ``settings.queue_sheet`` in one transaction. Raises ``StoreUnavailable`` (exit 1) when
    the server cannot be reached, ``StoreError`` when it refuses a statement (nothing
    written)."""
    conn = connect(url, source="--to")
    out = Written()
    queue = settings.queue_sheet
    try:
        out.schema_lines = schema.upgrade(conn)
        with conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (f"sheetq:{queue}",))
            held = dict(
                conn.execute(
                    "SELECT idempotency_key, task_id FROM sheetq_keys"
                    " WHERE queue = %s AND idempotency_key = ANY(%s)",
                    (queue, source.keys()),
                ).fetchall()
            )
            out.keys = settle_keys(source, held, settings=settings, now=now, run_id=run_id)
            live = _tasks(conn, queue, "sheetq_tasks", "sheetq_archive", source.tasks)
            archived = _tasks(conn, queue, "sheetq_archive", "sheetq_tasks", source.archive)
            out.copied.tasks, out.copied.archive = len(live), len(archived)
            out.already_present.tasks = len(source.tasks) - len(live)
            out.already_present.archive = len(source.archive) - len(archived)
            _keys(conn, queue, out.keys.keys)
            out.copied.log = _log(conn, queue, "sheetq_log", source.log)
            out.copied.log_archive = _log(conn, queue, "sheetq_log_archive", source.log_archive)
            out.already_present.log = len(source.log) - out.copied.log
            out.already_present.log_archive = len(source.log_archive) - out.copied.log_archive
            copied = live | archived
            out.keys.duplicates = [d for d in out.keys.duplicates if d.task_id in copied]
            losers = [out.keys.logs[t] for t in sorted(copied) if t in out.keys.logs]
            _append_log(conn, queue, losers)
    except psycopg.Error as exc:
        raise explain(exc, url) from None
    finally:
        conn.close()
    return out


def _copy(
    conn: psycopg.Connection[Any], table: str, columns: Sequence[str], rows: Iterable[Sequence[Any]]
) -> None:
    query = sql.SQL("COPY {} ({}) FROM STDIN").format(
        sql.Identifier(table), sql.SQL(", ").join(sql.Identifier(c) for c in columns)
    )
    with conn.cursor() as cur, cur.copy(query) as copy:
        for row in rows:
            copy.write_row(row)


def _tasks(
    conn: psycopg.Connection[Any], queue: str, table: str, other: str, tasks: Sequence[Any]
) -> set[str]:
    """Insert ``tasks`` into ``table`` unless present there or in ``other``; the ids inserted."""
    if not tasks:
        return set()
    conn.execute(
        sql.SQL(
            "CREATE TEMP TABLE sheetq_migrating (LIKE {} INCLUDING DEFAULTS) ON COMMIT DROP"
        ).format(sql.Identifier(table))
    )
    _copy(
        conn,
        "sheetq_migrating",
        ("queue", *QUEUE_COLUMNS),
        ([queue, *(to_db(c, t.values[c]) for c in QUEUE_COLUMNS)] for t in tasks),
    )
    cols = sql.SQL(", ").join(sql.Identifier(c) for c in ("queue", *QUEUE_COLUMNS))
    inserted = conn.execute(
        sql.SQL(
            "INSERT INTO {table} ({cols}) SELECT {cols} FROM sheetq_migrating m"
            " WHERE NOT EXISTS (SELECT 1 FROM {other} o"
            "   WHERE o.queue = m.queue AND o.task_id = m.task_id)"
            " ORDER BY m.created_at, m.task_id"
            " ON CONFLICT (queue, task_id) DO NOTHING RETURNING task_id"
        ).format(table=sql.Identifier(table), other=sql.Identifier(other), cols=cols)
    ).fetchall()
    conn.execute("DROP TABLE sheetq_migrating")
    return {str(r[0]) for r in inserted}


def _keys(conn: psycopg.Connection[Any], queue: str, keys: Sequence[tuple[str, str, str]]) -> None:
    if not keys:
        return
    conn.execute(
        "INSERT INTO sheetq_keys (queue, idempotency_key, task_id, payload_hash)"
        " SELECT %s, k, t, h FROM unnest(%s::text[], %s::text[], %s::text[]) AS n(k, t, h)"
        " ON CONFLICT (queue, idempotency_key) DO NOTHING",
        (queue, [k[0] for k in keys], [k[1] for k in keys], [k[2] for k in keys]),
    )


def _log(
    conn: psycopg.Connection[Any], queue: str, table: str, rows: Sequence[Mapping[str, Any]]
) -> int:
    """Copy the log rows the destination lacks (multiset by identity); how many."""
    if not rows:
        return 0
    conn.execute(
        "CREATE TEMP TABLE sheetq_migrating_log (seq bigint, queue text, ts timestamptz,"
        " task_id text, type text, event text, status text, retry_count integer,"
        " message text, run_id text, duration_ms integer) ON COMMIT DROP"
    )
    _copy(
        conn,
        "sheetq_migrating_log",
        ("seq", "queue", *LOG_COLUMNS),
        ([n, queue, *(to_db(c, r[c]) for c in LOG_COLUMNS)] for n, r in enumerate(rows)),
    )
    same = " AND ".join(f"d.{c} = s.{c}" for c in _IDENTITY)
    cols = ", ".join(LOG_COLUMNS)
    inserted = conn.execute(
        sql.SQL(
            "INSERT INTO {table} (queue, " + cols + ")"
            " SELECT queue, " + cols + " FROM ("
            "   SELECT m.*, row_number() OVER (PARTITION BY "
            + ", ".join(_IDENTITY)
            + "     ORDER BY seq) AS nth FROM sheetq_migrating_log m) s"
            " WHERE s.nth > (SELECT count(*) FROM sheetq_log d"
            "     WHERE d.queue = s.queue AND " + same + ")"
            "   + (SELECT count(*) FROM sheetq_log_archive d"
            "     WHERE d.queue = s.queue AND " + same + ")"
            " ORDER BY s.seq"
        ).format(table=sql.Identifier(table))
    ).rowcount
    conn.execute("DROP TABLE sheetq_migrating_log")
    return max(inserted, 0)


def _append_log(
    conn: psycopg.Connection[Any], queue: str, rows: Sequence[Mapping[str, Any]]
) -> None:
    if rows:
        _copy(
            conn,
            "sheetq_log",
            ("queue", *LOG_COLUMNS),
            ([queue, *(to_db(c, r[c]) for c in LOG_COLUMNS)] for r in rows),
        )
