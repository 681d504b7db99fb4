"""Canonical JSON, payload hash and the four key rules (docs/design.md §4)."""

from __future__ import annotations

import unicodedata

import pytest

from sheetq.errors import InputError
from sheetq.idempotency import canonical_json, derive_key, parse_payload, payload_hash


def test_canonical_sorts_keys_compacts_and_keeps_non_ascii() -> None:
    """Key order and whitespace do not change the canonical text; Cyrillic stays unescaped."""
    a = canonical_json({"b": 1, "a": "Юлія"})
    b = canonical_json(parse_payload('{ "a" : "Юлія",\n "b":1 }'))
    assert a == b == '{"a":"Юлія","b":1}'


def test_canonical_nfc_normalises_strings_and_keys() -> None:
    """A decomposed 'й' (и + breve) hashes like the composed one, in keys and values."""
    composed = "Андрій"
    decomposed = unicodedata.normalize("NFD", composed)
    assert decomposed != composed
    assert canonical_json({decomposed: decomposed}) == canonical_json({composed: composed})
    assert payload_hash(canonical_json({"x": decomposed})) == payload_hash(
        canonical_json({"x": composed})
    )


def test_hash_format() -> None:
    """payload_hash is sha256: plus 64 hex digits."""
    digest = payload_hash("{}")
    assert digest.startswith("sha256:") and len(digest) == 7 + 64


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("[1, 2]", "expected a JSON object, got an array"),
        ('"x"', "got a string"),
        ("42", "got a number"),
        ("null", "got null"),
        ('{"a": 1,}', "invalid JSON at column 9"),
        ('{"a": NaN}', "NaN is not valid JSON"),
        ("", "empty"),
    ],
)
def test_parse_payload_rejects_with_location(text: str, fragment: str) -> None:
    """Non-objects and broken JSON are refused with what and where."""
    with pytest.raises(InputError) as info:
        parse_payload(text, where="payload")
    assert fragment in info.value.message


def test_key_rules_in_order() -> None:
    """--key, then key_fields, then lead_id/order_id/event_id, then the hash; scoped by type."""
    payload = {"lead_id": "L-1", "order": {"id": 7}, "x": 1}
    canonical = canonical_json(payload)
    assert derive_key("lead", payload, canonical, explicit="  abc ") == "lead:abc"
    assert derive_key("lead", payload, canonical, key_fields=["order.id"]) == "lead:order.id=7"
    assert derive_key("lead", payload, canonical) == "lead:lead_id=L-1"
    assert derive_key("crm", payload, canonical) == "crm:lead_id=L-1"
    plain = {"x": 1}
    assert derive_key("lead", plain, canonical_json(plain)) == "lead:" + payload_hash('{"x":1}')


def test_key_fields_missing_falls_through() -> None:
    """A key_fields path absent from the payload falls through to the next rule, losing nothing."""
    payload = {"event_id": "E1"}
    assert derive_key("t", payload, canonical_json(payload), key_fields=["lead_id"]) == (
        "t:event_id=E1"
    )


def test_explicit_key_limits() -> None:
    """--key is trimmed, must not be empty and is at most 200 characters."""
    with pytest.raises(InputError, match="empty"):
        derive_key("t", {}, "{}", explicit="   ")
    with pytest.raises(InputError, match="at most 200"):
        derive_key("t", {}, "{}", explicit="k" * 201)
    assert derive_key("t", {}, "{}", explicit="k" * 200) == "t:" + "k" * 200


def test_cell_size_counts_like_a_spreadsheet() -> None:
    """The 50,000-character cell limit counts UTF-16 units: an emoji counts twice."""
    from sheetq.idempotency import cell_length, check_size

    assert cell_length("abc") == 3 and cell_length("🦄") == 2 and cell_length("Юлія") == 4
    check_size("x" * 50_000)
    check_size("🦄" * 25_000)
    with pytest.raises(InputError, match="50,001 characters"):
        check_size("🦄" * 25_000 + "x")
