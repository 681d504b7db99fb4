"""Canonical JSON, payload hash and idempotency keys (docs/design.md §4).

Canonical payload: JSON with sorted keys, ``(",", ":")`` separators, UTF-8,
non-ASCII unescaped, every string (keys included) NFC-normalised
(Unicode TR15), so the same lead typed on two keyboards hashes the same.
"""

from __future__ import annotations

import hashlib
import json
import math
import unicodedata
from collections.abc import Sequence
from typing import Any

from sheetq.errors import InputError
from sheetq.model import MAX_CELL_CHARS, MAX_KEY_CHARS

BUILTIN_KEY_FIELDS = ("lead_id", "order_id", "event_id")


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


class _DuplicateKey(ValueError):
    """An object names one key twice: which value is meant is ambiguous."""


class _Pairs(list[tuple[str, Any]]):
    """An object as its pairs, duplicates kept (to find where a key repeats)."""


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """``object_pairs_hook``: the object; ``_DuplicateKey`` when a key repeats."""
    value = dict(pairs)
    if len(value) != len(pairs):
        raise _DuplicateKey
    return value


def _repeated_key(text: str) -> str:
    """Which key repeats, and in which object (a dotted path, ``[i]`` for list items):
    the text parsed again keeping every pair, then searched in document order."""
    stack: list[tuple[Any, str]] = [(json.loads(text, object_pairs_hook=_Pairs), "")]
    while stack:
        item, path = stack.pop()
        children: list[tuple[Any, str]] = []
        if isinstance(item, _Pairs):
            seen: set[str] = set()
            for key, child in item:
                if key in seen:
                    where = f"in {path}" if path else "at the top level"
                    return f"key {json.dumps(key, ensure_ascii=False)} appears twice {where}"
                seen.add(key)
                children.append((child, f"{path}.{key}" if path else key))
        elif isinstance(item, list):
            children = [(child, f"{path}[{i}]") for i, child in enumerate(item)]
        stack.extend(reversed(children))
    return "a key appears twice in one object"  # pragma: no cover - the hook found one


def parse_payload(text: str, *, where: str = "payload") -> dict[str, Any]:
    """Parse one JSON object. Raises ``InputError`` naming ``where`` and the place: line and
    column (the column alone for one-line text, such as a ``--jsonl`` line, whose number
    ``where`` gives), or the key an object repeats (at any depth: JSON parsers disagree on
    which value wins)."""
    stripped = text.strip()
    if not stripped:
        raise InputError(f"{where}: empty; expected a JSON object such as '{{\"lead_id\": 1}}'")
    try:
        value = json.loads(
            stripped,
            parse_constant=_reject_constant,
            parse_float=_finite_float,
            object_pairs_hook=_unique_keys,
        )
    except json.JSONDecodeError as exc:
        why = exc.msg
        if why.startswith("Invalid control character"):  # json's text stops at "at"
            char = json.dumps(exc.doc[exc.pos])[1:-1]
            why = f"a raw control character inside a string (write it as {char})"
        at = (
            f"column {exc.colno}"
            if "\n" not in stripped
            else f"line {exc.lineno}, column {exc.colno}"
        )
        raise InputError(f"{where}: invalid JSON at {at}: {why}") from None
    except _TooLarge:
        raise InputError(f"{where}: {_too_large}") from None
    except _DuplicateKey:
        raise InputError(
            f"{where}: {_repeated_key(stripped)}; which value is meant is ambiguous: send "
            "each key once"
        ) from None
    except ValueError as exc:
        if "integer string conversion" in str(exc):
            raise InputError(
                f"{where}: a number with more than 4,300 digits (Python's limit); send such "
                "a number as a string"
            ) from None
        raise InputError(f"{where}: {exc}") from None
    except RecursionError:
        raise InputError(f"{where}: {_too_deep}") from None
    if _depth(value) > MAX_DEPTH:
        raise InputError(f"{where}: {_too_deep}")
    if not isinstance(value, dict):
        kind = {list: "an array", str: "a string", bool: "a boolean", type(None): "null"}.get(
            type(value), "a number"
        )
        raise InputError(f"{where}: expected a JSON object, got {kind}")
    return value


_too_large = (
    "a number too large for a double (such as 1e999: it would become Infinity, which JSON "
    "cannot carry); send it as a string"
)


class _TooLarge(Exception):
    """A JSON number beyond a double's range, met while parsing."""


def _finite_float(text: str) -> float:
    """A JSON number with a fraction or exponent as a float; ``_TooLarge`` for one that
    overflows to infinity (``1e999``), so the parse names where the text came from."""
    number = float(text)
    if not math.isfinite(number):
        raise _TooLarge(text)
    return number


MAX_DEPTH = 100  # levels of nested objects and arrays a payload may have
_too_deep = f"nested more than {MAX_DEPTH} levels deep; a task payload is not that deep"


