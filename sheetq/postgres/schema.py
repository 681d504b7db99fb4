"""The PostgreSQL schema, created and upgraded by numbered migrations (docs/design.md §11).

``sheetq init`` runs ``upgrade``: each migration not yet recorded in ``sheetq_migrations``
runs in the same transaction as its record, under an advisory lock, so two ``init`` at once
apply each migration once. Every other command calls ``check``, which refuses a database
whose schema is older than this sheetq (exit 2, "run `sheetq init`") or newer.

Several queues share the tables: each row carries ``queue``, the queue's name (its Queue
worksheet title). Columns are those of docs/design.md §2, typed: times are ``timestamptz``,
``retry_count`` and ``duration_ms`` integers, the rest text.
"""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg.rows import tuple_row

from sheetq.errors import SchemaError

_LOCK = 0x5E_E7_0001  # pg_advisory_xact_lock key held while migrating

_TASK_COLUMNS = """
    queue           text        NOT NULL,
    task_id         text        NOT NULL,
    created_at      timestamptz NOT NULL,
    type            text        NOT NULL,
    payload_json    text        NOT NULL,
    status          text        NOT NULL CHECK (status IN
                        ('pending', 'processing', 'retry', 'done', 'failed', 'skipped')),
    retry_count     integer     NOT NULL DEFAULT 0 CHECK (retry_count >= 0),
    next_retry_at   timestamptz,
    last_error      text        NOT NULL DEFAULT '',
    idempotency_key text        NOT NULL,
    updated_at      timestamptz NOT NULL,
    error_class     text        NOT NULL DEFAULT '',
    result          text        NOT NULL DEFAULT '',
    lease_owner     text        NOT NULL DEFAULT '',
    lease_until     timestamptz,
    payload_hash    text        NOT NULL,
    alerted_at      timestamptz,
    owner           text        NOT NULL DEFAULT ''
"""

_LOG_COLUMNS = """
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    queue       text        NOT NULL,
    ts          timestamptz NOT NULL,
    task_id     text        NOT NULL,
    type        text        NOT NULL,
    event       text        NOT NULL,
    status      text        NOT NULL,
    retry_count integer     NOT NULL DEFAULT 0,
    message     text        NOT NULL DEFAULT '',
    run_id      text        NOT NULL DEFAULT '',
    duration_ms integer
"""

MIGRATIONS: tuple[tuple[int, str, str], ...] = (
    (
        1,
        "tasks, keys, log, archive, leases",
        f"""
CREATE TABLE sheetq_tasks ({_TASK_COLUMNS}, PRIMARY KEY (queue, task_id));
-- claims: due waiting tasks, oldest first
CREATE INDEX sheetq_tasks_waiting ON sheetq_tasks (queue, created_at, task_id)
    WHERE status IN ('pending', 'retry');
-- recovery: leases that ran out
CREATE INDEX sheetq_tasks_leased ON sheetq_tasks (queue, lease_until)
    WHERE status = 'processing';
-- alerts owed
CREATE INDEX sheetq_tasks_owed ON sheetq_tasks (queue, updated_at)
    WHERE status = 'failed' AND alerted_at IS NULL;
CREATE INDEX sheetq_tasks_status ON sheetq_tasks (queue, status, updated_at);
CREATE INDEX sheetq_tasks_key ON sheetq_tasks (queue, idempotency_key);

CREATE TABLE sheetq_archive ({_TASK_COLUMNS},
    archived_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (queue, task_id));
CREATE INDEX sheetq_archive_key ON sheetq_archive (queue, idempotency_key);

-- docs/design.md §4/§11: one task per key over live and archived tasks, whatever races.
CREATE TABLE sheetq_keys (
    queue           text NOT NULL,
    idempotency_key text NOT NULL,
    task_id         text NOT NULL,
    payload_hash    text NOT NULL,
    PRIMARY KEY (queue, idempotency_key)
);

CREATE TABLE sheetq_log ({_LOG_COLUMNS});
CREATE INDEX sheetq_log_task ON sheetq_log (queue, task_id, id);
CREATE INDEX sheetq_log_ts ON sheetq_log (queue, ts);

CREATE TABLE sheetq_log_archive ({_LOG_COLUMNS});
CREATE INDEX sheetq_log_archive_task ON sheetq_log_archive (queue, task_id, id);

-- named compare-and-set leases (one alert digest at a time per queue)
CREATE TABLE sheetq_leases (
    queue text NOT NULL,
    name  text NOT NULL,
    token text NOT NULL,
    PRIMARY KEY (queue, name)
);

-- wake `sheetq worker` (LISTEN sheetq) when a task becomes claimable
CREATE FUNCTION sheetq_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('sheetq', q.queue)
    FROM (SELECT DISTINCT queue FROM changed WHERE status IN ('pending', 'retry')) AS q;
    RETURN NULL;
END $$;
CREATE TRIGGER sheetq_tasks_inserted AFTER INSERT ON sheetq_tasks
    REFERENCING NEW TABLE AS changed FOR EACH STATEMENT EXECUTE FUNCTION sheetq_notify();
CREATE TRIGGER sheetq_tasks_updated AFTER UPDATE ON sheetq_tasks
    REFERENCING NEW TABLE AS changed FOR EACH STATEMENT EXECUTE FUNCTION sheetq_notify();
""",
    ),
    (
        2,
        "the spreadsheet mirror's last-written state",
        """
-- docs/design.md §12: what `sheetq mirror` last wrote into each Queue row of the spreadsheet, so
-- that a pass tells a manager's edit (the cell differs from what the mirror wrote) from a
-- change in PostgreSQL (the task differs from what the mirror wrote).
CREATE TABLE sheetq_mirror (
    queue   text NOT NULL,
    task_id text NOT NULL,
    status  text NOT NULL,   -- the status cell as written
    owner   text NOT NULL,   -- the owner cell as written
    digest  text NOT NULL,   -- sha1 of every sheetq cell as written (sheetq.mirror.digest)
    PRIMARY KEY (queue, task_id)
);
-- one row per mirrored queue: the token the last write put in the sheet (a named range),
-- how far the log is mirrored, when the last pass wrote
CREATE TABLE sheetq_mirror_state (
    queue        text PRIMARY KEY,
    token        text NOT NULL DEFAULT '',
    last_log_id  bigint NOT NULL DEFAULT 0,
    last_pass    timestamptz,
    last_attempt timestamptz,
    last_error   text NOT NULL DEFAULT ''
);
""",
    ),
)

