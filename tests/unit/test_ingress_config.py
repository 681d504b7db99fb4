"""`[ingress]` and the webhook signatures of `sheetq serve` (docs/design.md §15), without a
server: what is refused at load, and which signatures hold."""

from __future__ import annotations

import base64
import hashlib
import hmac
import subprocess
import sys

import pytest

from sheetq.config import Settings
from sheetq.errors import ConfigError
from sheetq.ingress.config import Route, load_ingress
from sheetq.ingress.signatures import check, sign

ENV = {"HOOK_SECRET": "whsec_0123456789abcdef"}
BODY = b'{"lead_id":"L-1"}'


def _ingress(routes: dict[str, dict[str, object]], **top: object) -> object:
    return load_ingress(Settings(spreadsheet="", ingress={**top, "routes": routes}), env=ENV)


def _route(**raw: object) -> Route:
    ingress = _ingress({"r": {"type": "lead", "secret": "${HOOK_SECRET}", **raw}})
    return ingress.routes["r"]  # type: ignore[attr-defined, no-any-return]


def test_hmac_hex_base64_and_prefix() -> None:
    """hmac-sha256 over the raw body: hex by default, base64 when told, after the prefix;
    a changed body, a wrong prefix or another encoding is refused."""
    digest = hmac.new(ENV["HOOK_SECRET"].encode(), BODY, hashlib.sha256).digest()
    plain = _route(signature="hmac-sha256")
    assert check(plain, {"X-Signature": digest.hex()}, BODY, now=0) == ""
    assert check(plain, {"X-Signature": digest.hex().upper()}, BODY, now=0) == ""
    assert check(plain, {"X-Signature": digest.hex()}, BODY + b" ", now=0) == "mismatch"
    assert check(plain, {}, BODY, now=0) == "missing header X-Signature"
    b64 = _route(
        signature="hmac-sha256",
        signature_header="X-Tilda-Signature",
        signature_prefix="sha256=",
        signature_encoding="base64",
    )
    good = {"X-Tilda-Signature": "sha256=" + base64.b64encode(digest).decode()}
    assert check(b64, good, BODY, now=0) == ""
    assert "prefix" in check(b64, {"X-Tilda-Signature": digest.hex()}, BODY, now=0)
    assert check(b64, sign(b64, BODY), BODY, now=0) == ""


def test_github_and_stripe_with_its_tolerance() -> None:
    """github: X-Hub-Signature-256 = sha256=<hex>; stripe: t=…,v1=… over "t.body", refused
    more than 5 minutes away from now (a replay), one of several v1 enough (rotation)."""
    github = _route(signature="github")
    assert github.key_header == "X-GitHub-Delivery"
    digest = hmac.new(ENV["HOOK_SECRET"].encode(), BODY, hashlib.sha256).hexdigest()
    assert check(github, {"X-Hub-Signature-256": f"sha256={digest}"}, BODY, now=0) == ""
    assert check(github, {"X-Hub-Signature-256": digest}, BODY, now=0) != ""
    stripe = _route(signature="stripe")
    now = 1_800_000_000
    header = sign(stripe, BODY, now=now)
    assert check(stripe, header, BODY, now=now + 299) == ""
    assert "tolerance" in check(stripe, header, BODY, now=now + 301)
    assert "tolerance" in check(stripe, header, BODY, now=now - 301)
    rotated = {"Stripe-Signature": header["Stripe-Signature"].replace(",v1=", ",v1=00,v1=")}
    assert check(stripe, rotated, BODY, now=now) == ""
    assert check(stripe, {"Stripe-Signature": "v1=ab"}, BODY, now=now).startswith("malformed")


@pytest.mark.parametrize(
    ("routes", "top", "words"),
    [
        ({}, {}, "no routes"),
        ({"r": {"type": "lead", "signature": "none"}}, {"listen": "0.0.0.0:8080"}, "loopback"),
        ({"r": {"type": "lead", "signature": "hmac-sha256"}}, {}, "secret: required"),
        (
            {"r": {"type": "lead", "signature": "hmac-sha256", "secret": "${NOPE}"}},
            {},
            "NOPE is not set",
        ),
        ({"r": {"type": "a:b", "signature": "none"}}, {}, "type"),
        (
            {"r": {"type": "lead", "signature": "github", "secret": "hunter2-literal"}},
            {},
            "kept out of sheetq.toml",
        ),
        ({"r": {"type": "lead", "signature": "md5", "secret": "x"}}, {}, "signature"),
        ({"r": {"type": "lead", "signature": "none", "secrets": "x"}}, {}, "unknown key"),
        ({"r": {"type": "lead", "signature": "none"}}, {"batch_window": "1"}, "unit"),
        ({"r": {"type": "lead", "signature": "none"}}, {"max_body": "lots"}, "size"),
    ],
)
def test_bad_ingress_is_refused_naming_the_key(
    routes: dict[str, dict[str, object]], top: dict[str, object], words: str
) -> None:
    """Each mistake is one ConfigError (exit 2) naming what to fix, never a secret."""
    with pytest.raises(ConfigError) as caught:
        _ingress(routes, **top)
    assert words in caught.value.message
    assert ENV["HOOK_SECRET"] not in caught.value.message
    assert "hunter2" not in caught.value.message


def test_none_is_allowed_on_loopback_and_secrets_stay_out_of_repr() -> None:
    ingress = _ingress(
        {
            "open": {"type": "job", "signature": "none"},
            "r": {"type": "lead", "signature": "github", "secret": "${HOOK_SECRET}"},
        },
        listen="[::1]:0",
    )
    assert ingress.host == "::1"  # type: ignore[attr-defined]
    assert ENV["HOOK_SECRET"] not in repr(ingress)


def test_the_cli_loads_no_web_stack() -> None:
    """`sheetq --help` and every other command start without Starlette, uvicorn or
    prometheus_client: only `sheetq serve` imports them."""
    code = (
        "import sys\nfrom sheetq.cli import app\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'starlette', 'uvicorn',"
        " 'prometheus_client', 'anyio'}), 'sheetq.ingress' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[] False"
