"""``sheetq archive``: move finished rows to QueueArchive (DESIGN.md §8)."""

from __future__ import annotations

from typing import Annotated

import typer

from sheetq.errors import SheetqError


def archive(
    older_than: Annotated[
        str, typer.Option("--older-than", help="Finished before this long ago (e.g. 30d).")
    ] = "30d",
    include_failed: Annotated[
        bool, typer.Option("--include-failed", help="Also move failed rows.")
    ] = False,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Count; change nothing.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON document.")] = False,
) -> None:
    """Move finished rows to QueueArchive in one atomic change; their keys still deduplicate.

    Example:

      sheetq archive --older-than 30d
    """
    raise SheetqError("archive: not built yet")
