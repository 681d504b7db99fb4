"""``sheetq.toml`` + environment + ``.env`` → frozen settings (docs/design.md §7).

Precedence: command-line flag, then environment variable, then
``sheetq.toml``, then the default. ``${VAR}`` in handler strings is expanded
when the handler is built, so a missing secret only stops its own type
(error class ``config``), not ``enqueue`` on a webhook host.
"""

from __future__ import annotations

import difflib
import logging
import os
import re
import shlex
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from sheetq.connectors import DEFAULT_COOLDOWN, DEFAULT_ESCALATE, DEFAULT_THRESHOLD
from sheetq.errors import ConfigError, UsageError
from sheetq.model import PRIORITY_RULE, parse_priority
from sheetq.retry import RetryPolicy
from sheetq.textfile import read_utf8
from sheetq.times import parse_duration

DEFAULT_CONFIG = "sheetq.toml"
# A task type: no ":" — it separates the type from the rest of the idempotency key (TYPE:K).
TYPE_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_./-]{0,99}$")
TYPE_RULE = (
    "use a letter or digit, then letters, digits and _ . / - "
    "(at most 100 characters; no ':', which separates the type in idempotency keys)"
)
DEFAULT_ENQUEUE_TIMEOUT = 20.0  # seconds: SHEETQ_ENQUEUE_TIMEOUT, all of enqueue's requests
ON_UNKNOWN = ("retry", "reconcile", "fail")

_POLICY_KEYS = {
    "max_attempts",
    "backoff",
    "jitter",
    "timeout",
    "lease",
    "max_age",
    "breaker_threshold",
}
_DEFAULT_KEYS = _POLICY_KEYS | {"redact_fields", "owner", "priority"}
_TYPE_KEYS = _DEFAULT_KEYS | {
    "command",
    "http",
    "python",
    "key_fields",
    "idempotent",
    "on_unknown",
    "reconcile",
    "rate_limit",
    "env",
    "cwd",
    "group_fields",
    "group_blocks_on_failure",
    "connector",
}
# keys of [connectors.NAME] (docs/design.md §13)
_CONNECTOR_KEYS = {
    "rate_limit",
    "concurrency",
    "breaker_threshold",
    "breaker_cooldown",
    "escalate_after",
}
_QUEUE_KEYS = {
    "spreadsheet",
    "queue_sheet",
    "log_sheet",
    "archive_sheet",
    "log_archive_sheet",
    "lock_dir",
    "batch_size",
}
_TELEGRAM_KEYS = {"chat_id", "thread_id", "template", "api_url"}
_TOP_KEYS = {"queue", "defaults", "types", "connectors", "telegram", "mirror", "ingress"}
_MIRROR_KEYS = {"interval", "keep_finished"}
_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
_RATE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*/\s*(\d*)\s*([a-z]+)\s*$", re.IGNORECASE)
_RATE_UNITS = {
    "s": 1,
    "sec": 1,
    "second": 1,
    "m": 60,
    "min": 60,
    "minute": 60,
    "h": 3600,
    "hour": 3600,
    "d": 86400,
    "day": 86400,
}


@dataclass(frozen=True)
class RateLimit:
    """At most ``calls`` handler starts per ``per_seconds`` (spaced evenly within a run)."""

    calls: float
    per_seconds: float

    @property
    def interval(self) -> float:
        return self.per_seconds / self.calls

    def text(self) -> str:
        """As configured, e.g. ``30/60s``."""
        return f"{self.calls:g}/{self.per_seconds:g}s"


@dataclass(frozen=True)
class ConnectorConfig:
    """One downstream's shared budget (docs/design.md §13): ``rate_limit`` (starts per
    window, across every worker), ``concurrency`` (handlers running at once; ``None``: no
    limit), the breaker's ``breaker_threshold`` (consecutive transient failures) and
    ``breaker_cooldown`` (seconds open before one probe), ``escalate_after`` (seconds open
    before the second alert) and ``types``, the task types that call it. A type without
    ``connector`` is a connector of its own, named like the type."""

    name: str
    rate_limit: RateLimit | None = None
    concurrency: int | None = None
    breaker_threshold: int = DEFAULT_THRESHOLD
    breaker_cooldown: float = DEFAULT_COOLDOWN
    escalate_after: float = DEFAULT_ESCALATE
    types: tuple[str, ...] = ()
    declared: bool = False  # a [connectors.NAME] table (not a type that is its own)

    @property
    def interval(self) -> float | None:
        """Seconds between two starts of the shared rate limit (``None``: no rate limit)."""
        return None if self.rate_limit is None else self.rate_limit.interval

    @property
    def limited(self) -> bool:
        """Whether a claim must take a token or a slot (a rate limit or a concurrency)."""
        return self.rate_limit is not None or self.concurrency is not None


