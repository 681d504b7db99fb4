"""``sheetq doctor`` as a library: every check a new installation needs, one ``Check`` each.

``diagnose()`` runs them in order and never raises for what it examines: a broken
``sheetq.toml`` is a problem line and the checks go on with what the environment
alone says. The checks:

* configuration — ``sheetq.toml`` parses, a spreadsheet is named;
* each configured type — it has a handler; a command's program (and script) exists,
  a Python handler imports, every ``${VAR}`` it uses is set (values never printed);
* the host lock directory is writable;
* Google — credentials (a service-account key: its e-mail is printed), the spreadsheet
  is reachable (403 and 404 explained in plain words), headers, write access (a named
  range added and removed in one atomic ``batchUpdate``, the run lease's mechanism),
  the run lease, the spreadsheet's time zone;
* local — the file exists and is a sheetq workbook, headers, write access;
* PostgreSQL (``SHEETQ_DATABASE_URL``) — ``sheetq.postgres.doctor``: the server and its
  version, the schema version, the queue's counts, a write rolled back;
* Telegram — ``sheetq.alerts.check_telegram`` when a token is set, else "alerts off".

Cost on Google: 2 Sheets API requests (4 before `sheetq init`: opening retries without the
missing worksheets).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sqlite3
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from sheetq.config import HandlerSpec, Settings, TypeConfig, expand, load_settings
from sheetq.errors import ConfigError, LeaseConflict, SchemaError, SheetqError
from sheetq.model import LOG_COLUMNS, QUEUE_COLUMNS
from sheetq.store import LOCAL_PREFIX, is_local
from sheetq.store.base import ChangeSet, LeaseChange, Store, WorkbookInfo

PROBE_RANGE = "sheetq_doctor_probe"  # the named range the write probe adds and removes
_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
_SCRIPT_SUFFIXES = (".py", ".sh", ".js", ".mjs", ".rb", ".php", ".pl", ".ps1")
_SQLITE_MAGIC = b"SQLite format 3\x00"
FIX_SPREADSHEET = (
    "set SHEETQ_SPREADSHEET to the Google Sheets URL or key, or to local:PATH for the "
    "embedded SQLite workbook (e.g. local:sheetq.db)"
)
FIX_KEY_FILE = (
    "download a JSON key (Google Cloud console → IAM → Service accounts → Keys) and set "
    "GOOGLE_APPLICATION_CREDENTIALS to its path"
)
FIX_KEY = (
    "copy the key from the sheet's address, https://docs.google.com/spreadsheets/d/KEY/edit, "
    "into SHEETQ_SPREADSHEET"
)
FIX_HANDLER = 'add command = [...], http = { url = "..." } or python = "module:function" to '
FIX_LOCAL = "point SHEETQ_SPREADSHEET at the file `sheetq init` made, or run `sheetq init`"
FIX_SHARE = "open the spreadsheet, press Share and add {who} as Editor"
Problems = list[tuple[str, str]]  # (what is wrong, how to fix it)


@dataclass(frozen=True)
class Check:
    """One line of ``sheetq doctor``: what was checked, what was found, how to fix it."""

    ok: bool
    check: str
    detail: str
    fix: str = ""

    def as_json(self) -> dict[str, Any]:
        return {"ok": self.ok, "check": self.check, "detail": self.detail, "fix": self.fix}


def fine(check: str, detail: str, fix: str = "") -> Check:
    """An ok line (a ``fix`` is then a hint)."""
    return Check(True, check, detail, fix)


def problem(check: str, detail: str, fix: str = "") -> Check:
    """A problem line: ``sheetq doctor`` exits 1."""
    return Check(False, check, detail, fix)


def diagnose(
    *,
    spreadsheet: str | None = None,
    config: str | None = None,
    env: Mapping[str, str] | None = None,
    database_url: str | None = None,
) -> list[Check]:
    """Run every check (module docstring) and return its lines, the bot token masked.
    ``spreadsheet``/``database_url`` are the global options; each wins over its variable."""
    env = os.environ if env is None else env
    settings, checks = check_configuration(
        spreadsheet=spreadsheet, config=config, env=env, database_url=database_url
    )
    checks += check_handlers(settings, env)
    checks.append(check_lock_dir(settings))
    if settings.database_url:
        from sheetq.postgres.doctor import check_postgres

        checks += check_postgres(settings)
    if is_local(settings.spreadsheet):
        checks += check_local(settings)
    elif settings.spreadsheet:
        checks += check_google(settings)
    checks += check_alerts(settings)
    token = settings.telegram.token
    if len(token) < 4:
        return checks
    mask = "[redacted]"
    return [
        Check(c.ok, c.check, c.detail.replace(token, mask), c.fix.replace(token, mask))
        for c in checks
    ]


# --- configuration -------------------------------------------------------------------


def check_configuration(
    *,
    spreadsheet: str | None,
    config: str | None,
    env: Mapping[str, str],
    database_url: str | None = None,
) -> tuple[Settings, list[Check]]:
    """Settings (from the environment alone when ``sheetq.toml`` is broken) and their lines."""
    where = Path(config or env.get("SHEETQ_CONFIG") or Path.cwd() / "sheetq.toml")
    try:
        settings = load_settings(
            spreadsheet=spreadsheet,
            config=config,
            env=env,
            require_spreadsheet=False,
            database_url=database_url,
        )
    except ConfigError as exc:
        fix = f"fix {where}; the checks below use the environment variables only"
        checks = [problem("configuration", exc.message, fix)]
        settings = _fallback_settings(spreadsheet, env, database_url)
    else:
        names = ", ".join(sorted(settings.types)) or "none"
        detail = f"{settings.config_path} read; task types: {names}"
        hint = ""
        if settings.config_path is None:
            detail = f"no {where.name} in {where.parent}: no task types configured"
            hint = "to run tasks, copy templates/sheetq.toml"
        checks = [fine("configuration", detail, hint)]
    checks.append(_env_files(where))
    target = settings.spreadsheet
    if settings.database_url and not target:
        checks.append(
            fine(
                "spreadsheet",
                "none: the queue is in PostgreSQL (SHEETQ_DATABASE_URL / --database-url)",
            )
        )
    elif not target:
        what = "no spreadsheet named: SHEETQ_SPREADSHEET is not set"
        checks.append(problem("spreadsheet", what, FIX_SPREADSHEET))
    elif is_local(target):
        checks.append(fine("spreadsheet", f"{target} (embedded SQLite workbook)"))
    else:
        checks.append(
            fine("spreadsheet", f"Google spreadsheet {target} via {settings.sheets_api_url}")
        )
    return settings, checks


def _env_files(config: Path) -> Check:
    """Which ``.env`` files were read (``sheetq.envfiles``): cron jobs start in ``$HOME``."""
    from sheetq.envfiles import ENV_FILES

    if ENV_FILES:
        return fine(".env", "read " + ", then ".join(str(p) for p in ENV_FILES))
    places = sorted({str(Path.cwd()), str(config.expanduser().absolute().parent)})
    return fine(".env", f"none read (looked in {' and '.join(places)})")


def _fallback_settings(
    spreadsheet: str | None, env: Mapping[str, str], database_url: str | None
) -> Settings:
    try:  # the environment with an empty configuration file
        return load_settings(
            spreadsheet=spreadsheet,
            config=os.devnull,
            env=env,
            require_spreadsheet=False,
            database_url=database_url,
        )
    except ConfigError:
        return Settings(spreadsheet=(spreadsheet or env.get("SHEETQ_SPREADSHEET") or "").strip())


# --- handlers ----------------------------------------------------------------------------


def check_handlers(settings: Settings, env: Mapping[str, str]) -> list[Check]:
    """Per configured type: an ok line describing its handler, or one line per problem."""
    checks: list[Check] = []
    for name in sorted(settings.types):
        config, where, what = settings.types[name], f"[types.{name}]", f"type {name}"
        if config.handler is None:
            detail = f"{where} has no handler: its tasks wait for ever"
            checks.append(problem(what, detail, FIX_HANDLER + where))
            continue
        found = _handler_problems(config.handler, config, env, where)
        if config.reconcile is not None:
            found += _handler_problems(config.reconcile, config, env, f"{where}.reconcile")
        for key, value in config.env.items():
            found += _vars_problems(value, env, f"{where}.env.{key}")
        checks += [problem(what, d, f) for d, f in found] or [fine(what, _describe(config))]
    return checks


def _describe(config: TypeConfig) -> str:
    """The handler as configured (unexpanded: no secret values)."""
    spec = config.handler
    assert spec is not None
    if spec.kind == "command":
        return "command " + " ".join(spec.command)
    if spec.kind == "http":
        return f"http {spec.method} {spec.url}"
    return f"python {spec.target} imports"


def _vars_problems(text: str, env: Mapping[str, str], where: str) -> Problems:
    try:
        expand(text, env, where=where)
    except ConfigError as exc:
        missing = ", ".join(v for v in _VAR.findall(text) if v not in env)
        return [(exc.message, f"set {missing} in the environment or in .env")]
    return []


def _handler_problems(
    spec: HandlerSpec, config: TypeConfig, env: Mapping[str, str], where: str
) -> Problems:
    """What stops one handler from running; empty when it looks runnable."""
    cwd = config.cwd or Path.cwd()
    if spec.kind == "command":
        found = [p for arg in spec.command for p in _vars_problems(arg, env, f"{where}.command")]
        if found:
            return found
        search = env.get("PATH")
        if "PATH" in config.env and not _vars_problems(config.env["PATH"], env, where):
            search = expand(config.env["PATH"], env)  # the handler runs with its own PATH
        return _program_problems([expand(a, env) for a in spec.command], cwd, search, where)
    if spec.kind == "http":
        found = _vars_problems(spec.url, env, f"{where}.http.url")
        for key, value in spec.headers.items():
            found += _vars_problems(value, env, f"{where}.http.headers.{key}")
        parts = urlsplit(expand(spec.url, env)) if not found else None
        if parts is not None and (parts.scheme not in ("http", "https") or not parts.netloc):
            found.append((f"{where}.http.url {spec.url!r} is not an http(s) URL", "fix the URL"))
        return found
    from sheetq.handlers.python import load

    try:
        load(spec.target, cwd)
    except ConfigError as exc:
        fix = f"make the module importable from {cwd} (or set the type's cwd); check the name"
        return [(f"{where}.python: {exc.message}", fix)]
    return []


def _program_problems(argv: list[str], cwd: Path, search: str | None, where: str) -> Problems:
    program, fix_path = argv[0], f"fix the path in {where}.command (relative to {cwd})"
    if "/" in program or os.sep in program:
        path = Path(program).expanduser()
        path = path if path.is_absolute() else cwd / path
        if not path.is_file():
            return [(f"{where}.command: {program!r} not found ({path})", fix_path)]
        if not os.access(path, os.X_OK):
            return [(f"{where}.command: {path} is not executable", f"chmod +x {path}")]
    elif shutil.which(program, path=search) is None:
        fix = f"install it, or give its full path in {where}.command"
        return [(f"{where}.command: program {program!r} not found on PATH", fix)]
    for arg in argv[1:]:
        if arg.startswith("-") or not arg.endswith(_SCRIPT_SUFFIXES):
            continue
        script = Path(arg).expanduser()
        script = script if script.is_absolute() else cwd / script
        if not script.exists():
            return [(f"{where}.command: script {arg!r} not found ({script})", fix_path)]
    return []


# --- host ------------------------------------------------------------------------------------


def check_lock_dir(settings: Settings) -> Check:
    """The host lock files' directory (``SHEETQ_LOCK_DIR``) can be made and written."""
    path = settings.lock_dir
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path, prefix=".sheetq-doctor-"):
            pass
    except OSError as exc:
        fix = "set SHEETQ_LOCK_DIR (or [queue].lock_dir) to a directory this user can write"
        return problem("lock directory", f"{path} is not writable ({exc.strerror or exc})", fix)
    return fine("lock directory", f"{path} is writable")


