"""The PostgreSQL engine's named queries and numbered migration files load as documented."""

from __future__ import annotations

import pytest

from sheetq.postgres import queries, schema


def test_a_file_gives_one_statement_per_name() -> None:
    text = "-- name: one\n-- what it does\nSELECT 1;\n\n-- name: two\nSELECT\n  2\n"
    assert queries.parse(text, "x.sql") == {"one": "SELECT 1", "two": "SELECT\n  2"}


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("-- name: a\nSELECT 1\n-- name: a\nSELECT 2\n", "defined twice"),
        ("-- name: empty\n-- only a comment\n", "has no statement"),
    ],
)
def test_a_broken_file_is_refused_at_load(text: str, says: str) -> None:
    with pytest.raises(RuntimeError, match=says):
        queries.parse(text, "x.sql")


def test_every_shipped_query_and_migration_loads() -> None:
    assert queries.QUERIES and all(q.strip() for q in queries.QUERIES.values())
    versions = [m.version for m in schema.MIGRATIONS]
    assert versions == list(range(1, len(versions) + 1)) and versions[-1] == schema.VERSION
    assert all(m.name and not m.name.startswith("-") for m in schema.MIGRATIONS)


def test_two_statements_join_into_one_unless_their_cte_names_clash() -> None:
    first = "WITH a AS (\n  SELECT 1 AS n\n), b AS (\n  SELECT n FROM a\n)\nSELECT n FROM b"
    second = "WITH RECURSIVE c AS (\n  SELECT 2 AS m\n)\nSELECT m FROM c"
    one = queries.joined(first, second)
    assert one.startswith("WITH RECURSIVE c AS (") and one.count("SELECT n FROM b") == 1
    assert one.rstrip().endswith("AS joined_second ON true")
    with pytest.raises(RuntimeError, match=r"share CTE name\(s\) \['a'\]"):
        queries.joined(first, "WITH a AS (\n  SELECT 3\n)\nSELECT 3")
    with pytest.raises(RuntimeError, match="cannot be joined"):
        queries.joined("SELECT 1", second)
    assert "settle_and_claim" in queries.QUERIES


def test_a_named_statement_becomes_positional_for_a_raw_cursor() -> None:
    query, names = queries.positional("SELECT %(b)s, %(a)s, %(b)s, 5 %% 2")
    assert (query, names) == (b"SELECT $1, $2, $1, 5 % 2", ("b", "a"))
    with pytest.raises(RuntimeError, match="stray"):
        queries.positional("SELECT 100%")
    turn, params = queries.positional(queries.QUERIES["settle_and_claim"])
    assert b"%(" not in turn and {"queue", "run", "ids", "limit"} <= set(params)