@dataclass(frozen=True)
class HandlerSpec:
    """One way to run a task: ``kind`` is ``command``, ``http`` or ``python``; values unexpanded."""

    kind: str
    command: tuple[str, ...] = ()
    url: str = ""
    method: str = "POST"
    headers: Mapping[str, str] = field(default_factory=dict)
    target: str = ""  # module:function


@dataclass(frozen=True)
class TypeConfig:
    name: str
    handler: HandlerSpec | None
    policy: RetryPolicy
    key_fields: tuple[str, ...] = ()
    idempotent: bool = False
    owner: str = ""
    on_unknown: str = "fail"
    reconcile: HandlerSpec | None = None
    rate_limit: RateLimit | None = None
    redact_fields: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    cwd: Path | None = None
    priority: int = 0  # docs/design.md §14: higher first; a task's own overrides it
    group_fields: tuple[str, ...] = ()  # docs/design.md §14: payload paths naming the group
    group_blocks_on_failure: bool = False  # a failed task holds its group for a person
    connector: str = ""  # its connector's name ("": the type is its own connector)


@dataclass(frozen=True)
class TelegramSettings:
    token: str = ""
    chat_id: str = ""
    thread_id: str = ""
    api_url: str = "https://api.telegram.org"
    template: Path | None = None

    @property
    def enabled(self) -> bool:
        return bool(self.token and self.chat_id)


@dataclass(frozen=True)
class Settings:
    spreadsheet: str
    queue_sheet: str = "Queue"
    log_sheet: str = "QueueLog"
    archive_sheet: str = "QueueArchive"
    log_archive_sheet: str = "QueueLogArchive"  # `archive --log-older-than` moves log rows here
    lock_dir: Path = Path.home() / ".cache" / "sheetq"
    batch_size: int = 10
    defaults: TypeConfig = field(
        default_factory=lambda: TypeConfig(name="*", handler=None, policy=RetryPolicy())
    )
    types: Mapping[str, TypeConfig] = field(default_factory=dict)
    telegram: TelegramSettings = field(default_factory=TelegramSettings)
    sheets_api_url: str = "https://sheets.googleapis.com"
    enqueue_timeout: float = DEFAULT_ENQUEUE_TIMEOUT
    credentials: str = ""
    config_path: Path | None = None
    base_dir: Path = field(default_factory=Path.cwd)
    database_url: str = ""  # libpq URL: the queue lives in PostgreSQL (docs/design.md §11)
    mirror_interval: float = 15.0  # seconds between mirror passes inside `sheetq worker`
    mirror_keep_finished: float = 7 * 86400.0  # seconds finished tasks stay in the mirror
    # every connector: those of [connectors.NAME] and one per type without `connector`
    connectors: Mapping[str, ConnectorConfig] = field(default_factory=dict)
    # ``[ingress]`` as written (secrets unexpanded): ``sheetq serve`` reads it
    # (``sheetq.ingress.config``), no other command needs it
    ingress: Mapping[str, Any] = field(default_factory=dict)

    def type_config(self, name: str) -> TypeConfig:
        """The configuration of type ``name``; the defaults (no handler) if it is not configured."""
        found = self.types.get(name)
        return found if found is not None else replace(self.defaults, name=name)

    @property
    def connectors_sheet(self) -> bool:
        """Whether a sheet keeps a ``Connectors`` worksheet (docs/design.md §13): when the
        configuration has a ``[connectors.NAME]`` table. Without, a type's rate limit and
        breaker hold within one run, as they always did on a sheet (and no request is
        spent on a worksheet an older workbook lacks)."""
        return any(c.declared for c in self.connectors.values())

    def known_connector(self, name: str) -> ConnectorConfig:
        """The configured connector ``name``; ``UsageError`` (exit 2) naming the known ones."""
        found = self.connectors.get(name)
        if found is None:
            names = ", ".join(sorted(self.connectors)) or "none"
            raise UsageError(
                f"connector {name!r} is not configured (configured: {names}); a connector is "
                "a [connectors.NAME] table or a type of sheetq.toml"
            )
        return found

    def connector_of(self, task_type: str) -> ConnectorConfig:
        """The connector type ``task_type`` calls (its own, named like it, when it names
        none; an unconfigured type's has no limits)."""
        config = self.types.get(task_type)
        name = (config.connector if config else "") or task_type
        found = self.connectors.get(name)
        if found is not None:
            return found
        policy = (config or self.defaults).policy
        return ConnectorConfig(name, breaker_threshold=policy.breaker_threshold, types=(task_type,))


