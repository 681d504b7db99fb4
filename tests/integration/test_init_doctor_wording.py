"""What `init` and `doctor` say is true of the backend at hand: `init` ends with the same line
on a first and a later run, naming every worksheet it prepares; `doctor`'s write check on a
local workbook speaks of the SQLite transaction, not of Google's named ranges."""

from __future__ import annotations

from typing import Any

import pytest

from tests.conftest import Book, make_google, run_cli

READY = "Queue, QueueLog, QueueArchive and QueueLogArchive are ready"


def test_init_ends_with_one_line_naming_every_worksheet(empty_book: Book) -> None:
    first = run_cli(["init"])
    second = run_cli(["init"])
    assert first.code == 0 and second.code == 0, first.stderr + second.stderr
    last = [r.stdout.strip().splitlines()[-1] for r in (first, second)]
    assert last[0] == last[1], last
    assert last[0].endswith(": " + READY), last[0]


def test_doctor_write_check_says_what_is_true_for_the_backend(
    book: Book,
) -> None:
    result = run_cli(["doctor"])
    line = next(x for x in result.stdout.splitlines() if "write access" in x)
    assert line.startswith("ok"), result.stdout
    if book.spreadsheet.startswith("local:"):
        assert "SQLite transaction" in line and "named range" not in line, line
    else:
        assert "named range" in line and "SQLite" not in line, line


@pytest.mark.google
def test_init_with_dashboard_names_it_too(
    sheets_emulator: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    make_google(sheets_emulator, monkeypatch)
    lines = [run_cli(["init", "--dashboard"]).stdout.strip().splitlines()[-1] for _ in range(2)]
    assert lines[0] == lines[1], lines
    assert lines[0].endswith(
        ": Queue, QueueLog, QueueArchive, QueueLogArchive and Dashboard are ready"
    )
