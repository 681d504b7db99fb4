"""Enqueue at its limits (DESIGN.md §4): encoded derived keys, racing same-key enqueues on the
local backend, `--jsonl` split under Google's 10 MB request cap, SHEETQ_ENQUEUE_TIMEOUT."""

from __future__ import annotations

import json
from typing import Any

from tests.conftest import Book, run_cli, write_config


def test_values_with_separators_are_two_tasks(book: Book) -> None:
    """{"a":"x:b=y","b":"z"} and {"a":"x","b":"y:b=z"} with key_fields a, b: two keys, both
    enqueued (exit 0), no conflict."""
    write_config('[types.pair]\nkey_fields = ["a", "b"]\n')
    first: dict[str, Any] = {"a": "x:b=y", "b": "z"}
    second: dict[str, Any] = {"a": "x", "b": "y:b=z"}
    one = run_cli(["enqueue", "pair", json.dumps(first), "--json"])
    two = run_cli(["enqueue", "pair", json.dumps(second), "--json"])
    assert (one.code, two.code) == (0, 0), one.stderr + two.stderr
    assert one.json()["outcome"] == two.json()["outcome"] == "enqueued"
    assert one.json()["idempotency_key"] == "pair:a=x%3Ab%3Dy:b=z"
    assert two.json()["idempotency_key"] == "pair:a=x:b=y%3Ab%3Dz"
    assert len(book.records()) == 2
    again = run_cli(["enqueue", "pair", json.dumps(second), "--json"])
    assert again.code == 0 and again.json()["outcome"] == "duplicate"
