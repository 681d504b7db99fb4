"""``sheetq alert``: send owed failure alerts now (DESIGN.md §9)."""

from __future__ import annotations

from typing import Annotated

import typer

from sheetq.errors import SheetqError


def alert(
    test: Annotated[bool, typer.Option("--test", help="Send a test message.")] = False,
) -> None:
    """Send owed failure alerts to Telegram now.

    Example:

      sheetq alert --test
    """
    raise SheetqError("alert: not built yet")
