"""Connecting to PostgreSQL with psycopg 3 (docs/design.md §11 "Connection"), and turning what
the server or libpq says into one line with what to do.

The URL is a libpq URL (``postgresql://USER@HOST:PORT/DBNAME``); the password comes from
the URL, ``PGPASSWORD`` or ``~/.pgpass`` (libpq's own rules). Errors name the host and
database, never the password.

Exit codes (docs/design.md §4): a server that cannot be reached, does not answer or refuses the
login, and a role without privileges on sheetq's tables are runtime failures (exit 1, as a
Google sheet shared read-only is); a URL libpq cannot parse and a database that does not
exist are configuration errors (exit 2, as a wrong spreadsheet key is).
"""

from __future__ import annotations

import math
import os
import re
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict

from sheetq.config import DATABASE_URL_SOURCE
from sheetq.errors import (
    ConfigError,
    SchemaError,
    SheetqError,
    StoreError,
    StoreUnavailable,
)
from sheetq.redact import mask_credentials, url_passwords

CONNECT_TIMEOUT = 10  # seconds, libpq's connect_timeout unless the URL or PGCONNECT_TIMEOUT sets it
MIN_CONNECT_TIMEOUT = 2  # libpq treats anything shorter as 2 s (libpq docs, connect_timeout)

_SERVER_PREFIX = re.compile(
    r'^(?:connection (?:failed|is bad): )?(?:connection to server (?:at "[^"]*"(?:, port \d+)?|'
    r'on socket "[^"]*") failed: )?(?:FATAL: +|ERROR: +)?'
)
_BAD_OPTION = re.compile(r"^(?:connection is bad: )?(?P<what>invalid [^:]*(?:value|number)\b.*)")
_MISSING_DATABASE = re.compile(r'database "(?P<name>[^"]+)" does not exist')
_LOGIN_REFUSED = re.compile(
    r"password authentication failed|no password supplied|role \"[^\"]*\" does not exist|"
    r"no pg_hba\.conf entry|authentication failed|is not permitted to log in"
)


def describe(url: str) -> str:
    """``user@host:port/dbname`` of a libpq URL, without the password (for messages)."""
    try:
        parts = conninfo_to_dict(url)
    except psycopg.ProgrammingError:
        return "(unparseable URL)"
    host = str(parts.get("host") or os.environ.get("PGHOST") or "(libpq's default socket)")
    if host.startswith("/"):
        host = f"socket {host}"
    port = f":{parts['port']}" if parts.get("port") else ""
    user = f"{parts['user']}@" if parts.get("user") else ""
    return f"{user}{host}{port}/{parts.get('dbname') or ''}"


def connect_timeout(url: str, limit: float | None = None) -> int:
    """Seconds libpq may take to connect: the URL's ``connect_timeout``, else
    ``PGCONNECT_TIMEOUT``, else ``CONNECT_TIMEOUT``; no more than ``limit`` (a command's
    own time limit, e.g. ``SHEETQ_ENQUEUE_TIMEOUT``) and no less than libpq's 2 s."""
    said = conninfo_to_dict(url).get("connect_timeout") or os.environ.get("PGCONNECT_TIMEOUT")
    try:
        seconds = float(said) if said else float(CONNECT_TIMEOUT)
    except ValueError:
        seconds = float(CONNECT_TIMEOUT)
    if seconds <= 0:  # libpq: zero or negative waits for ever; sheetq never does
        seconds = float(CONNECT_TIMEOUT)
    if limit is not None:
        seconds = min(seconds, limit)
    return max(MIN_CONNECT_TIMEOUT, math.ceil(seconds))


def connect(
    url: str,
    *,
    autocommit: bool = False,
    source: str = DATABASE_URL_SOURCE,
    time_limit: float | None = None,
) -> psycopg.Connection[Any]:
    """A connection to ``url``, given up after ``connect_timeout(url, time_limit)`` seconds.

    Raises ``ConfigError`` (exit 2) for a URL libpq cannot parse (one line, starting with
    ``source``: where the URL came from) or a database that does not exist, and
    ``StoreUnavailable`` (exit 1) when the server cannot be reached, does not answer in
    time or refuses the login."""
    try:
        conninfo_to_dict(url)
    except psycopg.ProgrammingError as exc:
        said = " ".join(_parse_error_words(str(exc), url).split()) or type(exc).__name__
        raise ConfigError(f"{source}: not a valid libpq URL: {said}") from None
    seconds = connect_timeout(url, time_limit)
    try:
        return psycopg.connect(
            url,
            autocommit=autocommit,
            connect_timeout=seconds,
            application_name="sheetq",
        )
    except psycopg.OperationalError as exc:
        raise _connect_error(exc, url, source, seconds) from None


