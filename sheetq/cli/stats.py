"""``sheetq stats``: numbers from QueueLog (DESIGN.md §8)."""

from __future__ import annotations

from typing import Annotated

import typer

from sheetq.errors import SheetqError


def stats(
    since: Annotated[str, typer.Option("--since", help="Window, e.g. 24h or 7d.")] = "24h",
    types: Annotated[list[str] | None, typer.Option("--type", "-t", help="Only this type.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON document.")] = False,
) -> None:
    """Throughput and failure numbers from QueueLog.

    Example:

      sheetq stats --since 7d
    """
    raise SheetqError("stats: not built yet")
