"""Whether a path can be a local workbook: one answer for `init`, every other command and
`doctor` (docs/design.md §1).

Each refusal is ``(what is wrong, what to do)``; the store joins them with "; " into its
``SchemaError`` (exit 2), ``doctor`` prints them as its problem and fix. Nothing here
changes a file: another program's SQLite file is only ever read.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

Refusal = tuple[str, str]
WORKBOOK_TABLES = frozenset({"workbook", "worksheets", "leases"})
_NOT_OURS = "sheetq never changes it: choose another path"


def path_refusal(path: Path, *, create: bool) -> Refusal | None:
    """Before opening ``path``: a folder, a device or pipe, a file in a folder that does not
    exist (never created: a typo must not make folders), or, unless ``create``, no file yet."""
    if path.is_dir():
        return f"{path}: a folder, not a file", f"name a file in it (local:{path}/sheetq.db)"
    if path.exists() and not path.is_file():
        return (
            f"{path}: not a regular file (a device, pipe or socket)",
            "name a file for the workbook, such as local:./sheetq.db",
        )
    folder = path.parent
    if not folder.is_dir():
        why = "not a folder" if folder.exists() else "no such folder"
        return f"{path}: {why} {folder}", "create the folder first, or choose another path"
    if not create and not path.exists():
        return f"{path}: no such local workbook", "run `sheetq init` to create it"
    return None


def content_refusal(path: Path, tables: set[str] | None, *, create: bool) -> Refusal | None:
    """After reading its table names (``None``: not an SQLite file): another program's
    database, or, unless ``create``, an empty one `init` would fill."""
    if tables is None:
        return f"{path}: not a sheetq workbook (not an SQLite database)", _NOT_OURS
    if WORKBOOK_TABLES.issubset(tables):
        return None
    if tables:
        return f"{path}: not a sheetq workbook (it holds another program's tables)", _NOT_OURS
    if create:
        return None
    return f"{path}: not a sheetq workbook (an empty SQLite file)", "run `sheetq init` to fill it"


def table_names(db: sqlite3.Connection) -> set[str] | None:
    """The tables of the open database ``db``; ``None`` when the file is not SQLite."""
    try:
        return {r[0] for r in db.execute("SELECT name FROM sqlite_master")}
    except sqlite3.DatabaseError as exc:
        if getattr(exc, "sqlite_errorcode", None) == sqlite3.SQLITE_NOTADB:
            return None
        raise


def refusal(path: Path) -> Refusal | None:
    """Everything a command other than `init` would refuse about ``path``, read-only (the
    fix is ``""`` when there is none to give)."""
    refused = path_refusal(path, create=False)
    if refused is not None:
        return refused
    try:
        db = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
        try:
            tables = table_names(db)
        finally:
            db.close()
    except sqlite3.DatabaseError as exc:  # as the store words it (unreadable, corrupt)
        return f"{path}: not a sheetq workbook ({exc})", ""
    return content_refusal(path, tables, create=False)