def _depth(value: Any) -> int:
    """How deeply objects and arrays nest (1 for a flat object), without recursion."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict | list):
            deepest = max(deepest, level)
            if level > MAX_DEPTH:
                return level
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, level + 1) for child in children)
    return deepest


def _nfc(value: Any) -> Any:
    if isinstance(value, str):
        return unicodedata.normalize("NFC", value)
    if isinstance(value, dict):
        return {unicodedata.normalize("NFC", str(k)): _nfc(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_nfc(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        raise InputError(f"payload: {_too_large}")
    return value


def canonical_json(payload: Any) -> str:
    """The canonical text of a payload; also what ``payload_json`` holds.

    Raises ``InputError`` for text that is not valid Unicode (an unpaired surrogate such as
    ``"\\ud800"``, which JSON allows but UTF-8 cannot carry).
    """
    text = json.dumps(_nfc(payload), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InputError(f"payload: {_bad_unicode(text[exc.start], exc.start)}") from None
    return text


def _bad_unicode(char: str, at: int) -> str:
    """What a lone surrogate means: a byte that was not UTF-8 (read with surrogateescape,
    U+DC80..U+DCFF) or a ``\\ud800``-style escape that JSON allows and UTF-8 cannot carry."""
    code = ord(char)
    if 0xDC80 <= code <= 0xDCFF:
        return f"not valid UTF-8: byte 0x{code - 0xDC00:02X} at character {at}"
    return f"invalid Unicode at character {at}: an unpaired surrogate ({char!r}) cannot be stored"


def payload_hash(canonical: str) -> str:
    """``sha256:`` + hex digest of the canonical text."""
    return "sha256:" + hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def cell_length(text: str) -> int:
    """Length as a spreadsheet counts it: UTF-16 code units (JavaScript string length), so an
    emoji outside the Basic Multilingual Plane counts twice. Counting code points would let
    through a payload Google then refuses."""
    return len(text.encode("utf-16-le", "surrogatepass")) // 2


def check_size(canonical: str, *, where: str = "payload") -> None:
    """Refuse a payload that does not fit one cell (50,000 characters, a Google limit)."""
    size = cell_length(canonical)
    if size > MAX_CELL_CHARS:
        raise InputError(
            f"{where}: {size:,} characters as compact JSON; a payload holds at most "
            f"{MAX_CELL_CHARS:,} (a Google Sheets cell's limit, kept on every backend so that "
            "any queue can be mirrored to or moved from a sheet). Store large data elsewhere "
            "and enqueue a reference to it."
        )


def key_value(value: Any) -> str | None:
    """A payload value as key text, before encoding; ``None`` when absent (null, ``""``)."""
    if value is None or value == "":
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return unicodedata.normalize("NFC", value.strip()) or None
    if isinstance(value, int | float):
        return json.dumps(value)
    return canonical_json(value)


_KEY_ESCAPES = str.maketrans({"%": "%25", ":": "%3A", "=": "%3D"})


def encode_key_value(text: str) -> str:
    """Percent-encode ``%``, ``:`` and ``=`` (``%25``, ``%3A``, ``%3D``), the characters that
    separate a derived key's parts, so two payloads never build the same key (docs/design.md §4).
    Ordinary ids (``L-1``, ``A-1001``, ``42``) come out unchanged."""
    return text.translate(_KEY_ESCAPES)


def _key_from(parts: Sequence[tuple[str, str]]) -> str | None:
    """``f=v[:f=v…]`` with each value encoded; ``None`` when it breaks ``--key``'s limits
    (more than 200 characters, or a control character), so the hash rule applies."""
    text = ":".join(f"{name}={encode_key_value(value)}" for name, value in parts)
    if len(text) > MAX_KEY_CHARS or any(unicodedata.category(c) == "Cc" for c in text):
        return None
    return text


def path_value(payload: dict[str, Any], path: str) -> Any:
    """The value at a dotted path (``customer.id``) of a payload; ``None`` when absent."""
    node: Any = payload
    for part in path.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def clean_explicit_key(key: str) -> str:
    """``--key K``: trimmed, NFC-normalised like payloads, no control characters (tab,
    newline…), non-empty, at most 200 characters."""
    cleaned = unicodedata.normalize("NFC", key.strip())
    if not cleaned:
        raise InputError("--key: empty after trimming spaces")
    bad = next((c for c in cleaned if unicodedata.category(c) in ("Cc", "Cs")), None)
    if bad is not None and unicodedata.category(bad) == "Cs":
        raise InputError(f"--key: {_bad_unicode(bad, cleaned.index(bad))}")
    if bad is not None:
        raise InputError(f"--key: contains the control character {bad!r}; keys are one line")
    if len(cleaned) > MAX_KEY_CHARS:
        raise InputError(f"--key: {len(cleaned)} characters; at most {MAX_KEY_CHARS} allowed")
    return cleaned


def derive_key(
    task_type: str,
    payload: dict[str, Any],
    canonical: str,
    *,
    explicit: str | None = None,
    key_fields: Sequence[str] = (),
) -> str:
    """The idempotency key, first rule that applies (docs/design.md §4), scoped by type.

    1. ``--key K`` → ``TYPE:K``; 2. the type's ``key_fields`` (dotted paths, all
    present) → ``TYPE:f=v[:f=v…]``; 3. the built-in ``lead_id``, ``order_id``,
    ``event_id`` present at the top level → ``TYPE:lead_id=…``; 4. the hash →
    ``TYPE:sha256:…``.

    In rules 2 and 3 each value is text (a number in its JSON form, ``true``/``false``;
    null and ``""`` count as absent) with ``%``, ``:`` and ``=`` percent-encoded. A derived
    key longer than 200 characters after ``TYPE:``, or holding a control character, is
    replaced by the hash (rule 4).
    """
    if explicit is not None:
        return f"{task_type}:{clean_explicit_key(explicit)}"
    derived: str | None = None
    if key_fields:
        fields = [(f, key_value(path_value(payload, f))) for f in key_fields]
        if all(v is not None for _, v in fields):
            derived = _key_from([(f, v) for f, v in fields if v is not None])
            if derived is None:  # too long or not one line: the hash, as docs/design.md §4 says
                return f"{task_type}:{payload_hash(canonical)}"
    if derived is None:
        builtin = [(f, key_value(payload.get(f))) for f in BUILTIN_KEY_FIELDS]
        present = [(f, v) for f, v in builtin if v is not None]
        if present:
            derived = _key_from(present)
    if derived is not None:
        return f"{task_type}:{derived}"
    return f"{task_type}:{payload_hash(canonical)}"