# --- the workbook, on either backend -----------------------------------------------------


def check_headers(info: WorkbookInfo, settings: Settings) -> list[Check]:
    """Queue, QueueLog and QueueArchive exist with every column sheetq needs, none twice."""
    checks: list[Check] = []
    for title, columns in (
        (settings.queue_sheet, QUEUE_COLUMNS),
        (settings.log_sheet, LOG_COLUMNS),
        (settings.archive_sheet, QUEUE_COLUMNS),
    ):
        what, sheet = f"worksheet {title}", info.sheets.get(title)
        if sheet is None:
            checks.append(problem(what, f"'{title}' does not exist", "run `sheetq init`"))
            continue
        try:
            found = sheet.columns(columns)
        except SchemaError as exc:
            checks.append(problem(what, exc.message, "rename or remove one of the two"))
            continue
        missing = sheet.missing(columns)
        if missing:
            detail = f"'{title}' lacks column(s) {', '.join(missing)}"
            fix = "run `sheetq init`: it adds them at the end and keeps every cell"
            checks.append(problem(what, detail, fix))
            continue
        own = len(set(found) - set(columns))
        extra = f", plus {own} column(s) of your own" if own else ""
        checks.append(fine(what, f"'{title}' has all {len(columns)} columns{extra}"))
    return checks