VERSION = MIGRATIONS[-1][0]


def _scalar(conn: psycopg.Connection[Any], query: str) -> Any:
    with conn.cursor(row_factory=tuple_row) as cur:
        row = cur.execute(query).fetchone()
    return row[0] if row else None


def _installed(conn: psycopg.Connection[Any]) -> int:
    """The schema version recorded in the database (0: none)."""
    if not _scalar(conn, "SELECT to_regclass('sheetq_migrations') IS NOT NULL"):
        return 0
    return int(_scalar(conn, "SELECT coalesce(max(version), 0) FROM sheetq_migrations") or 0)


def upgrade(conn: psycopg.Connection[Any]) -> list[str]:
    """Apply the migrations this database lacks, each in one transaction with its record.
    Returns one line per migration applied (empty: already current). Raises
    ``SchemaError`` when the database is newer than this sheetq."""
    applied: list[str] = []
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (_LOCK,))
        conn.execute(
            "CREATE TABLE IF NOT EXISTS sheetq_migrations ("
            " version integer PRIMARY KEY, name text NOT NULL,"
            " applied_at timestamptz NOT NULL DEFAULT now())"
        )
        current = _installed(conn)
        if current > VERSION:
            raise SchemaError(_newer(current))
        for version, name, sql in MIGRATIONS:
            if version <= current:
                continue
            conn.execute(sql.encode())
            conn.execute(
                "INSERT INTO sheetq_migrations (version, name) VALUES (%s, %s)", (version, name)
            )
            applied.append(f"PostgreSQL schema migration {version}: {name}")
    return applied


def check(conn: psycopg.Connection[Any]) -> None:
    """Refuse a database without this sheetq's schema version (``SchemaError``, exit 2)."""
    current = _installed(conn)
    if current == VERSION:
        return
    if current > VERSION:
        raise SchemaError(_newer(current))
    have = "has no sheetq schema" if current == 0 else f"has schema version {current}"
    raise SchemaError(
        f"the PostgreSQL database {have}; this sheetq needs version {VERSION}: run "
        "`sheetq init` to create or upgrade it"
    )


def _newer(current: int) -> str:
    return (
        f"the PostgreSQL database has schema version {current}, newer than this sheetq "
        f"knows ({VERSION}): upgrade sheetq"
    )


def installed(conn: psycopg.Connection[Any]) -> int:
    """The schema version this database has (0: none), as ``init`` and ``doctor`` report it."""
    return _installed(conn)
