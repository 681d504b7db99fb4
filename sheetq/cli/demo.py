"""``sheetq demo``: a self-contained tour on a local workbook."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer


def demo(
    directory: Annotated[
        str | None,
        typer.Option(
            "--dir",
            help="Keep the demo workbook in this directory to look around afterwards "
            "(default: a temporary directory, removed at the end).",
        ),
    ] = None,
) -> None:
    """Enqueue sample tasks (with a duplicate and a conflict), process them with demo handlers
    (one succeeds, one is retried then succeeds, one fails), and show the status and the alert.
    Needs no network and no configuration.

    Example:

      sheetq demo

      sheetq demo --dir ./sheetq-demo
    """
    import tempfile

    from sheetq.cli._output import echo, table
    from sheetq.demo import MARKER, run_demo
    from sheetq.errors import UsageError

    if directory is None:  # a throwaway workbook: removed at the end, even after an error
        with tempfile.TemporaryDirectory(prefix="sheetq-demo-") as temp:
            run_demo(
                Path(temp).resolve(),
                echo,
                lambda title, headers, rows: table(title, headers, rows),
                keep=False,
            )
        echo(f"(ran in {temp}, now removed; `sheetq demo --dir DIR` keeps the workbook)")
        return
    target = Path(directory)
    if target.exists() and not target.is_dir():
        raise UsageError(f"--dir {directory}: not a directory")
    if target.is_dir() and any(target.iterdir()) and not (target / MARKER).exists():
        raise UsageError(
            f"--dir {directory}: not empty and not an earlier demo; the demo writes "
            "demo.db and sheetq.toml there, so give it a new or empty directory"
        )
    run_demo(target.resolve(), echo, lambda title, headers, rows: table(title, headers, rows))