def check_write(store: Store, who: str) -> Check:
    """A harmless write: the named range ``PROBE_RANGE`` added and removed in one atomic
    change, the compare-and-set the run lease is built on. ``who`` names the account."""
    from sheetq.store.google import AccessDenied

    what = "write access"
    try:
        store.apply(ChangeSet(lease=LeaseChange(PROBE_RANGE, None, None)))
    except AccessDenied:
        detail = "sheetq can read the spreadsheet but not write it: it is shared read-only"
        return problem(what, detail, f"share it as Editor (not Viewer or Commenter) with {who}")
    except LeaseConflict:
        detail = f"a named range '{PROBE_RANGE}' already exists, so the probe could not run"
        return problem(what, detail, "delete it (Data → Named ranges), then run doctor again")
    except SheetqError as exc:
        return problem(what, f"the write probe failed: {exc.message}")
    return fine(what, "a named range was added and removed in one atomic request (leases work)")


def check_lease(info: WorkbookInfo, settings: Settings) -> Check:
    """Who holds the queue's run lease right now (no request: read by ``open``)."""
    from datetime import UTC, datetime

    from sheetq.runner import lease_expiry, lease_name
    from sheetq.times import format_ts

    token = info.leases.get(lease_name(settings.queue_sheet))
    if token is None:
        return fine("run lease", "free: no run is processing this queue")
    expiry = lease_expiry(token)
    if expiry is not None and expiry > datetime.now(UTC):
        return fine("run lease", f"held by a running `process` until {format_ts(expiry)}")
    return fine("run lease", "left by a run that ended uncleanly; the next run replaces it")


