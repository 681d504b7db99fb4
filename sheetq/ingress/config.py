"""``[ingress]`` of ``sheetq.toml`` → the routes ``sheetq serve`` answers (docs/design.md §15).

```toml
[ingress]
listen = "127.0.0.1:8080"
batch_window = "1s"
max_body = "1MB"
[ingress.routes.tilda]            # POST /hooks/tilda
type = "lead"
signature = "hmac-sha256"         # or "github", "stripe", "none"
secret = "${TILDA_SECRET}"
signature_header = "X-Signature"
signature_prefix = "sha256="
signature_encoding = "hex"        # or "base64"
key_header = "X-Delivery-Id"
```

Secrets are expanded from the environment (``${VAR}``) here, registered with
``sheetq.redact`` so no log line carries them, and never printed: a route's ``repr`` hides
its secret. Errors are ``ConfigError`` (exit 2) naming the key.
"""

from __future__ import annotations

import difflib
import ipaddress
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from sheetq.config import TYPE_PATTERN, TYPE_RULE, Settings, expand
from sheetq.errors import ConfigError
from sheetq.redact import register_secret
from sheetq.times import parse_duration

DEFAULT_LISTEN = "127.0.0.1:8080"
DEFAULT_BATCH_WINDOW = 1.0  # seconds, on Google
DEFAULT_MAX_BODY = 1_048_576  # bytes of request body
SIGNATURES = ("hmac-sha256", "github", "stripe", "none")
STRIPE_TOLERANCE = 300.0  # seconds: Stripe's default replay tolerance
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
_HEADER = re.compile(r"^[A-Za-z0-9!#$%&'*+.^_`|~-]+$")
_SIZE = re.compile(r"^\s*(\d+)\s*(b|kb|kib|mb|mib)?\s*$", re.IGNORECASE)
_SIZE_UNITS = {"b": 1, "kb": 1000, "kib": 1024, "mb": 1_000_000, "mib": 1_048_576}
_INGRESS_KEYS = {"listen", "batch_window", "max_body", "routes"}
_ROUTE_KEYS = {
    "type",
    "signature",
    "secret",
    "signature_header",
    "signature_prefix",
    "signature_encoding",
    "key_header",
    "tolerance",
}


@dataclass(frozen=True)
class Route:
    """``POST /hooks/NAME``: its task ``type``, the signature check (``signature`` kind; the
    header, the text before the digest and its encoding; ``tolerance`` seconds for a
    timestamped one) and ``key_header``, the header whose value is the idempotency key."""

    name: str
    type: str
    signature: str
    secret: str = field(repr=False, default="")
    header: str = ""
    prefix: str = ""
    encoding: str = "hex"
    key_header: str = ""
    tolerance: float = STRIPE_TOLERANCE


@dataclass(frozen=True)
class Ingress:
    """What ``sheetq serve`` listens on and answers."""

    host: str
    port: int
    batch_window: float
    max_body: int
    routes: Mapping[str, Route]


def parse_listen(text: str, *, where: str = "--listen") -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:8080`` for IPv6; port 0 picks a free one)."""
    match = re.fullmatch(r"\s*(\[[^\]]+\]|[^:\s]+):(\d{1,5})\s*", text or "")
    if not match or int(match.group(2)) > 65535:
        raise ConfigError(f"{where}: expected HOST:PORT like 127.0.0.1:8080, got {text!r}")
    return match.group(1).strip("[]"), int(match.group(2))


def is_loopback(host: str) -> bool:
    """True for ``localhost`` and addresses in 127.0.0.0/8 or ``::1``."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _size(where: str, value: Any) -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        number, unit = value, "b"
    else:
        match = _SIZE.match(str(value))
        if not match:
            raise ConfigError(f"{where}: expected a size like 1MB or 65536, got {value!r}")
        number, unit = int(match.group(1)), (match.group(2) or "b").lower()
    size = number * _SIZE_UNITS[unit]
    if size < 1024:
        raise ConfigError(f"{where}: at least 1KB, got {value!r}")
    return size


def _text(where: str, raw: Mapping[str, Any], key: str, default: str = "") -> str:
    value = raw.get(key, default)
    if not isinstance(value, str):
        raise ConfigError(f"{where}.{key}: expected a string, got {type(value).__name__}")
    return value