# --- loading -----------------------------------------------------------------


# Secrets that belong in the environment or .env, not in sheetq.toml: where a key is
# refused, the message says which variable to set instead.
_SECRET_KEYS = {
    ("[telegram]", "token"): "TELEGRAM_BOT_TOKEN",
    ("[telegram]", "bot_token"): "TELEGRAM_BOT_TOKEN",
}


def _unknown_keys(where: str, got: Mapping[str, Any], allowed: set[str]) -> None:
    for key in got:
        if key not in allowed:
            variable = _SECRET_KEYS.get((where, key))
            close = difflib.get_close_matches(key, sorted(allowed), n=1)
            hint = f" (did you mean '{close[0]}'?)" if close else ""
            per_type = difflib.get_close_matches(key, sorted(_TYPE_KEYS - allowed), n=1)
            if where == "[defaults]" and not close and per_type:
                hint = f" ('{per_type[0]}' is a type's own key: put it under [types.NAME])"
            if variable:
                hint = (
                    f": the bot token is a secret, kept out of this file; set {variable} in "
                    "the environment or in .env"
                )
            raise ConfigError(f"{where}: unknown key '{key}'{hint}")


def _duration(where: str, value: Any) -> float:
    try:
        return parse_duration(value, what=where, require_unit=True)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


def _policy(where: str, raw: Mapping[str, Any], base: RetryPolicy) -> RetryPolicy:
    changes: dict[str, Any] = {}
    if "max_attempts" in raw:
        value = raw["max_attempts"]
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ConfigError(f"{where}.max_attempts: expected a whole number ≥ 1, got {value!r}")
        changes["max_attempts"] = value
    if "breaker_threshold" in raw:
        value = raw["breaker_threshold"]
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ConfigError(
                f"{where}.breaker_threshold: expected a whole number ≥ 1, got {value!r}"
            )
        changes["breaker_threshold"] = value
    if "backoff" in raw:
        value = raw["backoff"]
        if isinstance(value, str | int | float):
            value = [value]
        if not isinstance(value, list) or not value:
            raise ConfigError(f"{where}.backoff: expected a list of durations like ['2m', '4m']")
        changes["backoff"] = tuple(_duration(f"{where}.backoff", v) for v in value)
    if "jitter" in raw:
        value = raw["jitter"]
        if not isinstance(value, int | float) or isinstance(value, bool) or not 0 <= value < 1:
            raise ConfigError(f"{where}.jitter: expected a fraction between 0 and 1, got {value!r}")
        changes["jitter"] = float(value)
    for key in ("timeout", "lease"):
        if key in raw:
            seconds = _duration(f"{where}.{key}", raw[key])
            if seconds <= 0:
                raise ConfigError(f"{where}.{key}: must be longer than 0")
            changes[key] = seconds
    if "max_age" in raw:
        value = raw["max_age"]
        if isinstance(value, bool):  # false == 0 would silently mean "never"
            raise ConfigError(
                f"{where}.max_age: expected a duration like '72h', or \"never\", got {value!r}"
            )
        changes["max_age"] = (
            None if value in ("", "0", 0, "none", "never") else _duration(f"{where}.max_age", value)
        )
    return replace(base, **changes)


def _str_list(where: str, value: Any) -> tuple[str, ...]:
    if isinstance(value, str):
        return (value,)
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"{where}: expected a list of strings, got {value!r}")
    return tuple(value)


def _text(where: str, value: Any, what: str) -> str:
    """``value`` when it is text; else ``ConfigError`` naming ``where`` and what was expected."""
    if not isinstance(value, str):
        raise ConfigError(f"{where}: expected {what} (text), got {value!r}")
    return value


