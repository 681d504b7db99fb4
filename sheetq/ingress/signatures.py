"""Webhook signatures over the raw request body (docs/design.md §15), as the senders
document them:

* ``hmac-sha256``: HMAC-SHA256 of the body with the shared secret, in a header (configurable
  name), after an optional prefix, hex or base64;
* ``github``: ``X-Hub-Signature-256: sha256=<hex HMAC-SHA256 of the body>``;
* ``stripe``: ``Stripe-Signature: t=<unix time>,v1=<hex HMAC-SHA256 of "t.body">[,v1=…]``,
  refused when ``t`` is more than the tolerance (5 minutes) away from now (a replay);
* ``none``: nothing to check (allowed on loopback only, ``sheetq.ingress.config``).

Digests are compared in constant time (``hmac.compare_digest``). ``check`` returns ``""``
when the signature holds, else a short reason for the log that names no secret and no part
of the body.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
from collections.abc import Mapping

from sheetq.ingress.config import Route


def _digest(secret: str, message: bytes) -> bytes:
    return hmac.new(secret.encode("utf-8"), message, hashlib.sha256).digest()


def _decode(text: str, encoding: str) -> bytes | None:
    try:
        if encoding == "base64":
            return base64.b64decode(text.strip(), validate=True)
        return bytes.fromhex(text.strip())
    except (ValueError, binascii.Error):
        return None


def check(route: Route, headers: Mapping[str, str], body: bytes, *, now: float) -> str:
    """``""`` when the request's signature holds for ``route``; else why not (a few words:
    ``missing header X``, ``malformed header X``, ``mismatch``, ``timestamp outside the
    tolerance``). ``headers`` are case-insensitive (Starlette's); ``now`` is Unix time."""
    if route.signature == "none":
        return ""
    value = headers.get(route.header)
    if value is None or not value.strip():
        return f"missing header {route.header}"
    if route.signature == "stripe":
        return _stripe(route, value, body, now=now)
    value = value.strip()
    if route.prefix:
        if not value.startswith(route.prefix):
            return f"malformed header {route.header} (expected the prefix {route.prefix!r})"
        value = value[len(route.prefix) :]
    given = _decode(value, route.encoding)
    if given is None:
        return f"malformed header {route.header} (not {route.encoding})"
    return "" if hmac.compare_digest(given, _digest(route.secret, body)) else "mismatch"


def _stripe(route: Route, value: str, body: bytes, *, now: float) -> str:
    stamp = ""
    signatures: list[str] = []
    for part in value.split(","):
        name, _, item = part.strip().partition("=")
        if name == "t":
            stamp = item
        elif name == "v1":
            signatures.append(item)
    if not stamp.isdigit() or not signatures:
        return f"malformed header {route.header} (expected t=…,v1=…)"
    expected = _digest(route.secret, stamp.encode("ascii") + b"." + body)
    if not any(
        (given := _decode(s, "hex")) is not None and hmac.compare_digest(given, expected)
        for s in signatures
    ):
        return "mismatch"
    if abs(now - int(stamp)) > route.tolerance:
        return f"timestamp outside the tolerance ({route.tolerance:g}s): a replay or a wrong clock"
    return ""


def sign(route: Route, body: bytes, *, now: float | None = None) -> dict[str, str]:
    """The header a sender would send for ``body`` on ``route`` (tests, benchmarks and the
    docs' curl examples): ``now`` is the Stripe timestamp."""
    if route.signature == "none":
        return {}
    if route.signature == "stripe":
        stamp = str(int(now or 0))
        digest = _digest(route.secret, stamp.encode("ascii") + b"." + body).hex()
        return {route.header: f"t={stamp},v1={digest}"}
    raw = _digest(route.secret, body)
    text = base64.b64encode(raw).decode("ascii") if route.encoding == "base64" else raw.hex()
    return {route.header: route.prefix + text}
