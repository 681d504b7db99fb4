"""`sheetq doctor` checks the Connectors worksheet on a sheet (docs/design.md §13) when
the configuration has a [connectors.NAME] table: it exists with its columns, and each
typed `state` is one sheetq knows."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import Book, Result, handler_script, run_cli, write_config
from tests.sheet_only import sheet_only

ON_POSTGRES = True  # the behavioural suite: also runs on PostgreSQL

OK = "import sys\nsys.stdin.read()\nprint('ok')\n"


def _config(tmp_path: Path, *, connectors: bool = True) -> None:
    table = '[connectors.crm]\nrate_limit = "30/min"\n' if connectors else ""
    handler = handler_script(tmp_path, "ok", OK)
    link = 'connector = "crm"\n' if connectors else ""
    write_config(f"{table}[types.lead]\ncommand = {handler}\n{link}")


def _problems(result: Result) -> list[str]:
    return [line for line in result.stdout.splitlines() if line.startswith("problem")]


def _crm_row(book: Book) -> int:
    return 2 + [r["name"] for r in book.records("Connectors")].index("crm")


def test_doctor_checks_the_connectors_worksheet_and_its_columns(book: Book, tmp_path: Path) -> None:
    """After `init` the Connectors worksheet is ok; a header a person cleared is named
    (fix: `sheetq init`), and `init` puts it back; a workbook made before the connector
    was configured lacks the worksheet: named, fix `sheetq init`."""
    sheet_only(book, "the Connectors worksheet; PostgreSQL keeps connectors in a table")
    _config(tmp_path)
    assert run_cli(["init", "--no-format"]).code == 0
    r = run_cli(["doctor"])
    assert r.code == 0, r.stdout
    assert any("worksheet Connectors" in line for line in r.stdout.splitlines()), r.stdout
    book.set_cell("Connectors", 1, "alerted", "")
    r = run_cli(["doctor"])
    assert r.code == 1
    (line,) = _problems(r)
    assert "'Connectors' lacks column(s) alerted" in line and "sheetq init" in line
    assert run_cli(["init", "--no-format"]).code == 0
    assert run_cli(["doctor"]).code == 0


def test_doctor_names_a_connectors_worksheet_that_does_not_exist(
    book: Book, tmp_path: Path
) -> None:
    """Initialised without connectors, then a [connectors.crm] table added: doctor says the
    worksheet does not exist and to run `sheetq init`."""
    sheet_only(book, "the Connectors worksheet; PostgreSQL keeps connectors in a table")
    _config(tmp_path, connectors=False)
    assert run_cli(["init", "--no-format"]).code == 0
    assert run_cli(["doctor"]).code == 0
    _config(tmp_path)
    r = run_cli(["doctor"])
    assert r.code == 1
    (line,) = _problems(r)
    assert "'Connectors' does not exist" in line and "sheetq init" in line


def test_doctor_names_a_typed_state_sheetq_does_not_know(book: Book, tmp_path: Path) -> None:
    """A manager typed `opne` into crm's state: doctor names the row, the connector and
    what it may be; `paused` is fine."""
    sheet_only(book, "a person typing into the Connectors worksheet")
    _config(tmp_path)
    assert run_cli(["init", "--no-format"]).code == 0
    row = _crm_row(book)
    book.set_cell("Connectors", row, "state", "opne")
    r = run_cli(["doctor"])
    assert r.code == 1
    (line,) = _problems(r)
    assert f"'Connectors' row {row} (crm): state 'opne' is not one sheetq knows" in line
    assert "closed" in line and "paused" in line
    book.set_cell("Connectors", row, "state", "paused")
    assert run_cli(["doctor"]).code == 0