def _id(where: str, value: Any, what: str) -> str:
    """A Telegram id written as a number or as text (``-1001234567890``), as text."""
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise ConfigError(f"{where}: expected {what} (a whole number or text), got {value!r}")
    return str(value)


def _field_names(where: str, value: Any) -> tuple[str, ...]:
    """A list of payload field names: each non-empty (an empty name would key every task on
    a field no payload has)."""
    names = _str_list(where, value)
    for name in names:
        if not name.strip():
            raise ConfigError(f"{where}: an empty field name in {list(names)!r}")
    return names


def _command(where: str, value: Any) -> tuple[str, ...]:
    if isinstance(value, str):
        try:
            parts = shlex.split(value)
        except ValueError as exc:
            raise ConfigError(f"{where}: cannot split {value!r} like a shell: {exc}") from None
    else:
        parts = list(_str_list(where, value))
    if not parts:
        raise ConfigError(f"{where}: empty command")
    return tuple(parts)


def _handler(where: str, raw: Mapping[str, Any]) -> HandlerSpec | None:
    given = [k for k in ("command", "http", "python") if k in raw]
    if len(given) > 1:
        raise ConfigError(f"{where}: give one handler, not {' and '.join(given)}")
    if not given:
        return None
    kind = given[0]
    value = raw[kind]
    if kind == "command":
        return HandlerSpec("command", command=_command(f"{where}.command", value))
    if kind == "python":
        if not isinstance(value, str) or not re.fullmatch(r"[\w.]+:[\w.]+", value.strip()):
            raise ConfigError(f"{where}.python: expected 'module:function', got {value!r}")
        return HandlerSpec("python", target=value.strip())
    if isinstance(value, str):
        value = {"url": value}
    if not isinstance(value, dict):
        raise ConfigError(f'{where}.http: expected a table like {{ url = "https://…" }}')
    _unknown_keys(f"{where}.http", value, {"url", "headers", "method"})
    url = value.get("url")
    if not isinstance(url, str) or not url.strip():
        raise ConfigError(f"{where}.http.url: required")
    headers = value.get("headers", {})
    if not isinstance(headers, dict) or not all(isinstance(v, str) for v in headers.values()):
        raise ConfigError(f"{where}.http.headers: expected a table of strings")
    method = _text(
        f"{where}.http.method", value.get("method", "POST"), "an HTTP method like 'POST'"
    )
    if not re.fullmatch(r"[A-Za-z]+", method):
        raise ConfigError(
            f"{where}.http.method: expected an HTTP method like 'POST', got {method!r}"
        )
    method = method.upper()
    return HandlerSpec("http", url=url.strip(), method=method, headers=dict(headers))


def _priority(where: str, value: Any) -> int:
    """A type's ``priority`` (docs/design.md §14): an integer within ``MAX_PRIORITY``."""
    if isinstance(value, bool) or not isinstance(value, int) or parse_priority(value) is None:
        raise ConfigError(f"{where}: expected {PRIORITY_RULE}, got {value!r}")
    return value


def _rate(where: str, value: Any) -> RateLimit:
    match = _RATE.match(str(value))
    unit = match.group(3).lower().rstrip("s") if match else ""
    unit = unit or "s"
    if not match or (unit not in _RATE_UNITS and unit + "s" not in _RATE_UNITS):
        raise ConfigError(
            f"{where}: expected a rate with a unit like '30/min', '2/s' or '100/hour', "
            f"got {value!r}"
        )
    calls = float(match.group(1))
    per = float(match.group(2) or 1) * _RATE_UNITS.get(unit, _RATE_UNITS.get(unit + "s", 1))
    if calls <= 0:
        raise ConfigError(f"{where}: the rate must be above 0")
    return RateLimit(calls, per)


