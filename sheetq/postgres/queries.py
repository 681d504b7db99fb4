"""Named SQL queries, read from ``sheetq/postgres/queries/*.sql`` (the way procrastinate
keeps its queries): every statement the PostgreSQL engine runs has one name and lives in
one place, as text, never composed from pieces.

A file holds blocks, each opened by a line ``-- name: NAME`` and followed by ``--`` comment
lines (what the query does, its parameters) and the statement, up to the next ``-- name:``.
Parameters are psycopg's named placeholders (``%(queue)s``). ``QUERIES[NAME]`` is the
statement's text; a name defined twice, or a block without a statement, raises
``RuntimeError`` at import (a packaging error, never a user's).

One statement is made of two: ``settle_and_claim`` (a worker's turn, docs/design.md §11) is
``settle`` and ``claim`` run as ONE statement (``joined``), so a turn costs one round trip
and one statement's fixed cost instead of four (BEGIN, settle, claim, COMMIT); each keeps
its text in one place.
"""

from __future__ import annotations

import re
from importlib import resources

_MARK = "-- name:"
_WITH = re.compile(r"WITH (RECURSIVE )?")
_NAMED = re.compile(r"%\((\w+)\)s|%%|%")
_CTE = re.compile(r"^(?:WITH (?:RECURSIVE )?|\), )(\w+) AS ", re.MULTILINE)


def parse(text: str, source: str) -> dict[str, str]:
    """The named statements of one ``.sql`` file's ``text`` (``source`` names it in errors)."""
    found: dict[str, str] = {}
    name = ""
    lines: list[str] = []

    def close() -> None:
        statement = "\n".join(line for line in lines if not line.lstrip().startswith("--"))
        if not statement.strip():
            raise RuntimeError(f"{source}: query {name!r} has no statement")
        if name in found:
            raise RuntimeError(f"{source}: query {name!r} is defined twice")
        found[name] = statement.strip().rstrip(";")

    for line in text.splitlines():
        if line.startswith(_MARK):
            if name:
                close()
            name, lines = line[len(_MARK) :].strip(), []
        elif name:
            lines.append(line)
    if name:
        close()
    return found


def _load() -> dict[str, str]:
    queries: dict[str, str] = {}
    folder = resources.files("sheetq.postgres").joinpath("queries")
    for entry in sorted(folder.iterdir(), key=lambda e: e.name):
        if entry.name.endswith(".sql"):
            for name, statement in parse(entry.read_text(encoding="utf-8"), entry.name).items():
                if name in queries:
                    raise RuntimeError(f"{entry.name}: query {name!r} is defined twice")
                queries[name] = statement
    return queries


def _parts(statement: str, name: str) -> tuple[str, str]:
    """(the CTE list, the final SELECT) of ``WITH [RECURSIVE] … SELECT …`` (the final
    SELECT: the last line that starts with ``SELECT``, unindented)."""
    opened = _WITH.match(statement)
    final = statement.rfind("\nSELECT ")
    if opened is None or final < 0:
        raise RuntimeError(f"query {name!r}: not WITH … SELECT …, cannot be joined")
    return statement[opened.end() : final].rstrip(), statement[final + 1 :]


def joined(first: str, second: str, names: tuple[str, str] = ("first", "second")) -> str:
    """``first`` and ``second`` (each ``WITH … SELECT …``, the first's final SELECT giving
    one column) as one statement: one snapshot, one implicit transaction when sent alone.
    Returns the second's rows (one row of NULLs when it has none), each with ``first_rows``:
    the first's column as an array (NULL when it gave no row). Both statements' data
    changes happen whatever the other returns; the second does not see the first's changes
    (one snapshot), and its CTE names must differ from the first's (``RuntimeError``)."""
    ctes_1, final_1 = _parts(first, names[0])
    ctes_2, final_2 = _parts(second, names[1])
    clash = set(_CTE.findall(first)) & set(_CTE.findall(second))
    if clash:
        raise RuntimeError(
            f"queries {names[0]!r} and {names[1]!r} share CTE name(s) {sorted(clash)}: "
            "cannot be joined"
        )
    return (
        # the second's CTEs first: PostgreSQL runs the unreferenced data-modifying CTEs (the
        # log inserts) in the reverse order of their appearance, so the first's rows are
        # written first, as when the two statements ran one after the other
        f"WITH RECURSIVE {ctes_2},\n{ctes_1},\n"
        "joined_first AS (\n"
        f"SELECT array_agg(joined_row.value) AS first_rows FROM (\n{final_1}\n)"
        " AS joined_row(value))\n"
        "SELECT joined_first.first_rows, joined_second.*\n"
        f"FROM joined_first LEFT JOIN (\n{final_2}\n) AS joined_second ON true"
    )


def positional(statement: str) -> tuple[bytes, tuple[str, ...]]:
    """``statement`` with its named placeholders (``%(name)s``) as PostgreSQL's ``$1``,
    ``$2``… (``%%`` as ``%``), encoded, and the names in that order: for a
    ``psycopg.RawCursor``, which sends it as it is (psycopg converts a named statement on
    every call when it is longer than 4 kB). ``RuntimeError`` for a stray ``%``."""
    order: dict[str, int] = {}

    def number(found: re.Match[str]) -> str:
        name = found.group(1)
        if name is None:
            if found.group(0) == "%":
                raise RuntimeError(f"a stray % in a statement: {statement[:60]!r}…")
            return "%"
        return f"${order.setdefault(name, len(order) + 1)}"

    text = _NAMED.sub(number, statement)
    return text.encode(), tuple(order)


QUERIES: dict[str, str] = _load()
QUERIES["settle_and_claim"] = joined(QUERIES["settle"], QUERIES["claim"], ("settle", "claim"))