def _route(name: str, raw: Any, env: Mapping[str, str] | None) -> Route:
    where = f"[ingress.routes.{name}]"
    if not _NAME.match(name):
        raise ConfigError(
            f"{where}: a route name is the path /hooks/NAME: letters, digits, _ . - "
            "(at most 64 characters)"
        )
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: expected a table")
    unknown = sorted(set(raw) - _ROUTE_KEYS)
    if unknown:
        raise ConfigError(f"{where}: unknown key '{unknown[0]}'")
    task_type = _text(where, raw, "type")
    if not TYPE_PATTERN.match(task_type):
        raise ConfigError(f"{where}.type: {task_type!r}: {TYPE_RULE}")
    kind = _text(where, raw, "signature")
    if kind not in SIGNATURES:
        raise ConfigError(
            f"{where}.signature: expected one of {', '.join(SIGNATURES)}, got {kind!r}"
        )
    secret = ""
    if kind != "none":
        written = _text(where, raw, "secret")
        if not written:
            raise ConfigError(
                f'{where}.secret: required for signature = "{kind}" (e.g. secret = '
                '"${WEBHOOK_SECRET}", the value in the environment or .env)'
            )
        if "${" not in written:  # never echoed: it is the secret itself
            raise ConfigError(
                f"{where}.secret: written into the file; a secret is kept out of "
                "sheetq.toml: set it in the environment or .env and write secret = "
                '"${WEBHOOK_SECRET}" (its name)'
            )
        secret = expand(written, env, where=f"{where}.secret")
        if not secret:
            raise ConfigError(f"{where}.secret: empty after expanding the environment")
        register_secret(secret)
    elif "secret" in raw:
        raise ConfigError(f'{where}.secret: given, but signature = "none" checks nothing')
    defaults = {
        "hmac-sha256": ("X-Signature", "", "hex"),
        "github": ("X-Hub-Signature-256", "sha256=", "hex"),
        "stripe": ("Stripe-Signature", "", "hex"),
        "none": ("", "", "hex"),
    }[kind]
    if kind != "hmac-sha256":
        for key in ("signature_header", "signature_prefix", "signature_encoding"):
            if key in raw:
                raise ConfigError(f'{where}.{key}: only for signature = "hmac-sha256"')
    header = _text(where, raw, "signature_header", defaults[0])
    if header and not _HEADER.match(header):
        raise ConfigError(f"{where}.signature_header: {header!r} is not a header name")
    encoding = _text(where, raw, "signature_encoding", defaults[2]).lower()
    if encoding not in ("hex", "base64"):
        raise ConfigError(f'{where}.signature_encoding: expected "hex" or "base64"')
    key_header = _text(where, raw, "key_header", "X-GitHub-Delivery" if kind == "github" else "")
    if key_header and not _HEADER.match(key_header):
        raise ConfigError(f"{where}.key_header: {key_header!r} is not a header name")
    tolerance = STRIPE_TOLERANCE
    if "tolerance" in raw:
        if kind != "stripe":
            raise ConfigError(f'{where}.tolerance: only for signature = "stripe"')
        try:
            tolerance = parse_duration(
                raw["tolerance"], what=f"{where}.tolerance", require_unit=True
            )
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
    return Route(
        name=name,
        type=task_type,
        signature=kind,
        secret=secret,
        header=header,
        prefix=_text(where, raw, "signature_prefix", defaults[1]),
        encoding=encoding,
        key_header=key_header,
        tolerance=tolerance,
    )


def load_ingress(
    settings: Settings, *, listen: str | None = None, env: Mapping[str, str] | None = None
) -> Ingress:
    """The ingress ``settings.ingress`` describes; ``listen`` (``--listen``) overrides
    ``[ingress] listen``. Refuses (``ConfigError``) a configuration without routes, an
    unknown key, a missing secret, and ``signature = "none"`` unless listening on loopback.
    A message about a key of the file starts with the file's full path."""
    try:
        return _load_ingress(settings.ingress, listen, env)
    except ConfigError as exc:
        text = str(exc)
        if settings.config_path is not None and text.startswith("["):  # a key: name the file
            raise ConfigError(f"{settings.config_path}: {text}") from None
        raise


def _load_ingress(
    raw: Mapping[str, Any], listen: str | None, env: Mapping[str, str] | None
) -> Ingress:
    unknown = sorted(set(raw) - _INGRESS_KEYS)
    if unknown:
        raise ConfigError(f"[ingress]: unknown key '{unknown[0]}'")
    where_listen = "--listen" if listen else "[ingress].listen"
    written = listen or raw.get("listen", DEFAULT_LISTEN)
    if not isinstance(written, str):
        raise ConfigError(
            f"{where_listen}: expected HOST:PORT like 127.0.0.1:8080, got {written!r}"
        )
    host, port = parse_listen(written, where=where_listen)
    window = DEFAULT_BATCH_WINDOW
    if "batch_window" in raw:
        try:
            window = parse_duration(
                raw["batch_window"], what="[ingress].batch_window", require_unit=True
            )
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        if window > 10:
            raise ConfigError("[ingress].batch_window: at most 10s (senders wait that long)")
    max_body = _size("[ingress].max_body", raw.get("max_body", DEFAULT_MAX_BODY))
    routes_raw = raw.get("routes", {})
    if not isinstance(routes_raw, dict) or not routes_raw:
        raise ConfigError(
            "sheetq serve: no routes: add [ingress.routes.NAME] to sheetq.toml with the task "
            'type and the signature, e.g. type = "lead", signature = "hmac-sha256", '
            'secret = "${WEBHOOK_SECRET}"'
        )
    routes = {str(name): _route(str(name), value, env) for name, value in routes_raw.items()}
    open_routes = [r.name for r in routes.values() if r.signature == "none"]
    if open_routes and not is_loopback(host):
        raise ConfigError(
            f'[ingress.routes.{open_routes[0]}]: signature = "none" is refused when serve '
            f"listens on {host} (not loopback): anyone could enqueue. Give it a signature, or "
            "listen on 127.0.0.1 behind a proxy that checks the sender"
        )
    return Ingress(host, port, window, max_body, routes)


def unconfigured_types(ingress: Ingress, settings: Settings) -> list[str]:
    """One line per route whose task type has no ``[types.NAME]`` in the configuration
    (with the closest configured name): most often a typo, whose tasks would wait for a
    handler no one runs. Not an error: a worker on another host may hold that type."""

    lines = []
    known = sorted(settings.types)
    for route in ingress.routes.values():
        if route.type in settings.types:
            continue
        close = difflib.get_close_matches(route.type, known, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        lines.append(
            f"[ingress.routes.{route.name}].type {route.type!r}: no [types.{route.type}] in "
            f"{settings.config_path or 'the configuration'}{hint}; its tasks wait until a "
            "handler for it runs"
        )
    return lines