def _type(name: str, raw: Any, defaults: TypeConfig, base_dir: Path) -> TypeConfig:
    where = f"[types.{name}]"
    if not TYPE_PATTERN.match(name):
        raise ConfigError(f"[types.{name!r}]: type {name!r}: {TYPE_RULE}")
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: expected a table")
    _unknown_keys(where, raw, _TYPE_KEYS)
    handler = _handler(where, raw)
    idempotent = raw.get("idempotent", defaults.idempotent)
    if not isinstance(idempotent, bool):
        raise ConfigError(f"{where}.idempotent: expected true or false")
    on_unknown = raw.get("on_unknown", "retry" if idempotent else "fail")
    if on_unknown not in ON_UNKNOWN:
        raise ConfigError(
            f"{where}.on_unknown: expected one of {', '.join(ON_UNKNOWN)}, got {on_unknown!r}"
        )
    reconcile = None
    if "reconcile" in raw:
        if not isinstance(raw["reconcile"], dict):
            raise ConfigError(
                f"{where}.reconcile: expected {{ command = [...] }} or {{ python = ... }}"
            )
        _unknown_keys(f"{where}.reconcile", raw["reconcile"], {"command", "python"})
        reconcile = _handler(f"{where}.reconcile", raw["reconcile"])
    if on_unknown == "reconcile" and reconcile is None:
        raise ConfigError(
            f'{where}: on_unknown = "reconcile" needs reconcile = {{ command = [...] }}'
        )
    env = raw.get("env", {})
    if not isinstance(env, dict) or not all(isinstance(v, str) for v in env.values()):
        raise ConfigError(f"{where}.env: expected a table of strings")
    owner = raw.get("owner", defaults.owner)
    if not isinstance(owner, str):
        raise ConfigError(f"{where}.owner: expected a string")
    cwd = _text(f"{where}.cwd", raw["cwd"], "a folder path") if "cwd" in raw else None
    blocks = raw.get("group_blocks_on_failure", False)
    if not isinstance(blocks, bool):
        raise ConfigError(f"{where}.group_blocks_on_failure: expected true or false")
    connector = raw.get("connector", "")
    if not isinstance(connector, str) or (connector and not TYPE_PATTERN.match(connector)):
        raise ConfigError(f"{where}.connector: expected a connector's name, got {connector!r}")
    if connector and connector != name:
        for key in ("rate_limit", "breaker_threshold"):
            if key in raw:
                raise ConfigError(
                    f"{where}.{key}: the type calls connector {connector!r}, whose budget is "
                    f"shared: set {key} in [connectors.{connector}]"
                )
    return TypeConfig(
        group_fields=_field_names(f"{where}.group_fields", raw.get("group_fields", [])),
        group_blocks_on_failure=blocks,
        priority=_priority(f"{where}.priority", raw.get("priority", defaults.priority)),
        name=name,
        handler=handler,
        policy=_policy(where, raw, defaults.policy),
        key_fields=_field_names(f"{where}.key_fields", raw.get("key_fields", [])),
        idempotent=idempotent,
        owner=owner,
        on_unknown=on_unknown,
        reconcile=reconcile,
        rate_limit=_rate(f"{where}.rate_limit", raw["rate_limit"]) if "rate_limit" in raw else None,
        redact_fields=defaults.redact_fields
        + _str_list(f"{where}.redact_fields", raw.get("redact_fields", [])),
        env=dict(env),
        cwd=(base_dir / cwd) if cwd is not None else base_dir,
        connector=connector,
    )


def _whole(where: str, value: Any) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ConfigError(f"{where}: expected a whole number ≥ 1, got {value!r}")
    return value


def _positive(where: str, table: Mapping[str, Any]) -> float:
    seconds = _duration(where, table[where.rsplit(".", 1)[1]])
    if seconds <= 0:
        raise ConfigError(f"{where}: must be longer than 0")
    return seconds


