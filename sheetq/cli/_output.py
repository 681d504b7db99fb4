"""Output: rich on a terminal, plain text when piped, ``--json`` alone on stdout.

Diagnostics always go to stderr.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import sys
from collections.abc import Iterator, Sequence
from typing import Any

from rich.console import Console

_C1 = re.compile("[\x7f-\x9f]")
_out: Console | None = None
_err: Console | None = None


def out() -> Console:
    global _out
    if _out is None:
        _out = Console(highlight=False, soft_wrap=True)
    return _out


def err() -> Console:
    global _err
    if _err is None:
        _err = Console(stderr=True, highlight=False, soft_wrap=True)
    return _err


def echo(text: str) -> None:
    """A plain line on stdout (no markup interpretation)."""
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def warn(text: str) -> None:
    """A diagnostic line on stderr."""
    sys.stderr.write(f"sheetq: {text}\n")
    sys.stderr.flush()


@contextlib.contextmanager
def stdout_kept_for_sheetq() -> Iterator[None]:
    """While handlers run: file descriptor 1 points at stderr, so whatever a handler's own
    program writes there (a Python handler's child process, ``os.write(1, …)``) lands on
    stderr, and sheetq's stdout keeps only sheetq's output (one ``--json`` document).
    ``sys.stdout`` writes to the original stdout through a duplicate descriptor meanwhile;
    both come back on exit. Nothing changes when ``sys.stdout`` is not descriptor 1
    (captured, as in tests)."""
    original = sys.stdout
    try:
        is_fd1 = original.fileno() == 1
    except (AttributeError, OSError, ValueError):  # io.UnsupportedOperation: captured
        is_fd1 = False
    if not is_fd1:
        yield
        return
    original.flush()
    saved = os.dup(1)
    try:
        os.dup2(2, 1)
        sys.stdout = open(  # noqa: SIM115 - closed below, after the handlers
            saved, "w", encoding=original.encoding, errors=original.errors, closefd=False
        )
        yield
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            if sys.stdout is not original:
                sys.stdout.close()
        sys.stdout = original
        os.dup2(saved, 1)
        os.close(saved)


def emit_json(doc: Any) -> None:
    """The one JSON document of a ``--json`` command."""
    text = json.dumps(doc, ensure_ascii=False, indent=None, default=str)
    # json escapes U+0000–U+001F itself; DEL and C1 too, so no terminal control reaches stdout
    text = _C1.sub(lambda m: f"\\u{ord(m.group()):04x}", text)
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def table(
    title: str,
    headers: Sequence[str],
    rows: Sequence[Sequence[Any]],
    *,
    justify_right: Sequence[int] = (),
) -> None:
    """A table: rich on a terminal, tab-free aligned text when piped."""
    from sheetq.redact import terminal_safe

    console = out()
    # Cells hold data (a handler's output, a manager's typing, a payload): control and bidi
    # characters are shown as escapes, never sent raw to the terminal.
    cells = [["" if v is None else terminal_safe(str(v)) for v in row] for row in rows]
    title = terminal_safe(title)
    if console.is_terminal:
        from rich.table import Table

        t = Table(title=title or None, title_justify="left", show_edge=False, pad_edge=False)
        for index, name in enumerate(headers):
            t.add_column(
                name, justify="right" if index in justify_right else "left", overflow="fold"
            )
        from rich.text import Text

        for row in cells:
            t.add_row(*(Text(c) for c in row))  # data, not rich markup
        console.print(t)
        return
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]
    if title:
        echo(title)
    echo("  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip())
    for row in cells:
        echo(
            "  ".join(
                (c.rjust(w) if i in justify_right else c.ljust(w))
                for i, (c, w) in enumerate(zip(row, widths, strict=True))
            ).rstrip()
        )