def _connect_error(
    exc: psycopg.OperationalError, url: str, source: str, seconds: int
) -> SheetqError:
    where = f"PostgreSQL {describe(url)}"
    said = _server_words(exc)
    bad = _BAD_OPTION.match(said)
    if bad:  # libpq refused a value in the URL before connecting: e.g. sslmode=bogus
        return ConfigError(f"{source}: not a valid libpq URL: {bad['what']}")
    missing = _MISSING_DATABASE.search(said)
    if missing:
        name = missing["name"]
        return ConfigError(
            f"{where}: database {name!r} does not exist: create it (`createdb {name}` or "
            f"CREATE DATABASE), or name another in {source}"
        )
    if _LOGIN_REFUSED.search(said):
        return StoreUnavailable(
            f"{where}: the server refused the login: {said} (check the user and the "
            f"password: in {source}, PGPASSWORD or ~/.pgpass; and the server's pg_hba.conf)"
        )
    if "timeout expired" in said:
        return StoreUnavailable(
            f"{where}: cannot connect: no answer within {seconds}s (is the host right, "
            "the server up and the port open? connect_timeout in the URL sets the wait)"
        )
    return StoreUnavailable(f"{where}: cannot connect: {said}")


NO_SCHEMA = "the PostgreSQL database has no sheetq schema: run `sheetq init`"


def explain(exc: psycopg.Error, url: str) -> SheetqError:
    """A database error met while using a connection, as one line: a missing table is
    ``SchemaError`` (exit 2: run `sheetq init`); a lost connection is ``StoreUnavailable``;
    a role without the privileges sheetq's tables need says how to grant them; anything
    else is ``StoreError`` with the server's words (exit 1 each)."""
    if isinstance(exc, psycopg.errors.UndefinedTable):
        return SchemaError(NO_SCHEMA)
    where = f"PostgreSQL {describe(url)}"
    said = _server_words(exc)
    if isinstance(exc, psycopg.errors.InsufficientPrivilege):
        user = str(conninfo_to_dict(url).get("user") or "this role")
        if "for schema" in said:  # `init`/`migrate` creating tables
            return StoreError(
                f"{where}: {said}: the role {user!r} may not create sheetq's tables; run "
                f"`sheetq init` as the database's owner, or GRANT CREATE ON SCHEMA public "
                f"TO {user}"
            )
        return StoreError(
            f"{where}: {said}: the role {user!r} may not use sheetq's tables; run sheetq as "
            f"the role that ran `sheetq init`, or GRANT SELECT, INSERT, UPDATE, DELETE ON ALL "
            f"TABLES IN SCHEMA public TO {user} (and USAGE ON ALL SEQUENCES)"
        )
    if isinstance(exc, psycopg.OperationalError):
        return StoreUnavailable(f"{where}: {said}")
    return StoreError(f"{where}: {said}")


def _server_words(exc: psycopg.Error) -> str:
    """What libpq or the server said, on one line, without the "connection to server at …
    failed: FATAL:" preamble that repeats the host. Neither libpq nor the server repeats a
    password, so the words are classified as said (a password such as ``a`` or ``postgres``
    is also a letter or word of the message: masking its letters would change what it
    says); only a URL or conninfo quoted in them has its password part masked."""
    primary = getattr(getattr(exc, "diag", None), "message_primary", None)
    text = primary or str(exc)  # the server's own words, without "LINE 1: <the SQL>"
    lines = [line.strip() for line in mask_credentials(text).splitlines()]
    lines = [line for line in lines if line]
    said = " ".join(
        line if i == len(lines) - 1 or line[-1] in ".?!:;," else line + "."
        for i, line in enumerate(lines)
    )
    said = said or type(exc).__name__
    return _SERVER_PREFIX.sub("", said, count=1) or said


def _parse_error_words(text: str, url: str) -> str:
    """libpq's parse error about ``url`` without the password: a quoted token that is the
    password (``invalid percent-encoded token: "pw%zz"``, as written or decoded) and the
    password part of a quoted URL or conninfo are masked; no other text changes."""
    candidates = set(url_passwords(url))
    text = _QUOTED.sub(lambda m: '"***"' if m.group(1) in candidates else m.group(0), text)
    return mask_credentials(text)


_QUOTED = re.compile(r'"([^"]*)"')