def _connectors(raw: Any, types: Mapping[str, TypeConfig]) -> dict[str, ConnectorConfig]:
    """``[connectors.NAME]`` and the types that name them; a type naming none is a connector
    of its own with its ``rate_limit`` and ``breaker_threshold`` (docs/design.md §13).
    Refuses an unknown connector, ``concurrency = 0``, a rate without a unit."""
    if not isinstance(raw, dict):
        raise ConfigError("[connectors]: expected a table of [connectors.NAME] tables")
    found: dict[str, ConnectorConfig] = {}
    for name, table in raw.items():
        where = f"[connectors.{name}]"
        if not TYPE_PATTERN.match(str(name)):
            raise ConfigError(f"[connectors.{name!r}]: connector {name!r}: {TYPE_RULE}")
        if not isinstance(table, dict):
            raise ConfigError(f"{where}: expected a table")
        _unknown_keys(where, table, _CONNECTOR_KEYS)
        config = ConnectorConfig(str(name), declared=True)
        if "rate_limit" in table:
            config = replace(config, rate_limit=_rate(f"{where}.rate_limit", table["rate_limit"]))
        if "concurrency" in table:
            config = replace(
                config, concurrency=_whole(f"{where}.concurrency", table["concurrency"])
            )
        if "breaker_threshold" in table:
            config = replace(
                config,
                breaker_threshold=_whole(f"{where}.breaker_threshold", table["breaker_threshold"]),
            )
        if "breaker_cooldown" in table:
            config = replace(config, breaker_cooldown=_positive(f"{where}.breaker_cooldown", table))
        if "escalate_after" in table:
            config = replace(config, escalate_after=_positive(f"{where}.escalate_after", table))
        found[str(name)] = config
    members: dict[str, list[str]] = {}
    for type_name, typed in types.items():
        if typed.connector and typed.connector not in found and typed.connector != type_name:
            known = ", ".join(sorted(found)) or "none"
            raise ConfigError(
                f"[types.{type_name}].connector: unknown connector {typed.connector!r} "
                f"(add [connectors.{typed.connector}]; configured: {known})"
            )
        own = typed.connector or type_name
        if own in found:
            members.setdefault(own, []).append(type_name)
            if typed.rate_limit is not None:
                raise ConfigError(
                    f"[types.{type_name}].rate_limit: the type calls connector {own!r}, whose "
                    f"budget is shared: set rate_limit in [connectors.{own}]"
                )
        else:
            found[own] = ConnectorConfig(
                own,
                rate_limit=typed.rate_limit,
                breaker_threshold=typed.policy.breaker_threshold,
                types=(type_name,),
            )
    for name, names in members.items():
        found[name] = replace(found[name], types=tuple(names))
    return found


DATABASE_URL_SOURCE = "SHEETQ_DATABASE_URL / --database-url"


def check_database_url(url: str, *, source: str = DATABASE_URL_SOURCE) -> None:
    """Refuse a database URL that is not a libpq ``postgresql://`` / ``postgres://`` URL
    (``ConfigError``, exit 2); the message starts with ``source``, where the URL came from
    (``--to`` for ``migrate``). It never repeats the URL: it may hold a password."""
    scheme = url.split("://", 1)[0].lower() if "://" in url else ""
    if scheme not in ("postgresql", "postgres"):
        raise ConfigError(
            f"{source}: expected a PostgreSQL URL "
            "(postgresql://USER@HOST:PORT/DBNAME or postgres://…), got one "
            + (f"with scheme {scheme!r}" if scheme else "without a scheme")
        )


def read_toml(path: Path) -> dict[str, Any]:
    """Read a TOML file (UTF-8, a BOM allowed); errors name the file, line and column
    (exit code 2)."""
    text = read_utf8(path)
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None


def load_settings(
    *,
    spreadsheet: str | None = None,
    config: str | None = None,
    env: Mapping[str, str] | None = None,
    require_spreadsheet: bool = True,
    database_url: str | None = None,
) -> Settings:
    """Build settings from flags, the environment and ``sheetq.toml``.

    Raises ``ConfigError`` (exit 2) for an unreadable or invalid file, a database URL that
    is not ``postgresql://``/``postgres://``, or when neither a spreadsheet nor a database
    is named anywhere and ``require_spreadsheet`` is set.
    """
    env = os.environ if env is None else env
    explicit = config or env.get("SHEETQ_CONFIG") or ""
    path = Path(explicit).expanduser() if explicit else Path.cwd() / DEFAULT_CONFIG
    raw: dict[str, Any] = {}
    config_path: Path | None = None
    if explicit or path.exists():
        if explicit and not path.exists():
            raise ConfigError(f"{path}: configuration file not found (from --config/SHEETQ_CONFIG)")
        raw = read_toml(path)
        config_path = path.resolve()
    try:
        return _settings(
            raw,
            config_path,
            env,
            spreadsheet=spreadsheet,
            require_spreadsheet=require_spreadsheet,
            database_url=database_url,
        )
    except ConfigError as exc:
        text = str(exc)
        if config_path is not None and text.startswith("["):  # a table's key: name the file
            raise ConfigError(f"{config_path}: {text}") from None
        raise


