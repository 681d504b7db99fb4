"""Key value encoding of docs/design.md §4: derived keys never collide, ordinary ids unchanged."""

from __future__ import annotations

from typing import Any

import pytest

from sheetq.idempotency import canonical_json, derive_key, encode_key_value, payload_hash


def _key(payload: dict[str, Any], key_fields: tuple[str, ...] = ()) -> str:
    return derive_key("t", payload, canonical_json(payload), key_fields=key_fields)


def test_separator_characters_in_values_do_not_collide() -> None:
    """The issue's pair builds two different keys once ':' and '=' are percent-encoded."""
    first = _key({"a": "x:b=y", "b": "z"}, ("a", "b"))
    second = _key({"a": "x", "b": "y:b=z"}, ("a", "b"))
    assert first == "t:a=x%3Ab%3Dy:b=z"
    assert second == "t:a=x:b=y%3Ab%3Dz"
    assert first != second


def test_percent_sign_is_encoded_first() -> None:
    """A literal '%3A' in a value cannot pass for an encoded ':' ('%' becomes '%25')."""
    assert encode_key_value("50%") == "50%25"
    assert _key({"order_id": "a%3Ab"}) != _key({"order_id": "a:b"})
    assert _key({"order_id": "a%3Ab"}) == "t:order_id=a%253Ab"


@pytest.mark.parametrize(
    ("payload", "key"),
    [
        ({"lead_id": "L-1"}, "t:lead_id=L-1"),
        ({"order_id": "A-1001"}, "t:order_id=A-1001"),
        ({"event_id": 42}, "t:event_id=42"),
        ({"event_id": 1.5}, "t:event_id=1.5"),
        ({"lead_id": True}, "t:lead_id=true"),
        ({"lead_id": "L-1", "order_id": "A/7 b"}, "t:lead_id=L-1:order_id=A/7 b"),
        ({"lead_id": "a@b.c?x&y#z"}, "t:lead_id=a@b.c?x&y#z"),
    ],
)
def test_ordinary_ids_are_unchanged(payload: dict[str, Any], key: str) -> None:
    """Ids without '%', ':' or '=' build the same key as before the encoding existed."""
    assert _key(payload) == key


def test_structured_value_is_canonical_json_encoded() -> None:
    """An object or array value is its canonical JSON, with ':' encoded."""
    assert _key({"ref": {"b": 1, "a": [2]}}, ("ref",)) == 't:ref={"a"%3A[2],"b"%3A1}'


def test_null_and_empty_values_are_absent() -> None:
    """null and "" are no id: the next rule applies (a null lead_id must not make all such
    leads one task)."""
    payload: dict[str, Any] = {"lead_id": None, "event_id": "", "x": 1}
    assert _key(payload) == "t:" + payload_hash(canonical_json(payload))
    assert _key({"a": None, "lead_id": "L"}, ("a",)) == "t:lead_id=L"


def test_derived_key_over_200_characters_falls_to_the_hash() -> None:
    """A derived key longer than --key allows (200 after 'TYPE:') becomes the hash key."""
    fits = {"order_id": "x" * (200 - len("order_id="))}
    assert _key(fits) == "t:order_id=" + "x" * 191
    long = {"order_id": "x" * 192}
    assert _key(long) == "t:" + payload_hash(canonical_json(long))
    encoded = {"order_id": ":" * 64}  # 64 characters, 192 once encoded
    assert _key(encoded) == "t:" + payload_hash(canonical_json(encoded))


def test_key_fields_over_the_limit_go_to_the_hash_not_the_builtin_rule() -> None:
    """Rule 2 breaking the limits falls through to rule 4, as docs/design.md §4 says."""
    payload = {"a": "y" * 300, "lead_id": "L-1"}
    assert _key(payload, ("a",)) == "t:" + payload_hash(canonical_json(payload))


def test_control_character_falls_to_the_hash() -> None:
    """A value holding a newline or tab would make a key of two lines: the hash is used."""
    for value in ("L-1\nL-2", "a\tb", "x\x00"):
        payload = {"lead_id": value}
        assert _key(payload) == "t:" + payload_hash(canonical_json(payload))
    assert _key({"lead_id": "  L-1 \n"}) == "t:lead_id=L-1"  # trimmed first
