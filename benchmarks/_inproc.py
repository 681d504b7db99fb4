"""Run the ``sheetq`` CLI inside this process (fresh command state each time)."""

from __future__ import annotations

import contextlib
import io
import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path


@dataclass
class Ran:
    code: int
    stdout: str
    stderr: str


@contextlib.contextmanager
def environment(values: Mapping[str, str], cwd: Path) -> Iterator[None]:
    """``values`` set in ``os.environ`` and ``cwd`` the working directory, then restored."""
    saved = dict(os.environ)
    here = Path.cwd()
    os.environ.update(values)
    os.chdir(cwd)
    try:
        yield
    finally:
        os.chdir(here)
        os.environ.clear()
        os.environ.update(saved)


def sheetq(args: Sequence[str], *, stdin: str = "") -> Ran:
    """``sheetq ARGS`` in this process, stdout and stderr captured."""
    import sys

    from sheetq.cli import _output
    from sheetq.cli import app as app_module

    app_module.state.__init__()  # type: ignore[misc]
    _output._out = None
    _output._err = None
    out, err = io.StringIO(), io.StringIO()
    old_stdin = sys.stdin
    sys.stdin = io.StringIO(stdin)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = app_module.main(list(args))
    finally:
        sys.stdin = old_stdin
    return Ran(code, out.getvalue(), err.getvalue())