def _settings(
    raw: dict[str, Any],
    config_path: Path | None,
    env: Mapping[str, str],
    *,
    spreadsheet: str | None,
    require_spreadsheet: bool,
    database_url: str | None,
) -> Settings:
    base_dir = config_path.parent if config_path else Path.cwd()
    where = str(config_path or DEFAULT_CONFIG)  # the full path, like a table's errors
    _unknown_keys(where, raw, _TOP_KEYS)
    queue = raw.get("queue", {})
    defaults_raw = raw.get("defaults", {})
    telegram_raw = raw.get("telegram", {})
    for section, value in (
        ("[queue]", queue),
        ("[defaults]", defaults_raw),
        ("[telegram]", telegram_raw),
        ("[types]", raw.get("types", {})),
    ):
        if not isinstance(value, dict):
            raise ConfigError(f"{section}: expected a table")
    _unknown_keys("[queue]", queue, _QUEUE_KEYS)
    _unknown_keys("[defaults]", defaults_raw, _DEFAULT_KEYS)
    _unknown_keys("[telegram]", telegram_raw, _TELEGRAM_KEYS)

    defaults = TypeConfig(
        name="*",
        handler=None,
        policy=_policy("[defaults]", defaults_raw, RetryPolicy()),
        owner=_text("[defaults].owner", defaults_raw.get("owner", ""), "an owner's name"),
        priority=_priority("[defaults].priority", defaults_raw.get("priority", 0)),
        redact_fields=_str_list("[defaults].redact_fields", defaults_raw.get("redact_fields", [])),
        cwd=base_dir,
    )
    types = {
        str(name): _type(str(name), value, defaults, base_dir)
        for name, value in raw.get("types", {}).items()
    }
    connectors = _connectors(raw.get("connectors", {}), types)

    url = (database_url or env.get("SHEETQ_DATABASE_URL") or "").strip()
    if url:
        check_database_url(url)
    written = _text(  # checked even when the flag or variable overrides it
        "[queue].spreadsheet",
        queue.get("spreadsheet", ""),
        "a Google Sheets URL or key, or local:PATH",
    )
    sheet = (spreadsheet or env.get("SHEETQ_SPREADSHEET") or "").strip()
    if not sheet:
        sheet = written.strip()
        if sheet.startswith("local:") and not Path(sheet[6:]).expanduser().is_absolute():
            sheet = f"local:{base_dir / sheet[6:]}"  # like handlers: relative to sheetq.toml
    if require_spreadsheet and not sheet and not url:
        raise ConfigError(
            "no spreadsheet given: set SHEETQ_SPREADSHEET (or pass --spreadsheet) to a Google "
            "Sheets URL or key, or to local:PATH for the embedded SQLite backend "
            "(e.g. SHEETQ_SPREADSHEET=local:sheetq.db)"
        )

    def pick(env_name: str, key: str, default: str) -> str:
        # the file's value is checked even when the variable overrides it: the file is wrong
        if key in queue:
            written = _text(f"[queue].{key}", queue[key], "a worksheet title")
            if not written.strip():
                raise ConfigError(
                    f"[queue].{key}: an empty worksheet title; remove the key for the "
                    f"default {default!r}"
                )
        source, value = env_name, env.get(env_name) or ""
        if not value:
            source, value = f"[queue].{key}", queue.get(key) or default
        if not value.strip():
            raise ConfigError(f"{source}: expected a worksheet title, got {value!r}")
        if value != value.strip():  # "  Queue  " would silently make a second worksheet
            logging.getLogger("sheetq.config").warning(
                "%s: %r has spaces around it; using %r", source, value, value.strip()
            )
        return value.strip()

    names = (
        pick("SHEETQ_QUEUE_SHEET", "queue_sheet", "Queue"),
        pick("SHEETQ_LOG_SHEET", "log_sheet", "QueueLog"),
        pick("SHEETQ_ARCHIVE_SHEET", "archive_sheet", "QueueArchive"),
        pick("SHEETQ_LOG_ARCHIVE_SHEET", "log_archive_sheet", "QueueLogArchive"),
    )
    if len(set(names)) != 4:
        raise ConfigError(
            f"the queue, log, archive and log archive worksheets must differ, got {names}"
        )
    batch_size = queue.get("batch_size", 10)
    if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size < 1:
        raise ConfigError(f"[queue].batch_size: expected a whole number ≥ 1, got {batch_size!r}")
    written_lock_dir = _text("[queue].lock_dir", queue.get("lock_dir", ""), "a folder path")
    if "lock_dir" in queue and not written_lock_dir.strip():
        raise ConfigError("[queue].lock_dir: expected a folder path, got an empty one")
    if written_lock_dir and not Path(written_lock_dir).expanduser().is_absolute():
        # like handlers' cwd: relative to sheetq.toml, so cron (in $HOME) and a person (in
        # the app folder) share one host lock, journal and handler groups
        written_lock_dir = str(base_dir / written_lock_dir)
    lock_dir = env.get("SHEETQ_LOCK_DIR") or written_lock_dir or _default_lock_dir(env)
    template = (
        _text("[telegram].template", telegram_raw["template"], "a file path")
        if "template" in telegram_raw
        else None
    )
    chat_id = _id("[telegram].chat_id", telegram_raw.get("chat_id", ""), "a chat id")
    thread_id = _id("[telegram].thread_id", telegram_raw.get("thread_id", ""), "a topic's id")
    api_url = _text("[telegram].api_url", telegram_raw.get("api_url", ""), "a URL")
    telegram = TelegramSettings(
        token=env.get("TELEGRAM_BOT_TOKEN", "").strip(),
        chat_id=(env.get("TELEGRAM_CHAT_ID") or chat_id).strip(),
        thread_id=(env.get("TELEGRAM_THREAD_ID") or thread_id).strip(),
        api_url=(
            env.get("SHEETQ_TELEGRAM_API_URL") or api_url or "https://api.telegram.org"
        ).rstrip("/"),
        template=(base_dir / template) if template is not None else None,
    )
    return Settings(
        enqueue_timeout=_enqueue_timeout(env),
        spreadsheet=sheet,
        queue_sheet=names[0],
        log_sheet=names[1],
        archive_sheet=names[2],
        log_archive_sheet=names[3],
        lock_dir=Path(lock_dir).expanduser(),
        batch_size=batch_size,
        defaults=defaults,
        types=types,
        telegram=telegram,
        sheets_api_url=(env.get("SHEETQ_SHEETS_API_URL") or "https://sheets.googleapis.com").rstrip(
            "/"
        ),
        credentials=env.get("GOOGLE_APPLICATION_CREDENTIALS", ""),
        config_path=config_path,
        base_dir=base_dir,
        database_url=url,
        connectors=connectors,
        ingress=_table("[ingress]", raw.get("ingress", {})),
        **_mirror(raw.get("mirror", {})),
    )


