"""Cells and ranges of the Google adapter: A1 titles, grid data in and out, the echo of a
write (``includeSpreadsheetInResponse`` + ``responseRanges``) and what a write sent
(``_Written``), and the comparisons the verify-and-repair step of ``apply`` makes.
Pure functions and values: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sheetq.sheet.store import (
    CellValue,
    Formula,
    Read,
    Row,
    Snapshot,
    UpdateRow,
    cell_text,
)


def quote_title(title: str) -> str:
    """A title as an A1 prefix: always quoted, quotes doubled (``Jon's`` → ``'Jon''s'``)."""
    return "'" + title.replace("'", "''") + "'"


@dataclass
class _Sheet:
    title: str
    sheet_id: int
    header: tuple[str, ...]
    columns: dict[str, int]


def _columns(header: Sequence[str]) -> dict[str, int]:
    out: dict[str, int] = {}
    for index, name in enumerate(header):
        if name:
            out.setdefault(name, index)
    return out


def _grid_header(sheet: Mapping[str, Any]) -> list[str]:
    """The header row of a sheet fetched with grid data (``spreadsheets.get``), trimmed: the
    block that starts at A1 (other blocks are columns read with it, see ``open_with``).
    A cell's ``formattedValue`` when the field mask asked for it, else its value as text."""
    header: list[str] = []
    for block in sheet.get("data", []) or []:
        if int(block.get("startRow", 0) or 0) or int(block.get("startColumn", 0) or 0):
            continue
        for row in (block.get("rowData") or [])[:1]:
            header = [
                str(v["formattedValue"]).strip()
                if "formattedValue" in v
                else cell_text(_echo_value(v)).strip()
                for v in row.get("values", [])
            ]
        break
    while header and not header[-1]:
        header.pop()
    return header


def _layout_guess(read: Read, layout: Sequence[str] | None) -> dict[str, int] | None:
    """Where ``read``'s columns would be in ``layout`` (name → 0-based column), or ``None``
    when it cannot be guessed: no layout, a column not in it, or not a whole-column read."""
    if layout is None or read.columns is None or read.rows is not None:
        return None
    where = {name: index for index, name in reversed(list(enumerate(layout)))}
    if any(name not in where for name in read.columns):
        return None
    return {name: where[name] for name in read.columns}


def _grid_cells(sheet: Mapping[str, Any]) -> dict[int, dict[int, CellValue]]:
    """Every data block of a sheet fetched with grid data, merged: 1-based row → 0-based
    column → value, converted as the values API's UNFORMATTED_VALUE would (``_echo_value``);
    empty cells are left out."""
    out: dict[int, dict[int, CellValue]] = {}
    for block in sheet.get("data") or []:
        start = int(block.get("startRow", 0) or 0)
        left = int(block.get("startColumn", 0) or 0)
        for number, row in enumerate(block.get("rowData") or [], start + 1):
            cells: dict[int, CellValue] = {}
            for index, cell in enumerate(row.get("values") or (), left):
                # the common cell, {"effectiveValue": {"stringValue": …}}, without a call
                found = cell.get("effectiveValue") if cell else None
                if type(found) is dict and len(found) == 1 and "stringValue" in found:
                    cells[index] = found["stringValue"]
                    continue
                value = _echo_value(cell or {})
                if value is not None:
                    cells[index] = value
            if cells:
                if number in out:
                    out[number].update(cells)
                else:
                    out[number] = cells
    return out


def _cell_data(value: CellValue) -> dict[str, Any]:
    """A value as ``CellData``: text is ``stringValue`` (never parsed), numbers ``numberValue``."""
    if value is None or value == "":
        return {}
    if isinstance(value, Formula):
        return {"userEnteredValue": {"formulaValue": str(value)}}
    if isinstance(value, bool):
        return {"userEnteredValue": {"boolValue": value}}
    if isinstance(value, int | float):
        return {"userEnteredValue": {"numberValue": value}}
    return {"userEnteredValue": {"stringValue": str(value)}}


def _runs(indexes: Iterable[int]) -> list[tuple[int, int]]:
    """Sorted indexes → inclusive runs of consecutive numbers."""
    runs: list[tuple[int, int]] = []
    for index in sorted(set(indexes)):
        if runs and runs[-1][1] == index - 1:
            runs[-1] = (runs[-1][0], index)
        else:
            runs.append((index, index))
    return runs


def _grid(sheet_id: int, row_lo: int, row_hi: int, col: int, width: int = 1) -> dict[str, int]:
    """A ``GridRange``: rows ``row_lo`` to ``row_hi`` (0-based, half-open), ``width``
    columns from ``col``."""
    return {
        "sheetId": sheet_id,
        "startRowIndex": row_lo,
        "endRowIndex": row_hi,
        "startColumnIndex": col,
        "endColumnIndex": col + width,
    }


def _column_spans(source: Mapping[str, int], dest: Mapping[str, int]) -> list[tuple[int, int, int]]:
    """(source column, destination column, width) for runs of named columns that sit side
    by side in both worksheets; one span when both have the same column order."""
    pairs = sorted((col, dest[name]) for name, col in source.items() if name in dest)
    spans: list[tuple[int, int, int]] = []
    for src, dst in pairs:
        if spans and spans[-1][0] + spans[-1][2] == src and spans[-1][1] + spans[-1][2] == dst:
            spans[-1] = (spans[-1][0], spans[-1][1], spans[-1][2] + 1)
        else:
            spans.append((src, dst, 1))
    return spans


def _delete_rows(sheet_id: int, lo: int, hi: int) -> dict[str, Any]:
    """``deleteDimension`` of the 1-based rows ``lo``..``hi``."""
    return {
        "deleteDimension": {
            "range": {
                "sheetId": sheet_id,
                "dimension": "ROWS",
                "startIndex": lo - 1,
                "endIndex": hi,
            }
        }
    }


def _positions(snap: Snapshot, column: str) -> dict[str, int]:
    """Key → its first row in a whole-worksheet read."""
    out: dict[str, int] = {}
    for row in snap.rows:
        key = row.text(column).strip()
        if key and key not in out:
            out[key] = row.number
    return out


def _same(a: CellValue, b: CellValue) -> bool:
    return cell_text(a) == cell_text(b)


def _holds(row: Row, values: Mapping[str, CellValue]) -> bool:
    """Whether ``row`` holds every one of ``values`` (compared as cell text)."""
    return all(_same(row.values.get(name), value) for name, value in values.items())


# What a write echoes back (``includeSpreadsheetInResponse`` + ``responseRanges``): titles and
# the cells of the ranges asked for, nothing else.
_ECHO_FIELDS = (
    "updatedSpreadsheet(sheets(properties(title),"
    "data(startRow,startColumn,rowData(values(userEnteredValue,effectiveValue)))))"
)


def _echo_value(cell: Mapping[str, Any]) -> CellValue:
    """A ``CellData`` as the values API's UNFORMATTED_VALUE would give it."""
    for field_name in ("effectiveValue", "userEnteredValue"):
        value = cell.get(field_name)
        if isinstance(value, dict) and value:
            kind, payload = next(iter(value.items()))
            if kind == "errorValue":
                return "#ERROR!"
            if kind == "formulaValue" and field_name == "userEnteredValue":
                continue
            return payload  # type: ignore[no-any-return]
    return None


def _echo(spreadsheet: Any) -> dict[str, dict[int, list[CellValue]]] | None:
    """The echoed rows: worksheet → 1-based row → cells by column index (``None``: the
    endpoint sent no echo)."""
    if not isinstance(spreadsheet, dict) or "sheets" not in spreadsheet:
        return None
    out: dict[str, dict[int, list[CellValue]]] = {}
    for sheet in spreadsheet.get("sheets") or []:
        title = str((sheet.get("properties") or {}).get("title", ""))
        rows = out.setdefault(title, {})
        for block in sheet.get("data") or []:
            start = int(block.get("startRow", 0) or 0)
            left = int(block.get("startColumn", 0) or 0)
            for offset, row in enumerate(block.get("rowData") or []):
                cells = [_echo_value(c or {}) for c in (row.get("values") or [])]
                rows[start + offset + 1] = [None] * left + cells
    return out


@dataclass
class _Written:
    """One write as sent: the headers it assumed, the cells it wrote by position (worksheet
    → row → {column: value}) and the key meant at each row, its appends, and the echo."""

    headers: dict[str, tuple[str, ...]]
    cells: dict[str, dict[int, Mapping[str, CellValue]]] = field(default_factory=dict)
    targets: dict[str, dict[int, str]] = field(default_factory=dict)
    key_columns: dict[str, str] = field(default_factory=dict)
    appends: dict[str, list[Mapping[str, CellValue]]] = field(default_factory=dict)
    moved: set[str] = field(default_factory=set)  # worksheets of moves (archive)
    echo: dict[str, dict[int, list[CellValue]]] | None = None

    def echo_headers(self) -> dict[str, tuple[str, ...]]:
        out: dict[str, tuple[str, ...]] = {}
        for title, rows in (self.echo or {}).items():
            header = [cell_text(v).strip() for v in rows.get(1, [])]
            while header and not header[-1]:
                header.pop()
            out[title] = tuple(header)
        return out

    def headers_moved(self, now: Mapping[str, tuple[str, ...]] | None = None) -> bool:
        """Whether a worksheet this write touched has another header now (``now``, else the
        echo's): a person moved or inserted a column."""
        now = self.echo_headers() if now is None else now
        return any(
            title in now and now[title] != self.headers.get(title)
            for title in {*self.cells, *self.appends, *self.moved}
        )

    def verified_by_echo(self) -> bool:
        """Headers unchanged and every written row holding its key and values, as echoed."""
        if self.echo is None or self.headers_moved():
            return False
        for title, rows in self.cells.items():
            columns = _columns(self.headers.get(title, ()))
            echoed = self.echo.get(title, {})
            key_column = self.key_columns.get(title, "task_id")
            for number, values in rows.items():
                cells = echoed.get(number, [])

                key = self.targets.get(title, {}).get(number)
                if key is not None and cell_text(_at(cells, columns, key_column)).strip() != key:
                    return False
                if not all(_same(_at(cells, columns, n), v) for n, v in values.items()):
                    return False
        return True


def _blank(value: CellValue) -> CellValue:
    return "" if value is None else value


def _keyless_preimage(
    snap: Snapshot, column: str, names: Sequence[str]
) -> dict[str, CellValue] | None:
    """What the rows without a key held in ``names`` before the write, if they all held the
    same (a manager's note rows: nothing); ``None`` if they differ (then a row without a
    key that a write reached cannot be told apart, and is reported instead)."""
    seen = {
        tuple(cell_text(r.values.get(n)) for n in names)
        for r in snap.rows
        if not r.text(column).strip()
    }
    if len(seen) > 1:
        return None
    only = next(iter(seen), tuple("" for _ in names))
    return dict(zip(names, only, strict=True))


def _at(cells: Sequence[CellValue], columns: Mapping[str, int], name: str) -> CellValue:
    index = columns.get(name)
    return cells[index] if index is not None and index < len(cells) else None


def _index_rows(
    full: dict[str, dict[str, Row]], snap: Snapshot, keyed: Sequence[UpdateRow]
) -> None:
    """Whole rows read by position, filed by the key they hold (when an update means it)."""
    wanted = {(u.worksheet, u.key_column, str(u.key)) for u in keyed}
    columns = {u.key_column for u in keyed if u.worksheet == snap.worksheet}
    for row in snap.rows:
        for column in columns:
            key = row.text(column).strip()
            if (snap.worksheet, column, key) in wanted:
                full.setdefault(snap.worksheet, {})[key] = row
