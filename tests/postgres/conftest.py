"""Fixtures of the PostgreSQL tests that run `sheetq` as real processes."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO

import pytest


@pytest.fixture
def sheetq_proc(tmp_path: Path) -> Iterator[Callable[..., subprocess.Popen[str]]]:
    """``start(*args, log=None)``: `sheetq ARGS` in a subprocess, stdout piped; stderr piped,
    or written to ``tmp_path / log`` (a busy ``-v`` worker would fill a pipe). Every process
    still running at teardown is killed."""
    procs: list[subprocess.Popen[str]] = []

    def start(*args: str, log: str | None = None) -> subprocess.Popen[str]:
        err: int | IO[str] = subprocess.PIPE if log is None else (tmp_path / log).open("w")
        try:
            proc = subprocess.Popen(
                [sys.executable, "-m", "sheetq", *args],
                stdout=subprocess.PIPE,
                stderr=err,
                text=True,
                env=dict(os.environ),
            )
        finally:
            if not isinstance(err, int):
                err.close()
        procs.append(proc)
        return proc

    yield start
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


@pytest.fixture
def handler_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[[str, str], Path]:
    """``install(module, source)``: a Python handler module written into the working
    directory (``python = "module:run"``), and ``STARTS`` set to the file that its tasks note
    their starts in; returns that file's path."""

    def install(module: str, source: str) -> Path:
        path = tmp_path / "starts.txt"
        monkeypatch.setenv("STARTS", str(path))
        Path(f"{module}.py").write_text(source, encoding="utf-8")
        return path

    return install
