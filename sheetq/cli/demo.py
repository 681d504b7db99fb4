"""``sheetq demo``: a self-contained tour on a local workbook."""

from __future__ import annotations

from typing import Annotated

import typer

from sheetq.errors import SheetqError


def demo(
    directory: Annotated[str | None, typer.Option("--dir", help="Keep the demo workbook in this "
                                                  "directory (default: a temporary one).")] = None,
) -> None:
    """Enqueue sample tasks (with a duplicate and a conflict), process them with demo handlers
    (one succeeds, one is retried then succeeds, one fails), and show the status and the alert.

    Example:

      sheetq demo
    """
    raise SheetqError("demo: not built yet")
