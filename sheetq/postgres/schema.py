"""The PostgreSQL schema, created and upgraded by numbered migration files (docs/design.md §11).

The migrations are ``sheetq/postgres/migrations/NNNN_name.sql``, numbered from 1 without
gaps; a new one is a new file with the next number, never an edit of a shipped one.

``sheetq init`` runs ``upgrade``: each migration not yet recorded in ``sheetq_migrations``
runs in the same transaction as its record, under an advisory lock, so two ``init`` at once
apply each migration once. Every other command calls ``check``, which refuses a database
whose schema is older than this sheetq (exit 2, "run `sheetq init`") or newer.

Several queues share the tables: each row carries ``queue``, the queue's name (its Queue
worksheet title). Columns are those of docs/design.md §2, typed: times are ``timestamptz``,
``retry_count`` and ``duration_ms`` integers, the rest text.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from typing import Any

import psycopg
from psycopg.rows import tuple_row

from sheetq.errors import SchemaError
from sheetq.postgres.queries import QUERIES

_LOCK = 0x5E_E7_0001  # pg_advisory_xact_lock key held while migrating


@dataclass(frozen=True)
class Migration:
    """One numbered migration file, ``migrations/NNNN_name.sql``: its first line, a ``--``
    comment, names it."""

    version: int
    name: str
    sql: str


def _load() -> tuple[Migration, ...]:
    found = []
    for entry in resources.files("sheetq.postgres").joinpath("migrations").iterdir():
        if not entry.name.endswith(".sql"):
            continue
        text = entry.read_text(encoding="utf-8")
        found.append(Migration(int(entry.name[:4]), text.splitlines()[0].lstrip("- "), text))
    found.sort(key=lambda m: m.version)
    if [m.version for m in found] != list(range(1, len(found) + 1)):
        raise RuntimeError(f"sheetq/postgres/migrations: numbers not 1..N: {found}")
    return tuple(found)


MIGRATIONS = _load()

VERSION = MIGRATIONS[-1].version


def _scalar(conn: psycopg.Connection[Any], query: str) -> Any:
    with conn.cursor(row_factory=tuple_row) as cur:
        row = cur.execute(query).fetchone()
    return row[0] if row else None


def _installed(conn: psycopg.Connection[Any]) -> int:
    """The schema version recorded in the database (0: none)."""
    if not _scalar(conn, "SELECT to_regclass('sheetq_migrations') IS NOT NULL"):
        return 0
    return int(_scalar(conn, QUERIES["schema_version"]) or 0)


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
        for migration in MIGRATIONS:
            if migration.version <= current:
                continue
            conn.execute(migration.sql.encode())
            conn.execute(
                "INSERT INTO sheetq_migrations (version, name) VALUES (%s, %s)",
                (migration.version, migration.name),
            )
            applied.append(f"PostgreSQL schema migration {migration.version}: {migration.name}")
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