def check_time_zone(info: WorkbookInfo) -> Check:
    """The spreadsheet's time zone is known here (typed times without offset are read in it)."""
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

    name = info.time_zone or "UTC"
    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        detail = f"time zone {name!r} is unknown on this computer: typed times are read as UTC"
        fix = "install tzdata (pip install tzdata) or pick a standard zone in File → Settings"
        return problem("time zone", detail, fix)
    return fine("time zone", f"{name}: times typed without an offset are read in it")


def _workbook_checks(store: Store, info: WorkbookInfo, settings: Settings, who: str) -> list[Check]:
    """Headers, write access, lease and time zone of an opened workbook."""
    checks = check_headers(info, settings)
    checks.append(check_write(store, who))
    checks.append(check_lease(info, settings))
    checks.append(check_time_zone(info))
    return checks


# --- local -------------------------------------------------------------------------------------


def check_local(settings: Settings) -> list[Check]:
    """The SQLite workbook: exists, is a sheetq workbook, writable, complete."""
    from sheetq.store.sqlite import SqliteStore

    raw = settings.spreadsheet[len(LOCAL_PREFIX) :].strip()
    path, what = Path(raw).expanduser(), "local workbook"
    if not raw:
        return [problem(what, "local: names no file", "give a path: local:sheetq.db")]
    if not path.exists():
        return [problem(what, f"{path.resolve()}: no such file", "run `sheetq init` to create it")]
    if not _is_sheetq_db(path):
        return [problem(what, f"{path} is not a sheetq workbook", FIX_LOCAL)]
    checks = [fine(what, f"{path.resolve()} is a sheetq workbook")]
    if not (os.access(path, os.W_OK) and os.access(path.parent, os.W_OK)):
        fix = "let this user write the file and its folder (SQLite adds -wal and -shm files)"
        return [*checks, problem("write access", f"cannot write {path} or its folder", fix)]
    try:
        store = SqliteStore(path)
    except SheetqError as exc:
        return [*checks, problem(what, exc.message)]
    try:
        return checks + _workbook_checks(store, store.open(), settings, "this user")
    except SheetqError as exc:
        return [*checks, problem(what, exc.message)]
    finally:
        store.close()


def _is_sheetq_db(path: Path) -> bool:
    """A SQLite file with sheetq's tables, checked read-only (nothing is changed)."""
    try:
        with path.open("rb") as handle:
            if handle.read(16) != _SQLITE_MAGIC:
                return False
        db = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
        try:
            names = {r[0] for r in db.execute("SELECT name FROM sqlite_master")}
        finally:
            db.close()
    except (OSError, sqlite3.DatabaseError):
        return False
    return {"workbook", "worksheets", "leases"} <= names