def _table(section: str, raw: Any) -> dict[str, Any]:
    if not isinstance(raw, dict):
        raise ConfigError(f"{section}: expected a table")
    return raw


def _mirror(raw: Any) -> dict[str, float]:
    """``[mirror]``: ``interval`` (default 15s) and ``keep_finished`` (default 7d) (§12)."""
    if not isinstance(raw, dict):
        raise ConfigError("[mirror]: expected a table")
    _unknown_keys("[mirror]", raw, _MIRROR_KEYS)
    found: dict[str, float] = {}
    for key, name in (("interval", "mirror_interval"), ("keep_finished", "mirror_keep_finished")):
        if key in raw:
            seconds = _duration(f"[mirror].{key}", raw[key])
            if seconds <= 0:
                raise ConfigError(f"[mirror].{key}: expected a duration above 0")
            found[name] = seconds
    return found


def _enqueue_timeout(env: Mapping[str, str]) -> float:
    """``SHEETQ_ENQUEUE_TIMEOUT``: a duration with a unit (``20s``, ``1m``), above 0."""
    raw = env.get("SHEETQ_ENQUEUE_TIMEOUT", "").strip()
    if not raw:
        return DEFAULT_ENQUEUE_TIMEOUT
    try:
        seconds = parse_duration(raw, what="SHEETQ_ENQUEUE_TIMEOUT", require_unit=True)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    if seconds <= 0:
        raise ConfigError(f"SHEETQ_ENQUEUE_TIMEOUT: must be longer than 0, got {raw!r}")
    return seconds


def _default_lock_dir(env: Mapping[str, str]) -> Path:
    cache = env.get("XDG_CACHE_HOME")
    return (Path(cache) if cache else Path.home() / ".cache") / "sheetq"


def expand(value: str, env: Mapping[str, str] | None = None, *, where: str = "") -> str:
    """Replace ``${VAR}`` with the variable's value; a missing variable is a ``ConfigError``."""
    env = os.environ if env is None else env

    def sub(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in env:
            raise ConfigError(
                f"{where}: environment variable {name} is not set (used as ${{{name}}})"
            )
        return env[name]

    return _VAR.sub(sub, value)
