"""Skipping the PostgreSQL variant of a behavioural test that is about a spreadsheet itself
(a person typing any text into a cell, sheet rows, request budgets): docs/design.md §10 runs one
suite on every backend, and these few tests have no database meaning."""

from __future__ import annotations

import pytest

from tests.conftest import Book


def sheet_only(book: Book, why: str) -> None:
    """Skip this test on PostgreSQL, saying ``why`` it only means something on a sheet."""
    # by name: pytest may import conftest twice (as ``conftest`` and ``tests.conftest``)
    if type(book).__name__ == "PgBook":
        pytest.skip(f"sheet only: {why}")


def on_postgres(book: Book) -> bool:
    """Whether ``book`` is a queue in PostgreSQL (rows without sheet positions)."""
    return type(book).__name__ == "PgBook"