# --- Google ----------------------------------------------------------------------------------


def check_google(settings: Settings) -> list[Check]:
    """Credentials, reachability, headers, write access, lease and time zone of a spreadsheet."""
    from sheetq.store.google import AccessDenied, GoogleStore, SpreadsheetNotFound

    credentials, email = check_credentials(settings)
    if not credentials.ok:
        return [credentials]
    who = f"the service account {email}" if email else "the account sheetq uses"
    try:
        store = GoogleStore.from_settings(settings)
    except SheetqError as exc:
        return [credentials, problem("spreadsheet", exc.message)]
    try:
        info = store.open()
    except AccessDenied as exc:
        return [credentials, _denied(exc.status, who, email)]
    except SpreadsheetNotFound:
        detail = f"no spreadsheet with key {store.key!r} (404): the key is wrong"
        return [credentials, problem("spreadsheet", detail, FIX_KEY)]
    except Exception as exc:  # unreachable, refused credentials…: a line, not a crash
        text = exc.message if isinstance(exc, SheetqError) else f"{type(exc).__name__}: {exc}"
        fix = "check the network or proxy, SHEETQ_SHEETS_API_URL and the credentials"
        return [credentials, problem("spreadsheet", f"Google Sheets not reached: {text}", fix)]
    else:
        reachable = fine("spreadsheet", f"'{info.title}' is reachable ({info.url})")
        return [credentials, reachable, *_workbook_checks(store, info, settings, who)]
    finally:
        store.close()


def _denied(status: int, who: str, email: str) -> Check:
    if status == 401:
        fix = "create a new key for the service account; point GOOGLE_APPLICATION_CREDENTIALS at it"
        return problem("spreadsheet", "Google refused the credentials (401)", fix)
    detail = f"Google refused access (403): the spreadsheet is not shared with {who}"
    return problem("spreadsheet", detail, FIX_SHARE.format(who=email or "that e-mail"))


def check_credentials(settings: Settings) -> tuple[Check, str]:
    """The credentials line and the service account's e-mail (``""`` when unknown)."""
    from sheetq.store.google_auth import credentials_for

    path, email, what = settings.credentials, "", "credentials"
    if path:
        try:
            data = json.loads(Path(path).expanduser().read_text(encoding="utf-8"))
        except FileNotFoundError:
            return problem(what, f"{path}: no such file", FIX_KEY_FILE), ""
        except OSError as exc:
            fix = "let this user read the file (chmod 600, owned by this user)"
            return problem(what, f"{path}: cannot read ({exc.strerror})", fix), ""
        except ValueError:
            return problem(what, f"{path} is not a JSON key file", FIX_KEY_FILE), ""
        kind = data.get("type") if isinstance(data, dict) else None
        if kind != "service_account":
            found = f"a {kind!r} credentials file" if kind else "not a Google credentials file"
            return problem(what, f"{path} is {found}, not a service-account key", FIX_KEY_FILE), ""
        email = str(data.get("client_email", ""))
    try:
        credentials = credentials_for(settings)
    except ConfigError as exc:
        return problem(what, exc.message, FIX_KEY_FILE), email
    if credentials is None:
        detail = f"none: requests to the loopback endpoint {settings.sheets_api_url} go unsigned"
        return fine(what, detail), ""
    email = email or str(getattr(credentials, "service_account_email", "") or "")
    if path:
        return fine(what, f"service account {email} ({path})"), email
    return fine(what, f"Application Default Credentials {email}".strip()), email


# --- Telegram ------------------------------------------------------------------------------------


def check_alerts(settings: Settings) -> list[Check]:
    """Telegram's own lines when a token is set; otherwise one ok line saying alerts are off."""
    if not settings.telegram.token:
        hint = "to be alerted when tasks fail, set TELEGRAM_BOT_TOKEN and TELEGRAM_CHAT_ID"
        return [fine("telegram", "alerts are off: TELEGRAM_BOT_TOKEN is not set", hint)]
    from sheetq.alerts import check_telegram

    try:
        lines = check_telegram(settings)
    except Exception as exc:  # check_telegram promises not to raise; doctor never crashes
        return [problem("telegram", f"check failed: {type(exc).__name__}")]
    return [Check(ok, "telegram", what, fix) for ok, what, fix in lines]
