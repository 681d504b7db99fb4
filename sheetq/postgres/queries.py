"""Named SQL queries, read from ``sheetq/postgres/queries/*.sql`` (the way procrastinate
keeps its queries): every statement the PostgreSQL engine runs has one name and lives in
one place, as text, never composed from pieces.

A file holds blocks, each opened by a line ``-- name: NAME`` and followed by ``--`` comment
lines (what the query does, its parameters) and the statement, up to the next ``-- name:``.
Parameters are psycopg's named placeholders (``%(queue)s``). ``QUERIES[NAME]`` is the
statement's text; a name defined twice, or a block without a statement, raises
``RuntimeError`` at import (a packaging error, never a user's).
"""

from __future__ import annotations

from importlib import resources

_MARK = "-- name:"


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


QUERIES: dict[str, str] = _load()
