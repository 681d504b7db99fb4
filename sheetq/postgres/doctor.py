"""``sheetq doctor`` on PostgreSQL (docs/design.md §11): the server answers, the schema is this
sheetq's, the queue's counts, and a write goes through. Never prints the password (errors
come through ``connection.connect``, which names only user, host and database)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import psycopg
from psycopg.rows import tuple_row

from sheetq.checks import Check, fine, problem
from sheetq.config import Settings
from sheetq.errors import SheetqError
from sheetq.postgres import schema
from sheetq.postgres.connection import connect, describe, explain

FIX_CONNECT = (
    "check SHEETQ_DATABASE_URL / --database-url (postgresql://USER@HOST:PORT/DBNAME): the host "
    "and port are reachable, the user exists, the password is right (in the URL, PGPASSWORD "
    "or ~/.pgpass)"
)
STATUS_ORDER = ("pending", "processing", "retry", "done", "failed", "skipped")


OLDEST_SERVER = 130000  # PostgreSQL 13, in libpq's PQserverVersion numbering
CLOCK_WARN = 1.0  # seconds between this host's clock and the server's before doctor warns


def clock_check(conn: psycopg.Connection[Any]) -> Check:
    """This host's clock against the server's (docs/design.md §11 "Time is the database's"):
    the offset in seconds, read halfway through a round trip; a warning (an ok line with a
    fix) above ``CLOCK_WARN``. sheetq's leases and due times use the server's clock, so a
    host that is off does not run tasks twice; its handlers' own times are still off."""
    before = datetime.now(UTC)
    with conn.transaction(), conn.cursor(row_factory=tuple_row) as cur:
        found = cur.execute("SELECT clock_timestamp()").fetchone()
    after = datetime.now(UTC)
    assert found is not None
    offset = ((before + (after - before) / 2) - found[0]).total_seconds()
    way = "ahead of" if offset > 0 else "behind"
    said = f"this host's clock is {abs(offset):.3f}s {way} the server's"
    if abs(offset) <= CLOCK_WARN:
        return fine("clock", f"{said}; leases and due times use the server's clock")
    return fine(
        "clock",
        f"warning: {said} (over {CLOCK_WARN:g}s); sheetq's leases and due times use the "
        "server's clock, but the handlers on this host see the wrong time",
        "synchronise this host's clock (NTP: chrony or systemd-timesyncd)",
    )


def check_postgres(settings: Settings) -> list[Check]:
    """Connection and server version, schema version, the queue's counts, write access."""
    where = describe(settings.database_url)
    try:
        conn = connect(settings.database_url)
    except SheetqError as exc:
        return [problem("database", exc.message, FIX_CONNECT)]
    try:
        return _checks(conn, settings, where)
    except psycopg.Error as exc:  # no privilege on sheetq's tables, a lost connection…
        return [problem("database", explain(exc, settings.database_url).message)]
    finally:
        conn.close()


def _checks(conn: psycopg.Connection[Any], settings: Settings, where: str) -> list[Check]:
    with conn.cursor(row_factory=tuple_row) as cur:
        version = cur.execute("SHOW server_version").fetchone()
    server = str(version[0]).split()[0] if version else "?"
    if conn.info.server_version < OLDEST_SERVER:
        return [
            problem(
                "database",
                f"PostgreSQL {server} at {where} is older than 13, which sheetq needs",
                "upgrade the server (or rent any PostgreSQL 13 or newer)",
            )
        ]
    checks = [fine("database", f"PostgreSQL {server} at {where}"), clock_check(conn)]
    with conn.transaction():
        have = schema.installed(conn)
    if have != schema.VERSION:
        try:
            with conn.transaction():
                schema.check(conn)
        except SheetqError as exc:
            fix = "upgrade sheetq" if have > schema.VERSION else "run `sheetq init`"
            return [*checks, problem("schema", exc.message, fix)]
    checks.append(fine("schema", f"version {have}, as this sheetq expects"))
    queue = settings.queue_sheet
    with conn.transaction(), conn.cursor(row_factory=tuple_row) as cur:
        counts: dict[str, int] = dict(
            cur.execute(
                "SELECT status, count(*) FROM sheetq_tasks WHERE queue = %s GROUP BY status",
                (queue,),
            ).fetchall()
        )
        archived = cur.execute(
            "SELECT count(*) FROM sheetq_archive WHERE queue = %s", (queue,)
        ).fetchone()
    parts = [f"{counts[s]} {s}" for s in STATUS_ORDER if counts.get(s)]
    held = int(archived[0]) if archived else 0
    detail = (", ".join(parts) or "no tasks") + f"; {held} archived"
    checks.append(fine(f"queue {queue}", detail))
    checks.append(_write(conn, queue))
    return checks


def _write(conn: psycopg.Connection[Any], queue: str) -> Check:
    """A write that is rolled back: a lease row inserted, never committed."""
    try:
        with conn.transaction(force_rollback=True):
            conn.execute(
                "INSERT INTO sheetq_leases (queue, name, token) VALUES (%s, %s, %s)",
                (queue, "sheetq_doctor_probe", "probe"),
            )
    except psycopg.Error as exc:
        first = str(exc).strip().splitlines()
        return problem(
            "write access",
            f"this user cannot write sheetq's tables: {first[0] if first else exc}",
            "GRANT SELECT, INSERT, UPDATE, DELETE on the sheetq_* tables to this user",
        )
    return fine("write access", "a row was written and rolled back (this user can write)")
