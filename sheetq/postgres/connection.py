"""Connecting to PostgreSQL with psycopg 3 (DESIGN.md §11 "Connection").

The URL is a libpq URL (``postgresql://USER@HOST:PORT/DBNAME``); the password comes from
the URL, ``PGPASSWORD`` or ``~/.pgpass`` (libpq's own rules). Errors name the host and
database, never the password.
"""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict

from sheetq.errors import ConfigError, StoreUnavailable

CONNECT_TIMEOUT = 10  # seconds, libpq's connect_timeout


def describe(url: str) -> str:
    """``user@host:port/dbname`` of a libpq URL, without the password (for messages)."""
    try:
        parts = conninfo_to_dict(url)
    except psycopg.ProgrammingError:
        return "(unparseable URL)"
    host = str(parts.get("host") or "localhost")
    if host.startswith("/"):
        host = f"socket {host}"
    port = f":{parts['port']}" if parts.get("port") else ""
    user = f"{parts['user']}@" if parts.get("user") else ""
    return f"{user}{host}{port}/{parts.get('dbname') or ''}"


def connect(url: str, *, autocommit: bool = False) -> psycopg.Connection[Any]:
    """A connection to ``url``. Raises ``ConfigError`` (exit 2) for a URL libpq cannot
    parse, ``StoreUnavailable`` (exit 1) when the server cannot be reached or refuses."""
    try:
        conninfo_to_dict(url)
    except psycopg.ProgrammingError as exc:
        raise ConfigError(
            f"SHEETQ_DATABASE_URL / --database-url: not a valid libpq URL "
            f"({_without_secrets(str(exc), url)})"
        ) from None
    try:
        return psycopg.connect(
            url,
            autocommit=autocommit,
            connect_timeout=CONNECT_TIMEOUT,
            application_name="sheetq",
        )
    except psycopg.OperationalError as exc:
        lines = [line.strip() for line in _without_secrets(str(exc), url).splitlines()]
        said = " ".join(line for line in lines if line) or type(exc).__name__
        raise StoreUnavailable(f"PostgreSQL {describe(url)}: cannot connect: {said}") from None


def _without_secrets(text: str, url: str) -> str:
    try:
        password = conninfo_to_dict(url).get("password")
    except psycopg.ProgrammingError:
        password = None
    return text.replace(str(password), "***") if password else text
