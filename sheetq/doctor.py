"""``sheetq doctor`` as a library: every check a new installation needs, one ``Check`` each.

``diagnose()`` runs them in order and never raises for what it examines: a broken
``sheetq.toml`` is a problem line and the checks go on with what the environment
alone says. The checks:

* configuration — ``sheetq.toml`` parses, a spreadsheet is named;
* each configured type — it has a handler; a command's program (and script) exists,
  a Python handler imports, every ``${VAR}`` it uses is set (values never printed);
* the host lock directory is writable;
* the queue's store, through the port (``QueuePort.checks``): a Google spreadsheet or a
  local workbook (``sheetq.sheet.doctor``), or PostgreSQL (``sheetq.postgres.doctor``),
  and a PostgreSQL queue's mirror spreadsheet;
* Telegram — ``sheetq.alerts.check_telegram`` when a token is set, else "alerts off".
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path
from urllib.parse import urlsplit

from sheetq.checks import Check, fine, problem
from sheetq.config import HandlerSpec, Settings, TypeConfig, expand, load_settings
from sheetq.errors import ConfigError
from sheetq.ingress.config import load_ingress, unconfigured_types
from sheetq.sheet import is_local

_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
_SCRIPT_SUFFIXES = (".py", ".sh", ".js", ".mjs", ".rb", ".php", ".pl", ".ps1")
FIX_SPREADSHEET = (
    "set SHEETQ_SPREADSHEET to the Google Sheets URL or key, or to local:PATH for the "
    "embedded SQLite workbook (e.g. local:sheetq.db)"
)
FIX_HANDLER = 'add command = [...], http = { url = "..." } or python = "module:function" to '
Problems = list[tuple[str, str]]  # (what is wrong, how to fix it)


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
    checks += check_stores(settings)
    checks += check_alerts(settings)
    token = settings.telegram.token
    if len(token) < 4:
        return checks
    mask = "[redacted]"
    return [
        Check(c.ok, c.check, c.detail.replace(token, mask), c.fix.replace(token, mask))
        for c in checks
    ]


def check_stores(settings: Settings) -> list[Check]:
    """The queue's own checks (``QueuePort.checks``), and the mirror's spreadsheet's when a
    queue in PostgreSQL has one."""
    from sheetq.backends import open_queue, open_sheet

    queues = []
    if settings.database_url:
        queues.append(open_queue(settings))
    if settings.spreadsheet:
        queues.append(open_sheet(settings))
    checks: list[Check] = []
    for queue in queues:
        try:
            checks += queue.checks()
        finally:
            queue.close()
    return checks


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
    checks += _env_files(where)
    if settings.ingress:
        checks.append(_ingress(settings, env))
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


def _ingress(settings: Settings, env: Mapping[str, str]) -> Check:
    """``[ingress]`` as ``sheetq serve`` would load it: its routes, or what is wrong (a secret
    variable not set, ``none`` off loopback), never a secret's value."""
    try:
        ingress = load_ingress(settings, env=env)
    except ConfigError as exc:
        return problem("ingress", exc.message, "fix [ingress] before `sheetq serve` starts")
    unconfigured = unconfigured_types(ingress, settings)
    if unconfigured:
        fix = "correct the route's type, or add [types.NAME] (a worker elsewhere may run it)"
        return problem("ingress", "; ".join(unconfigured), fix)
    routes = ", ".join(
        f"/hooks/{r.name} → {r.type} ({r.signature})" for r in ingress.routes.values()
    )
    return fine("ingress", f"listen {ingress.host}:{ingress.port}; {routes}")


def _env_files(config: Path) -> list[Check]:
    """Which ``.env`` files were read (``sheetq.envfiles``): cron jobs start in ``$HOME``;
    one problem line per file that could not be (not UTF-8, a line that does not parse)."""
    from sheetq.envfiles import ENV_FILES, ENV_PROBLEMS

    fix = "none of that file is used until it is fixed"
    problems = [problem(".env", message, fix) for message in ENV_PROBLEMS]
    if ENV_FILES:
        return [fine(".env", "read " + ", then ".join(str(p) for p in ENV_FILES)), *problems]
    if problems:
        return problems
    places = sorted({str(Path.cwd()), str(config.expanduser().absolute().parent)})
    return [fine(".env", f"none read (looked in {' and '.join(places)})")]


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
