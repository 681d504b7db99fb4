"""One connection to a queue's tables, for the commands that manage and read a queue
(``requeue``, ``skip``, ``archive``, ``alert``, ``status``, ``list``, ``show``, ``stats``)
and for the spreadsheet mirror (``sheetq.postgres.mirror``).

``Session`` opens the connection on first use, checks the schema once, and runs each
change as one transaction (``transaction``), turning what the server says into one line
(``sheetq.postgres.connection.explain``). It holds no transaction between two calls: a
command's work that waits on anything outside the database (Telegram) happens between
transactions (docs/design.md §11 "No transaction stays open across a call outside the
database").

Time (docs/design.md §11 "Time is the database's"): statements stamp and compare with the
server's clock. ``pretend`` turns a command's reading of its clock into the parameter the
statements take: ``None`` for a real reading (the statement then uses the server's
``statement_timestamp()``), or the pretended moment itself under ``SHEETQ_NOW``.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from datetime import UTC, datetime
from time import monotonic
from typing import Any, Protocol

import psycopg
from psycopg.rows import dict_row

from sheetq.config import Settings
from sheetq.errors import StoreUnavailable
from sheetq.postgres import schema
from sheetq.postgres.connection import connect, describe, explain
from sheetq.postgres.queries import QUERIES


class Transactions(Protocol):
    """What the digest and the runs' presence need of a connection to the queue's tables:
    the queue's name, its settings, and one transaction at a time (database errors as
    ``StoreError``). ``Session`` is one; so is the run path's store."""

    queue: str
    settings: Settings

    def transaction(self) -> AbstractContextManager[psycopg.Connection[Any]]: ...


REAL_READING = 5.0  # seconds: a clock reading this close to the host's clock is the real time


def pretend(now: datetime) -> datetime | None:
    """``None`` when ``now`` is the host's clock read moments ago (the statements then use
    the server's clock), else ``now``: a pretended time (``SHEETQ_NOW``) the statements use
    instead."""
    if abs((now - datetime.now(UTC)).total_seconds()) < REAL_READING:
        return None
    return now.astimezone(UTC)


class Session:
    """A connection to ``settings.database_url`` for queue ``settings.queue_sheet``.

    ``requests`` counts transactions. Raises ``StoreUnavailable`` (exit 1) when the server
    cannot be reached, ``SchemaError`` (exit 2) when its schema is not this sheetq's."""

    def __init__(
        self, settings: Settings, *, time_limit: float | None = None, time_limit_name: str = ""
    ) -> None:
        """``time_limit`` (seconds from now; ``enqueue``'s ``SHEETQ_ENQUEUE_TIMEOUT``, named
        ``time_limit_name`` in errors) bounds the connect and, as each transaction's own
        ``lock_timeout`` (``set_config(…, true)``: nothing stays on a pooled server
        connection), the wait for the queue's lock: a queue held by another transaction
        makes the command give up (``StoreUnavailable``, exit 1, the transaction rolled back)
        instead of waiting. The work itself is not cut off: a ``--jsonl`` batch of 200,000
        lines takes what it takes."""
        self.settings = settings
        self.url = settings.database_url
        self.queue = settings.queue_sheet
        self.requests = 0
        self._conn: psycopg.Connection[Any] | None = None
        self._checked = False
        self._limit: tuple[float, str, float] | None = None
        if time_limit is not None:
            self._limit = (
                time_limit,
                time_limit_name or "its time limit",
                monotonic() + time_limit,
            )

    @property
    def where(self) -> str:
        """``PostgreSQL user@host:port/dbname`` (never the password), a queue's title."""
        return f"PostgreSQL {describe(self.url)}"

    @property
    def conn(self) -> psycopg.Connection[Any]:
        if self._conn is None or self._conn.closed:
            self._conn = connect(self.url, time_limit=self._limit[0] if self._limit else None)
            self._conn.row_factory = dict_row
        return self._conn

    @contextmanager
    def transaction(self) -> Iterator[psycopg.Connection[Any]]:
        """One transaction, the schema checked first on this session's first one; a
        database error rolls it back and becomes ``StoreError`` (exit 1)."""
        conn = self.conn
        self.requests += 1
        try:
            with conn.transaction():
                if self._limit is not None:
                    self._bound(conn)
                if not self._checked:
                    schema.check(conn)
                    self._checked = True
                yield conn
        except psycopg.errors.LockNotAvailable as exc:
            if self._limit is None:
                raise explain(exc, self.url) from None
            raise self._out_of_time() from None
        except psycopg.Error as exc:
            raise explain(exc, self.url) from None

    def _bound(self, conn: psycopg.Connection[Any]) -> None:
        """This transaction's ``lock_timeout``: what is left of the time limit."""
        assert self._limit is not None
        left = self._limit[2] - monotonic()
        if left <= 0:
            raise self._out_of_time()
        conn.execute(QUERIES["lock_timeout"], {"ms": f"{max(1, int(left * 1000))}ms"})

    def _out_of_time(self) -> StoreUnavailable:
        assert self._limit is not None
        seconds, name, _ = self._limit
        return StoreUnavailable(
            f"{self.where}: gave up after {name} ({seconds:g}s) waiting for the queue's "
            "lock, held by another transaction (a `sheetq migrate` under way, or a session "
            "left open); nothing was written"
        )

    def upgrade(self) -> tuple[list[tuple[int, str]], int]:
        """Create or upgrade the schema (``sheetq init``): the migrations applied now (number,
        name; empty when it was current) and the schema version the database has."""
        conn = self.conn
        self.requests += 1
        try:
            with conn.transaction():
                before = schema.installed(conn)
            schema.upgrade(conn)
        except psycopg.Error as exc:
            raise explain(exc, self.url) from None
        self._checked = True
        applied = [(m.version, m.name) for m in schema.MIGRATIONS if m.version > before]
        return applied, schema.VERSION

    def moment(self, now: datetime) -> datetime:
        """The moment a report is as of (``pretend``): ``now`` when pretended, else the
        server's clock."""
        with self.transaction() as conn:
            row = conn.execute(QUERIES["moment"], {"at": pretend(now)}).fetchone()
        assert row is not None
        return row["now"]  # type: ignore[no-any-return]

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
