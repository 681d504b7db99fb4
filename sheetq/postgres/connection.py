"""Connecting to PostgreSQL with psycopg 3 (DESIGN.md §11 "Connection").

The URL is a libpq URL (``postgresql://USER@HOST:PORT/DBNAME``); the password comes from
the URL, ``PGPASSWORD`` or ``~/.pgpass`` (libpq's own rules). Errors name the host and
database, never the password.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import unquote

import psycopg
from psycopg.conninfo import conninfo_to_dict

from sheetq.config import DATABASE_URL_SOURCE
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


def connect(
    url: str, *, autocommit: bool = False, source: str = DATABASE_URL_SOURCE
) -> psycopg.Connection[Any]:
    """A connection to ``url``. Raises ``ConfigError`` (exit 2) for a URL libpq cannot
    parse (one line, starting with ``source``: where the URL came from), and
    ``StoreUnavailable`` (exit 1) when the server cannot be reached or refuses."""
    try:
        conninfo_to_dict(url)
    except psycopg.ProgrammingError as exc:
        said = " ".join(_without_secrets(str(exc), url).split()) or type(exc).__name__
        raise ConfigError(f"{source}: not a valid libpq URL: {said}") from None
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
    """``text`` with the URL's password masked: as libpq parsed it, and as written in the
    URL's user-info (raw and percent-decoded), which a parse error may quote."""
    try:
        parsed = conninfo_to_dict(url).get("password")
    except psycopg.ProgrammingError:
        parsed = None
    secrets = {str(parsed)} if parsed else set()
    authority = url.split("://", 1)[-1].split("/", 1)[0].split("?", 1)[0]
    if "@" in authority:
        userinfo = authority.rsplit("@", 1)[0]
        if ":" in userinfo:
            raw = userinfo.split(":", 1)[1]
            secrets |= {raw, unquote(raw)}
    for secret in sorted((s for s in secrets if s), key=len, reverse=True):
        text = text.replace(secret, "***")
    return text
