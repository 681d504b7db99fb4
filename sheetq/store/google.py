"""The Google Sheets adapter of the storage port, on gspread's HTTP client and google-auth.

Request shapes (``shared/reference/google-sheets-api.md``):

* ``open`` — one ``spreadsheets.get`` with ``includeGridData`` limited by ``ranges`` to
  the header rows of the queue's worksheets, and a ``fields`` mask: metadata, headers,
  named ranges (the run lease) and the time zone in one request. ``open_with`` (enqueue)
  adds the key columns at ``init``'s positions to the same request, checked against the
  header in its answer.
* ``read`` — one ``values:batchGet`` of only the columns (or rows) asked for, plus each
  worksheet's header row so a column a person moved is noticed;
  ``UNFORMATTED_VALUE`` + ``SERIAL_NUMBER``, so typed dates arrive as serials.
* ``apply`` — one ``spreadsheets:batchUpdate``, atomic: the lease compare-and-set
  (``addNamedRange``/``deleteNamedRange``), ``updateCells`` (``stringValue``: data,
  never parsed — the batchUpdate equivalent of RAW), ``deleteDimension``, and
  ``appendCells`` (no table detection). Rows are re-located by ``task_id`` with one
  ``values:batchGet`` right before writing, so a person sorting mid-run never gets a
  result written into the wrong task.

Transport retries (stamina): 429, 5xx and connection failures, truncated exponential
backoff with jitter, ``Retry-After`` honoured, bounded by attempts and total time. An
optional ``time_limit`` (``enqueue``'s ``SHEETQ_ENQUEUE_TIMEOUT``) bounds everything the
adapter does from its creation on: retries, their waits and the HTTP timeouts. A
write whose reply was lost has an unknown outcome: before sending it again the adapter
reads back whether it was applied (its lease token, task ids or log rows are
recognisable), so a retried write never duplicates a row.
"""

from __future__ import annotations

import random
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sheetq.errors import (
    LeaseConflict,
    SchemaError,
    StoreError,
    StoreUnavailable,
    UsageError,
)
from sheetq.store.base import (
    ApplyResult,
    BlockMoved,
    CellValue,
    ChangeSet,
    DeleteRow,
    Formula,
    MoveRow,
    Read,
    Row,
    SheetInfo,
    Snapshot,
    UpdateRow,
    WorkbookInfo,
    cell_text,
    column_letter,
    row_identity,
)
from sheetq.store.google_auth import GOOGLE_API, credentials_for, session_for, spreadsheet_key

if TYPE_CHECKING:
    from sheetq.config import Settings

RETRY_ATTEMPTS = 8
RETRY_BUDGET = 120.0  # seconds, all attempts of one request together
_OPEN_FIELDS = (
    "spreadsheetId,spreadsheetUrl,properties(title,locale,timeZone),"
    "namedRanges(namedRangeId,name),"
    "sheets(properties(sheetId,title,index,gridProperties(rowCount,columnCount,frozenRowCount)),"
    "data(startRow,startColumn,rowData(values(formattedValue))))"
)
# ``open_with``: the same, with cell values (UNFORMATTED, as the values API) instead of their
# formatted text: the header rows and the key columns come back in one answer.
_OPEN_WITH_FIELDS = _OPEN_FIELDS.replace("values(formattedValue)", "values(effectiveValue)")
_VALUE_PARAMS = {
    "majorDimension": "COLUMNS",
    "valueRenderOption": "UNFORMATTED_VALUE",
    "dateTimeRenderOption": "SERIAL_NUMBER",
}


class SpreadsheetNotFound(UsageError):
    """No spreadsheet with that key: check SHEETQ_SPREADSHEET."""


class AccessDenied(StoreError):
    """The spreadsheet is not shared with sheetq's account (or only for reading).
    ``status`` is Google's HTTP status: 401 (credentials refused) or 403 (not shared)."""

    def __init__(self, message: str, status: int = 403) -> None:
        super().__init__(message)
        self.status = status


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
        for offset, row in enumerate(block.get("rowData") or []):
            for index, cell in enumerate(row.get("values") or []):
                value = _echo_value(cell or {})
                if value is not None:
                    out.setdefault(start + offset + 1, {})[left + index] = value
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


REPAIR_ROUNDS = 3  # verify-and-repair rounds of one write before giving up


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


class GoogleStore:
    """A Google spreadsheet as sheetq's store (see the module docstring)."""

    def __init__(
        self,
        key: str,
        http: Any,
        *,
        titles: Sequence[str] = (),
        account: str = "",
        sleep: Callable[[float], None] | None = None,
        time_limit: float | None = None,
        time_limit_name: str = "its time limit",
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        """``time_limit``: seconds from now after which no request is sent or retried (a
        ``StoreUnavailable`` naming ``time_limit_name`` instead); ``None``: only the
        per-request retry budget (``RETRY_ATTEMPTS``, ``RETRY_BUDGET``) applies."""
        self.key = key
        self._http = http  # gspread.http_client.HTTPClient
        self._titles = tuple(titles)
        self._account = account
        self._sheets: dict[str, _Sheet] = {}
        self._url = f"https://docs.google.com/spreadsheets/d/{key}/edit"
        self._requests = 0
        self._rng = random.Random()
        self._sleep = sleep
        self._move_plan: list[tuple[str, int, int]] = []  # (worksheet, first row, last row)
        self._tails: dict[str, int] = {}  # worksheet → its last row in the last whole read
        self._monotonic = monotonic
        self._deadline = None if time_limit is None else monotonic() + time_limit
        self._limit = (time_limit or 0.0, time_limit_name)

    @classmethod
    def from_settings(
        cls, settings: Settings, *, time_limit: float | None = None, time_limit_name: str = ""
    ) -> GoogleStore:
        """Build the adapter from ``SHEETQ_SPREADSHEET`` and the credential settings;
        ``time_limit`` as in the constructor."""
        import gspread

        key = spreadsheet_key(settings.spreadsheet)
        credentials = credentials_for(settings)
        session = session_for(settings.sheets_api_url, credentials)
        # auth=None: the session carries the credentials (gspread's documented escape hatch)
        client = gspread.Client(auth=None, session=session)  # type: ignore[arg-type]
        client.set_timeout((10, 90))
        account = str(getattr(credentials, "service_account_email", "") or "")
        return cls(
            key,
            client.http_client,
            titles=(settings.queue_sheet, settings.log_sheet, settings.archive_sheet),
            account=account,
            time_limit=time_limit,
            time_limit_name=time_limit_name or "its time limit",
        )

    # --- plumbing ---------------------------------------------------------------

    @property
    def requests_made(self) -> int:
        return self._requests

    def close(self) -> None:
        session = getattr(self._http, "session", None)
        if session is not None:
            session.close()

    def _url_for(self, suffix: str = "") -> str:
        return f"{GOOGLE_API}/v4/spreadsheets/{self.key}{suffix}"

    def _retry_hook(self, exc: Exception) -> bool | float:
        """Retry 429, 5xx and connection failures; honour Retry-After (seconds)."""
        from gspread.exceptions import APIError
        from requests import exceptions as rq

        if isinstance(exc, APIError):
            code = exc.response.status_code
            if code == 429 or code >= 500:
                after = exc.response.headers.get("Retry-After", "")
                try:
                    return max(0.0, min(float(after), RETRY_BUDGET / 2)) if after else True
                except ValueError:
                    return True
            return False
        return isinstance(exc, rq.ConnectionError | rq.Timeout | rq.ChunkedEncodingError)

    def _call(
        self, what: str, send: Callable[[], Any], applied: Callable[[], bool] | None = None
    ) -> Any:
        """Send one request with transport retries. ``applied`` answers, after a lost reply
        to a write, whether the write happened anyway (then it is not sent again)."""
        import stamina
        from gspread.exceptions import APIError

        uncertain = False
        late: list[str] = []  # set when the time limit ends the retries: the last failure
        tries = [0]
        try:
            for attempt in stamina.retry_context(
                on=lambda exc: self._retry_in_time(exc, tries[0], late),
                attempts=RETRY_ATTEMPTS,
                timeout=self._budget(what, late),
                wait_initial=1.0,
                wait_max=32.0,
                wait_jitter=1.0,
            ):
                with attempt:
                    tries[0] += 1
                    self._budget(what, late)
                    if uncertain and applied is not None and applied():
                        return None
                    try:
                        self._requests += 1
                        self._limit_http_timeouts()
                        return send()
                    except APIError as exc:
                        uncertain = uncertain or exc.response.status_code >= 500
                        raise
                    except Exception:
                        uncertain = True
                        raise
        except APIError as exc:
            if self._retry_hook(exc) and self._out_of_time(late):
                raise self._too_late(what, late[0] if late else self._cause(exc)) from None
            raise self._api_error(what, exc) from None
        except Exception as exc:
            if self._retry_hook(exc) and self._out_of_time(late):
                raise self._too_late(what, late[0] if late else self._cause(exc)) from None
            if self._retry_hook(exc):
                raise StoreUnavailable(
                    f"Google Sheets did not answer {what} after {RETRY_ATTEMPTS} attempts or "
                    f"{RETRY_BUDGET:.0f}s: {type(exc).__name__}: {exc}"
                ) from None
            raise
        return None  # pragma: no cover - stamina either returns or raises

    # --- the time limit (enqueue) -------------------------------------------------------

    def _left(self) -> float | None:
        """Seconds left before the time limit; ``None`` without one."""
        return None if self._deadline is None else self._deadline - self._monotonic()

    def _out_of_time(self, late: list[str]) -> bool:
        """Did the time limit, rather than the attempts, end the retries?"""
        left = self._left()
        return bool(late) or (left is not None and left <= 0.05)

    def _budget(self, what: str, late: list[str]) -> float:
        """Stamina's total-time bound for one request; raises once the time limit is over."""
        left = self._left()
        if left is None:
            return RETRY_BUDGET
        if left <= 0:
            raise self._too_late(what, late[0] if late else "no answer yet")
        return min(RETRY_BUDGET, left)

    def _retry_in_time(self, exc: Exception, attempt: int, late: list[str]) -> bool | float:
        """``_retry_hook``, and under a time limit only if the wait before the next attempt
        ends before it (the wait is then chosen here, as stamina would: 1 s doubling to 32 s,
        plus up to 1 s of jitter, or Retry-After)."""
        decision = self._retry_hook(exc)
        left = self._left()
        if decision is False or left is None:
            return decision
        if decision is True:
            decision = min(32.0, 2.0 ** (attempt - 1)) + self._rng.uniform(0.0, 1.0)
        if float(decision) >= left:
            late.append(self._cause(exc))
            return False
        return float(decision)

    def _limit_http_timeouts(self) -> None:
        """The HTTP connect and read timeouts, never beyond the time limit."""
        left = self._left()
        if left is not None:
            self._http.timeout = (min(10.0, max(left, 0.01)), min(90.0, max(left, 0.01)))

    def _too_late(self, what: str, cause: str) -> StoreUnavailable:
        seconds, name = self._limit
        return StoreUnavailable(
            f"Google Sheets did not complete {what} within {name} ({seconds:g}s); last: {cause}"
        )

    @staticmethod
    def _cause(exc: Exception) -> str:
        response = getattr(exc, "response", None)
        code = getattr(response, "status_code", None)
        if code is not None and hasattr(exc, "error"):
            message = str(getattr(exc, "error", {}).get("message", ""))
            return f"{code} {message}".strip()
        return type(exc).__name__

    def _api_error(self, what: str, exc: Any) -> Exception:
        code = exc.response.status_code
        message = str(getattr(exc, "error", {}).get("message", "")) or str(exc)
        if code == 429 or code >= 500:
            return StoreUnavailable(
                f"Google Sheets kept answering {code} to {what} after "
                f"{RETRY_ATTEMPTS} attempts: {message}"
            )
        if code == 404:
            return SpreadsheetNotFound(
                f"spreadsheet {self.key!r} not found (404): check SHEETQ_SPREADSHEET — the key "
                "is the long id in the sheet's URL"
            )
        if code in (401, 403):
            who = f" ({self._account})" if self._account else ""
            verb = "read" if what.startswith(("open", "read")) else "write to"
            return AccessDenied(
                f"Google refused to let sheetq {verb} the spreadsheet ({code}: {message}); share "
                f"it as Editor with the service account{who}",
                status=code,
            )
        if "Unable to parse range" in message:
            return SchemaError(f"{message}: a worksheet is missing; run `sheetq init`")
        return StoreError(f"Google Sheets refused {what} ({code}): {message}")

    def _metadata(self, params: Mapping[str, Any]) -> dict[str, Any]:
        """One ``spreadsheets.get`` with ``params`` (a field mask, ranges…), with retries."""
        body = self._call(
            "open", lambda: self._http.request("get", self._url_for(), params=dict(params)).json()
        )
        return dict(body or {})

    def _batch_get(self, ranges: list[str], what: str) -> list[dict[str, Any]]:
        body = self._call(
            what,
            lambda: self._http.values_batch_get(self.key, list(ranges), params=dict(_VALUE_PARAMS)),
        )
        return list(body.get("valueRanges", []))

    # --- open -----------------------------------------------------------------

    def open(self) -> WorkbookInfo:
        """Metadata, header rows and named ranges in one ``spreadsheets.get``."""

        titles = list(self._titles)
        params: dict[str, Any] = {
            "includeGridData": "true",
            "fields": _OPEN_FIELDS,
            "ranges": [f"{quote_title(t)}!1:1" for t in titles],
        }
        try:
            meta: dict[str, Any] | None = self._metadata(params)
        except SchemaError:
            meta = None
        if meta is None:  # a worksheet is missing: ask without it (not yet initialised)
            known = self._metadata({"fields": "sheets(properties(title))"})
            present = {s["properties"]["title"] for s in known.get("sheets", [])}
            params["ranges"] = [f"{quote_title(t)}!1:1" for t in titles if t in present]
            meta = self._metadata(params)
        return self._info(meta)

    def open_with(
        self, reads: Sequence[Read], *, layout: Mapping[str, Sequence[str]] | None = None
    ) -> tuple[WorkbookInfo, list[Snapshot]]:
        """``open()`` and whole-column ``read(reads)`` in one ``spreadsheets.get`` when the
        columns are where ``layout`` puts them (see ``Store.open_with``).

        The request is ``open()``'s (header rows, named ranges, time zone, sheet ids, row
        counts) plus one range per run of guessed columns (``'Queue'!I2:I``…), with
        ``effectiveValue`` in the field mask. The header in the same answer tells whether
        the guess held; reads it did not hold for (a person moved a column, an adopted
        layout) are read again by name with ``read`` (one ``values:batchGet``), so the
        answer is always right and costs 1 request, or 2.
        """
        layout = layout or {}
        titles = list(dict.fromkeys([*self._titles, *(r.worksheet for r in reads)]))
        guesses = [_layout_guess(r, layout.get(r.worksheet)) for r in reads]
        ranges = [f"{quote_title(t)}!1:1" for t in titles]
        for read, guess in zip(reads, guesses, strict=True):
            for lo, hi in _runs((guess or {}).values()):
                ranges.append(
                    f"{quote_title(read.worksheet)}!{column_letter(lo)}2:{column_letter(hi)}"
                )
        params = {"includeGridData": "true", "fields": _OPEN_WITH_FIELDS, "ranges": ranges}
        try:
            meta = self._metadata(params)
        except (SchemaError, StoreError) as exc:  # a worksheet missing, or narrower than guessed
            if isinstance(exc, StoreError) and "exceeds grid limits" not in str(exc):
                raise
            info = self.open()
            present = [r for r in reads if r.worksheet in self._sheets]
            found = iter(self.read(present))
            return info, [
                next(found) if r.worksheet in self._sheets else Snapshot(r.worksheet, (), [])
                for r in reads
            ]
        info = self._info(meta)
        cells = {
            str((sheet.get("properties") or {}).get("title", "")): _grid_cells(sheet)
            for sheet in meta.get("sheets", [])
        }
        snapshots: list[Snapshot | None] = []
        for read, guess in zip(reads, guesses, strict=True):
            sheet = self._sheets.get(read.worksheet)
            if sheet is None:
                snapshots.append(Snapshot(read.worksheet, (), []))
                continue
            names = [c for c in (read.columns or ()) if c in sheet.columns]
            if guess is None or any(sheet.columns[n] != guess[n] for n in names):
                snapshots.append(None)  # not where init puts them: read by name below
                continue
            snapshots.append(self._grid_snapshot(read, sheet, names, cells.get(sheet.title, {})))
        again = [r for r, snap in zip(reads, snapshots, strict=True) if snap is None]
        read_again = iter(self.read(again) if again else [])
        return info, [snap if snap is not None else next(read_again) for snap in snapshots]

    def _grid_snapshot(
        self,
        read: Read,
        sheet: _Sheet,
        names: Sequence[str],
        cells: Mapping[int, Mapping[int, CellValue]],
    ) -> Snapshot:
        """A whole-column read of ``names`` from grid data (rows 2 to the last with a value
        in one of them), shaped as ``read`` shapes it."""
        indexes = [sheet.columns[n] for n in names]
        height = max(
            (
                number
                for number, row in cells.items()
                if number > 1 and any(cell_text(row.get(i)) != "" for i in indexes)
            ),
            default=1,
        )
        self._tails[sheet.title] = height
        rows = [
            Row(number, {n: cells.get(number, {}).get(sheet.columns[n]) for n in names})
            for number in range(2, height + 1)
        ]
        return Snapshot(read.worksheet, sheet.header, rows, tuple(names), whole=True)

    def _info(self, meta: Mapping[str, Any]) -> WorkbookInfo:
        sheets: dict[str, SheetInfo] = {}
        self._sheets = {}
        for sheet in meta.get("sheets", []):
            props = sheet.get("properties", {})
            title = str(props.get("title", ""))
            header = _grid_header(sheet)
            sheet_id = int(props.get("sheetId", 0))
            self._sheets[title] = _Sheet(title, sheet_id, tuple(header), _columns(header))
            sheets[title] = SheetInfo(
                title,
                sheet_id,
                tuple(header),
                int(props.get("gridProperties", {}).get("rowCount", 0)),
                int(props.get("gridProperties", {}).get("columnCount", 0)),
            )
        url = str(meta.get("spreadsheetUrl") or self._url)
        self._url = url.split("#")[0]
        props = meta.get("properties", {})
        leases = {
            str(r.get("name")): str(r.get("namedRangeId"))
            for r in meta.get("namedRanges", []) or []
        }
        return WorkbookInfo(
            title=str(props.get("title", self.key)),
            sheets=sheets,
            time_zone=str(props.get("timeZone") or "UTC"),
            locale=str(props.get("locale") or "en_US"),
            url=self._url,
            leases=leases,
        )

    def link(self, info: WorkbookInfo, worksheet: str, row: int, task_id: str) -> str:
        sheet = self._sheets.get(worksheet)
        gid = sheet.sheet_id if sheet else 0
        return f"{self._url}#gid={gid}&range=A{row}"

    def _sheet(self, title: str) -> _Sheet:
        if not self._sheets:
            self.open()
        if title not in self._sheets and title not in self._titles:
            self._fetch_sheet(title)  # a worksheet beyond the queue's three (the Dashboard)
        try:
            return self._sheets[title]
        except KeyError:
            raise SchemaError(f"worksheet '{title}' not found; run `sheetq init`") from None

    def _fetch_sheet(self, title: str) -> None:
        """Learn the id and header of one more worksheet (one ``spreadsheets.get``)."""
        params = {
            "includeGridData": "true",
            "fields": _OPEN_FIELDS,
            "ranges": [f"{quote_title(title)}!1:1"],
        }
        try:
            meta = self._metadata(params)
        except SchemaError:
            return
        for sheet in meta.get("sheets", []):
            props = sheet.get("properties", {})
            if props.get("title") != title:
                continue
            header = _grid_header(sheet)
            self._sheets[title] = _Sheet(
                title, int(props.get("sheetId", 0)), tuple(header), _columns(header)
            )

    # --- read -----------------------------------------------------------------

    def read(self, reads: Sequence[Read]) -> list[Snapshot]:
        """The columns (or rows) asked for, in one ``values:batchGet``; re-asked once if a
        person moved a column since the header was last seen."""
        if not reads:
            return []
        for _ in range(3):
            ranges: list[str] = []
            plans: list[tuple[Read, _Sheet, list[str], int, list[tuple[int, int]]]] = []
            for read in reads:
                sheet = self._sheet(read.worksheet)
                names = [c for c in (read.columns or list(sheet.columns)) if c in sheet.columns]
                first = len(ranges)
                ranges.append(f"{quote_title(sheet.title)}!1:1")
                runs: list[tuple[int, int]] = []
                if read.rows is None:
                    for lo, hi in _runs(sheet.columns[n] for n in names):
                        ranges.append(
                            f"{quote_title(sheet.title)}!{column_letter(lo)}2:{column_letter(hi)}"
                        )
                elif read.rows and names:
                    # only the columns asked for: from the first to the last of them
                    left = min(sheet.columns[n] for n in names)
                    right = max(sheet.columns[n] for n in names)
                    runs = _runs(read.rows)
                    for lo, hi in runs:
                        ranges.append(
                            f"{quote_title(sheet.title)}!{column_letter(left)}{lo}:"
                            f"{column_letter(right)}{hi}"
                        )
                plans.append((read, sheet, names, first, runs))
            answers = self._batch_get(ranges, "read")
            moved = False
            for _read, sheet, _names, first, _unused in plans:
                header = self._header_from(answers[first])
                if header != sheet.header:
                    self._sheets[sheet.title] = _Sheet(
                        sheet.title, sheet.sheet_id, header, _columns(header)
                    )
                    moved = True
            if not moved:
                return [self._snapshot(answers, *plan) for plan in plans]
        raise StoreError("the header row kept changing while sheetq read it; try again")

    @staticmethod
    def _header_from(answer: Mapping[str, Any]) -> tuple[str, ...]:
        columns = answer.get("values", [])
        header = [str(col[0]).strip() if col else "" for col in columns]
        while header and not header[-1]:
            header.pop()
        return tuple(header)

    def _snapshot(
        self,
        answers: list[dict[str, Any]],
        read: Read,
        sheet: _Sheet,
        names: list[str],
        first: int,
        runs: list[tuple[int, int]],
    ) -> Snapshot:
        rows: dict[int, dict[str, CellValue]] = {}
        if read.rows is None:
            index = first + 1
            for lo, hi in _runs(sheet.columns[n] for n in names):
                block = answers[index].get("values", [])
                index += 1
                for offset in range(hi - lo + 1):
                    column = block[offset] if offset < len(block) else []
                    name_list = [n for n in names if sheet.columns[n] == lo + offset]
                    for row_offset, value in enumerate(column):
                        cells = rows.setdefault(row_offset + 2, {})
                        for name in name_list:
                            cells[name] = value
            height = max(rows, default=1)
            self._tails[sheet.title] = height
            ordered = [
                Row(n, {name: rows.get(n, {}).get(name) for name in names})
                for n in range(2, height + 1)
            ]
            return Snapshot(read.worksheet, sheet.header, ordered, tuple(names), whole=True)
        wanted = set(read.rows or ())
        out: list[Row] = []
        left = min((sheet.columns[n] for n in names), default=0)
        for run_index, (lo, hi) in enumerate(runs):
            block = answers[first + 1 + run_index].get("values", [])
            for number in range(lo, hi + 1):
                if number not in wanted:
                    continue
                values: dict[str, CellValue] = {}
                for name in names:
                    col = sheet.columns[name] - left
                    column = block[col] if col < len(block) else []
                    offset = number - lo
                    values[name] = column[offset] if offset < len(column) else None
                out.append(Row(number, values))
        return Snapshot(read.worksheet, sheet.header, out, tuple(names))

    # --- apply ----------------------------------------------------------------

    def apply(
        self,
        changes: ChangeSet,
        *,
        baseline: Sequence[Snapshot] = (),
        extra_reads: Sequence[Read] = (),
    ) -> ApplyResult:
        """One atomic ``spreadsheets:batchUpdate``, every row addressed by its key.

        The API writes only by position and has no compare-and-set on cells, so (DESIGN.md
        §5, "Rows are addressed by task_id"):

        1. *locate*: one ``values:batchGet`` of the whole key column and of every column the
           write changes (the *pre-image* of every row), and the target rows whole at the
           rows where they were last seen (their full pre-image), unless ``baseline``
           snapshots already hold them;
        2. *write*: the updates at the rows just located, appends, moves, the lease CAS. The
           request asks Google to echo, atomically with the write, the header rows and the
           rows it wrote (``includeSpreadsheetInResponse`` + ``responseRanges``): if every
           written row holds its target and the headers are those the write assumed, the
           write is verified at no extra request;
        3. otherwise (or when the endpoint sends no echo) *verify* by reading the same
           columns again: each target must hold what was written; a row that is not a
           target but holds exactly what was meant for one (a person sorted or inserted rows
           between 1 and 2) gets its pre-image back and the target is written again where it
           is now; if a person moved a column between 1 and 2, every written row gets its
           full pre-image and its values back, column by name. Then verified again (at most
           ``REPAIR_ROUNDS`` rounds).

        Moves (archive) copy and delete by position in the same request, so whatever rows
        were really at those positions are kept in the destination; what arrived there is
        read back and rows that were not meant are returned in ``misplaced``.
        """
        result = ApplyResult()
        if not changes and not extra_reads:
            return result
        keyed = [u for u in changes.updates if u.key is not None]
        if not keyed and not changes.deletes and not changes.moves:
            if changes:
                written = self._write(changes, {}, result)
                if written.echo is None and written.appends:
                    self._refresh_headers(sorted(written.appends))  # no echo: ask instead
                    if written.headers_moved(self._current_headers()):
                        self._realign_appends(written, result)
                elif written.echo is not None and written.headers_moved():
                    self._realign_appends(written, result)
            if extra_reads:
                result.snapshots = self.read(list(extra_reads))
            return result
        wanted = self._verify_columns(changes)
        before, full = self._located(wanted, baseline, keyed)
        written = self._write(changes, before, result)
        self._result_positions(changes, keyed, before, result)
        if (
            not changes.moves
            and not extra_reads
            and written.echo is not None
            and written.verified_by_echo()
        ):
            return result
        moved_to = self._move_plan
        self._move_plan = []
        move_reads = [Read(to, None, rows=tuple(range(lo, hi + 1))) for to, lo, hi in moved_to]
        rounds = 0
        restores: dict[tuple[str, str], UpdateRow] = {}
        if (
            move_reads
            and written.headers_moved(written.echo_headers() if written.echo is not None else None)
            if written.echo is not None
            else False
        ):
            self._realign_moves(before, result)
        while True:
            after, extra = self._verify_read(wanted, [*move_reads, *extra_reads])
            if (
                move_reads
                and written.echo is None
                and written.headers_moved(self._current_headers())
            ):
                self._realign_moves(before, result)
                after, extra = self._verify_read(wanted, [*move_reads, *extra_reads])
            if move_reads:
                self._check_moves(changes, extra[: len(move_reads)], result)
                extra = extra[len(move_reads) :]
                move_reads = []
            if written.headers_moved(self._current_headers()):
                repair = self._realign(written, keyed, full, before, result)
            else:
                repair = self._check(keyed, restores, before, after, result)
            if not repair:
                break
            rounds += 1
            if rounds > REPAIR_ROUNDS:
                raise StoreError(
                    "rows kept moving while sheetq wrote to the sheet (a person sorting or "
                    f"inserting rows); {len(repair.updates)} row(s) may need a look: "
                    + ", ".join(sorted(str(u.key) for u in repair.updates if u.key)[:10])
                )
            written = self._write(repair, after, result, repair=True, echo=False)
        result.snapshots = extra
        result.verified = after
        result.positions = {}
        for title, snap in after.items():
            column = self._key_column(changes, title)
            result.positions[title] = _positions(snap, column)
        self._result_positions(changes, keyed, after, result)
        return result

    def _result_positions(
        self,
        changes: ChangeSet,
        keyed: Sequence[UpdateRow],
        located: Mapping[str, Snapshot],
        result: ApplyResult,
    ) -> None:
        """``result.positions`` and ``result.rows`` from a whole-worksheet read."""
        for title, snap in located.items():
            if snap.whole and title not in result.positions:
                result.positions[title] = _positions(snap, self._key_column(changes, title))
        for update in keyed:
            row = result.positions.get(update.worksheet, {}).get(str(update.key))
            if row is not None and update.key_column == "task_id":
                result.rows[str(update.key)] = row

    def _refresh_headers(self, titles: Sequence[str]) -> None:
        """Read the header rows of ``titles`` (one ``values:batchGet``)."""
        answers = self._batch_get([f"{quote_title(t)}!1:1" for t in titles], "read")
        for title, answer in zip(titles, answers, strict=True):
            header = self._header_from(answer)
            sheet = self._sheet(title)
            if header != sheet.header:
                self._sheets[title] = _Sheet(title, sheet.sheet_id, header, _columns(header))

    def _current_headers(self) -> dict[str, tuple[str, ...]]:
        return {title: sheet.header for title, sheet in self._sheets.items()}

    @staticmethod
    def _key_column(changes: ChangeSet, title: str) -> str:
        items: list[UpdateRow | DeleteRow | MoveRow] = [
            *changes.updates,
            *changes.deletes,
            *changes.moves,
        ]
        for item in items:
            if item.worksheet == title and item.key is not None:
                return item.key_column
        return "task_id"

    @staticmethod
    def _lease_failed(message: str, count: int) -> bool:
        import re

        match = re.search(r"requests\[(\d+)\]\.(\w+)", message)
        if match:
            return int(match.group(1)) < count
        return "named range" in message.lower() or "namedrange" in message.lower()

    def _verify_columns(self, changes: ChangeSet) -> dict[str, tuple[str, ...]]:
        """Worksheet → the columns that locate and verify this write: the key columns, and
        every column an update writes (their pre-image is what a repair puts back)."""
        wanted: dict[str, dict[str, None]] = {}
        for update in changes.updates:
            if update.key is None:
                continue
            cols = wanted.setdefault(update.worksheet, {"task_id": None})
            cols[update.key_column] = None
            for name in update.values:
                cols[name] = None
        removals: list[DeleteRow | MoveRow] = [*changes.deletes, *changes.moves]
        for item in removals:
            cols = wanted.setdefault(item.worksheet, {"task_id": None})
            cols[item.key_column] = None
        for move in changes.moves:
            wanted.setdefault(move.to, {"task_id": None})
        return {title: tuple(cols) for title, cols in wanted.items()}

    def _located(
        self,
        wanted: Mapping[str, tuple[str, ...]],
        baseline: Sequence[Snapshot],
        keyed: Sequence[UpdateRow],
    ) -> tuple[dict[str, Snapshot], dict[str, dict[str, Row]]]:
        """Step 1: per worksheet, a whole-column read (or the caller's fresh baseline), and
        the full pre-image of each target (worksheet → key → its whole row): from a
        baseline that read the rows whole, else read at the rows where they were last
        seen, in the same request."""
        out: dict[str, Snapshot] = {}
        full: dict[str, dict[str, Row]] = {}
        for snap in baseline:
            cols = wanted.get(snap.worksheet)
            if cols is not None and snap.covers(cols) and snap.worksheet not in out:
                out[snap.worksheet] = snap
            elif not snap.whole and snap.columns is not None:
                _index_rows(full, snap, keyed)
        titles = [t for t in wanted if t not in out]
        hints: dict[str, tuple[int, ...]] = {}
        for update in keyed:
            if update.key not in full.get(update.worksheet, {}):
                hints.setdefault(update.worksheet, ())
                hints[update.worksheet] += (update.row,)
        reads = [Read(t, wanted[t]) for t in titles]
        reads += [Read(t, None, rows=tuple(sorted(set(rows)))) for t, rows in hints.items()]
        if reads:
            snaps = self.read(reads)
            out.update(zip(titles, snaps[: len(titles)], strict=True))
            for snap in snaps[len(titles) :]:
                _index_rows(full, snap, keyed)
        return out, full

    def _verify_read(
        self, wanted: Mapping[str, tuple[str, ...]], extra_reads: Sequence[Read]
    ) -> tuple[dict[str, Snapshot], list[Snapshot]]:
        titles = list(wanted)
        snaps = self.read([*(Read(t, wanted[t]) for t in titles), *extra_reads])
        return dict(zip(titles, snaps[: len(titles)], strict=True)), snaps[len(titles) :]

    def _write(
        self,
        changes: ChangeSet,
        located: Mapping[str, Snapshot],
        result: ApplyResult,
        *,
        repair: bool = False,
        echo: bool = True,
    ) -> _Written:
        """Step 2: build the batchUpdate from positions in ``located`` and send it, asking
        for the echo of the header rows and of the rows it writes (see ``apply``)."""
        positions = {
            title: _positions(snap, self._key_column(changes, title))
            for title, snap in located.items()
        }
        written = _Written(headers=self._current_headers())
        lease = self._lease_requests(changes)
        requests = lease + self._update_requests(changes, positions, result, written, repair=repair)
        requests += self._move_requests(changes, positions, located, result)
        requests += self._delete_requests(changes, positions, result)
        requests += self._append_requests(changes)
        for append in changes.appends:
            written.appends.setdefault(append.worksheet, []).append(append.values)
        if not requests:
            return written
        body: dict[str, Any] = {"requests": requests}
        params: dict[str, str] = {}
        for move in changes.moves:
            written.moved.update((move.worksheet, move.to))
        titles = sorted({*written.cells, *written.appends, *written.moved})
        if echo and titles and not changes.deletes:
            ranges = [f"{quote_title(t)}!1:1" for t in titles]
            for title, rows in written.cells.items():
                ranges += [f"{quote_title(title)}!{lo}:{hi}" for lo, hi in _runs(rows)]
            body.update(
                includeSpreadsheetInResponse=True,
                responseIncludeGridData=True,
                responseRanges=ranges,
            )
            params["fields"] = _ECHO_FIELDS
        try:
            reply = self._call(
                "write",
                lambda: self._http.request(
                    "post", self._url_for(":batchUpdate"), json=body, params=params
                ).json(),
                applied=lambda: self._was_applied(changes),
            )
        except StoreError as exc:
            if lease and self._lease_failed(str(exc), len(lease)):
                raise LeaseConflict(f"the queue's run lease changed: {exc}") from None
            raise
        if "includeSpreadsheetInResponse" in body and isinstance(reply, dict):
            written.echo = _echo(reply.get("updatedSpreadsheet"))
        return written

    def _realign(
        self,
        written: _Written,
        keyed: Sequence[UpdateRow],
        full: Mapping[str, Mapping[str, Row]],
        before: Mapping[str, Snapshot],
        result: ApplyResult,
    ) -> ChangeSet:
        """A person moved a column between the locate read and the write, so the write's
        cells went into other columns of the rows it wrote (rows themselves did not move).
        Each written row gets, column by name, its full pre-image with the meant values on
        top; every other cell of it that changed is put back. Appended rows are found by
        their values and rewritten. Returns the positional repair."""
        repair = ChangeSet()
        meant: dict[tuple[str, str], Mapping[str, CellValue]] = {
            (u.worksheet, str(u.key)): u.values for u in keyed
        }
        reads = [
            Read(title, None, rows=tuple(sorted(rows))) for title, rows in written.cells.items()
        ]
        snaps = self.read(reads) if reads else []
        for snap in snaps:
            title = snap.worksheet
            targets = written.targets.get(title, {})
            for row in snap.rows:
                key = targets.get(row.number)
                if key is None:
                    continue
                old = full.get(title, {}).get(key)
                desired: dict[str, CellValue] = {}
                if old is not None:
                    desired.update({n: v for n, v in old.values.items() if n})
                else:
                    pre = {r.text("task_id").strip(): r for r in before[title].rows}.get(key)
                    if pre is not None:
                        desired.update(pre.values)
                    result.repaired.append(
                        f"{title} row {row.number} ({key}): its cells outside sheetq's write "
                        "could not be checked (no full pre-image)"
                    )
                desired.update(meant.get((title, key), {}))
                fixes = {
                    name: ("" if value is None else value)
                    for name, value in desired.items()
                    if name in row.values and not _same(row.values.get(name), value)
                }
                if fixes:
                    repair.updates.append(UpdateRow(title, None, row.number, fixes))
                    result.repaired.append(
                        f"{title} row {row.number} ({key}): a column moved mid-write; "
                        f"{len(fixes)} cell(s) put back by column name"
                    )
        self._realign_appends(written, result, repair)
        return repair

    def _realign_moves(self, before: Mapping[str, Snapshot], result: ApplyResult) -> None:
        """A person moved a column between archive's read and its write, so the copy put
        cells under other headers. Rows did not move: each copied row is written again in
        its destination, column by name, from the whole row read before the write."""
        repair = ChangeSet()
        for to_title, dest_row, source_title, source_row in self._move_sources:
            snap = before.get(source_title)
            row = next((r for r in snap.rows if r.number == source_row), None) if snap else None
            if row is None:
                continue
            header = self._sheet(to_title).header
            values = {
                name: ("" if row.values.get(name) is None else row.values.get(name))
                for name in header
                if name
            }
            repair.updates.append(UpdateRow(to_title, None, dest_row, values))
        if repair:
            self._write(repair, {}, result, echo=False)
            result.repaired.append(
                f"a column moved while rows were archived: {len(repair.updates)} archived "
                "row(s) rewritten by column name"
            )

    def _realign_appends(
        self, written: _Written, result: ApplyResult, repair: ChangeSet | None = None
    ) -> None:
        """Appended rows written under a header a person changed meanwhile: find each in the
        rows after the worksheet's last known row (its values are all there, in other
        columns) and write it again by column name; the cells it put elsewhere are cleared."""
        now = self._current_headers() if written.echo is None else written.echo_headers()
        own = repair is None
        repair = ChangeSet() if repair is None else repair
        for title, rows in written.appends.items():
            if now.get(title, written.headers.get(title)) == written.headers.get(title):
                continue
            if written.echo is not None:
                self._sheets[title] = _Sheet(
                    title, self._sheet(title).sheet_id, now[title], _columns(now[title])
                )
            tail = self._tails.get(title)
            if tail is None:
                result.repaired.append(
                    f"{title}: a column moved while rows were appended; they may need a look"
                )
                continue
            (snap,) = self.read(
                [Read(title, None, rows=tuple(range(tail + 1, tail + len(rows) + 50)))]
            )
            for values in rows:
                texts = sorted(cell_text(v) for v in values.values() if cell_text(v) != "")
                for row in snap.rows:
                    got = sorted(cell_text(v) for v in row.values.values() if cell_text(v) != "")
                    if got != texts:
                        continue
                    fixes = {
                        name: ("" if values.get(name) is None else values.get(name))
                        for name in row.values
                        if not _same(row.values.get(name), values.get(name))
                    }
                    if fixes:
                        repair.updates.append(UpdateRow(title, None, row.number, fixes))
                        result.repaired.append(
                            f"{title} row {row.number}: appended while a column moved; "
                            "rewritten by column name"
                        )
                    break
        if own and repair:
            self._write(repair, {}, result, echo=False)

    def _check(
        self,
        updates: Sequence[UpdateRow],
        restores: dict[tuple[str, str], UpdateRow],
        before: Mapping[str, Snapshot],
        after: Mapping[str, Snapshot],
        result: ApplyResult,
    ) -> ChangeSet:
        """Step 3: compare the fresh read with what was meant. Returns the repair (empty:
        all is well): each target that does not hold its values is written again where it
        is now, and each other row that holds exactly the values meant for a target, which
        it did not hold before (the write landed on it), gets its pre-image back. Restores
        found in earlier rounds (``restores``, updated here) are checked like targets."""
        repair = ChangeSet()
        missing = set(result.missing)
        for title, snap in after.items():
            mine = [u for u in updates if u.worksheet == title]
            if not mine:
                continue
            column = mine[0].key_column
            expected: dict[str, UpdateRow] = {str(u.key): u for u in mine}
            expected.update({k: u for (t, k), u in restores.items() if t == title})
            rows_of: dict[str, Row] = {}
            for row in snap.rows:
                rows_of.setdefault(row.text(column).strip(), row)
            old = before.get(title)
            pre: dict[str, Row] = {}
            if old is not None:
                for row in old.rows:
                    pre.setdefault(row.text(column).strip(), row)
            union = list(dict.fromkeys(name for u in mine for name in u.values))
            originals = {str(u.key) for u in mine}
            for key, update in expected.items():
                now_at = rows_of.get(key)
                if now_at is None:
                    if key not in missing:
                        missing.add(key)
                        result.missing.append(key)
                    continue
                if not _holds(now_at, update.values):
                    values = dict(update.values)
                    earlier = pre.get(key)
                    if key in originals and earlier is not None:
                        # another target's write may have landed here: its other columns
                        # get this row's pre-image back, then this row's own values
                        values = {n: _blank(earlier.values.get(n)) for n in union} | values
                    repair.updates.append(UpdateRow(title, key, now_at.number, values, column))
            keyless = _keyless_preimage(old, column, union) if old is not None else None
            for row in snap.rows:
                key = row.text(column).strip()
                if key in expected:
                    continue
                hit = next((u for u in mine if _holds(row, u.values)), None)
                if hit is None:
                    continue
                earlier = pre.get(key) if key else None
                if earlier is not None and _holds(earlier, hit.values):
                    continue  # it held these values before the write: not our doing
                if earlier is not None:
                    restore = {name: _blank(earlier.values.get(name)) for name in union}
                elif key:
                    restore = dict.fromkeys(union, "")  # a row a person added meanwhile
                elif keyless is not None:
                    restore = dict(keyless)
                else:
                    result.repaired.append(
                        f"{title} row {row.number} (a row without {column}) got a write meant "
                        f"for {hit.key} (rows moved mid-write) and could not be put back: "
                        "check it by hand"
                    )
                    continue
                fix = UpdateRow(title, key or None, row.number, restore, column)
                repair.updates.append(fix)
                if key:
                    restores[(title, key)] = fix
                result.repaired.append(
                    f"{title} row {row.number} ({key or 'a row without ' + column}) got a write "
                    f"meant for {hit.key} (rows moved mid-write): put back"
                )
        return repair

    def read_then_apply(
        self,
        reads: Sequence[Read],
        plan: Callable[[list[Snapshot]], Sequence[ChangeSet]],
        *,
        snapshots: Sequence[Snapshot] | None = None,
    ) -> list[ApplyResult]:
        """One ``values:batchGet`` (none when ``snapshots`` of ``reads`` are given), then one
        atomic ``batchUpdate`` per planned change set, in order (Google has no
        transactions; see ``Store.read_then_apply``)."""
        read = list(snapshots) if snapshots is not None else self.read(reads)
        return [self.apply(c) for c in plan(read) if c]

    @staticmethod
    def _check_moves(changes: ChangeSet, arrived: Sequence[Snapshot], result: ApplyResult) -> None:
        """What the moves' copy really carried: the destination rows it filled, read back.
        Rows that were not meant go to ``result.misplaced`` (with ``_worksheet`` and
        ``_row``: where they are now) for the caller to put back."""
        meant = {m.key for m in changes.moves}
        column = changes.moves[0].key_column if changes.moves else "task_id"
        for snap in arrived:
            for row in snap.rows:
                key = row.text(column).strip()
                if key in meant and key not in result.moved:
                    result.moved.append(key)
                elif any(cell_text(v).strip() for v in row.values.values()):
                    values: dict[str, CellValue] = {
                        n: v for n, v in row.values.items() if cell_text(v) != ""
                    }
                    values["_worksheet"] = snap.worksheet
                    values["_row"] = row.number
                    result.misplaced.append(values)

    def _lease_requests(self, changes: ChangeSet) -> list[dict[str, Any]]:
        lease = changes.lease
        if lease is None:
            return []
        queue = self._sheets.get(self._titles[0]) if self._titles else None
        sheet_id = queue.sheet_id if queue else 0
        grid = {
            "sheetId": sheet_id,
            "startRowIndex": 0,
            "endRowIndex": 1,
            "startColumnIndex": 0,
            "endColumnIndex": 1,
        }
        out: list[dict[str, Any]] = []
        if lease.replaces is not None:
            out.append({"deleteNamedRange": {"namedRangeId": lease.replaces}})
        if lease.token is not None:
            out.append(
                {
                    "addNamedRange": {
                        "namedRange": {
                            "namedRangeId": lease.token,
                            "name": lease.name,
                            "range": grid,
                        }
                    }
                }
            )
        elif lease.replaces is None:
            # assert that no run holds the lease: add and remove it in the same atomic batch
            probe = f"9{self._rng.randrange(10**15):015d}"
            out.append(
                {
                    "addNamedRange": {
                        "namedRange": {"namedRangeId": probe, "name": lease.name, "range": grid}
                    }
                }
            )
            out.append({"deleteNamedRange": {"namedRangeId": probe}})
        return out

    def _update_requests(
        self,
        changes: ChangeSet,
        positions: Mapping[str, Mapping[str, int]],
        result: ApplyResult,
        written: _Written,
        *,
        repair: bool = False,
    ) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for update in changes.updates:
            if update.key is None:
                row: int | None = update.row
            else:
                row = positions.get(update.worksheet, {}).get(update.key)
                if row is None and repair:
                    row = update.row  # a repair's row was read just now
            if row is None:
                result.missing.append(str(update.key))
                continue
            sheet = self._sheet(update.worksheet)
            cells = {sheet.columns[n]: v for n, v in update.values.items() if n in sheet.columns}
            mine = dict(written.cells.setdefault(update.worksheet, {}).get(row, {}))
            mine.update(update.values)
            written.cells[update.worksheet][row] = mine
            if update.key is not None:
                written.targets.setdefault(update.worksheet, {})[row] = str(update.key)
                written.key_columns[update.worksheet] = update.key_column
            for lo, hi in _runs(cells):
                out.append(
                    {
                        "updateCells": {
                            "start": {
                                "sheetId": sheet.sheet_id,
                                "rowIndex": row - 1,
                                "columnIndex": lo,
                            },
                            "rows": [{"values": [_cell_data(cells[c]) for c in range(lo, hi + 1)]}],
                            "fields": "userEnteredValue",
                        }
                    }
                )
        return out

    def _move_requests(
        self,
        changes: ChangeSet,
        positions: Mapping[str, Mapping[str, int]],
        located: Mapping[str, Snapshot],
        result: ApplyResult,
    ) -> list[dict[str, Any]]:
        """Copy the rows at the located positions to the end of the destination, column by
        column (header names may be in another order there), then delete those positions:
        one atomic request, so whatever was really at those positions is kept."""
        self._move_plan = []
        self._move_sources: list[tuple[str, int, str, int]] = []
        if not changes.moves:
            return []
        by_pair: dict[tuple[str, str], list[int]] = {}
        for move in changes.moves:
            row = positions.get(move.worksheet, {}).get(move.key)
            if row is None:
                result.missing.append(move.key)
                continue
            by_pair.setdefault((move.worksheet, move.to), []).append(row)
        out: list[dict[str, Any]] = []
        deletes: list[dict[str, Any]] = []
        for (source_title, to_title), rows in by_pair.items():
            source, dest = self._sheet(source_title), self._sheet(to_title)
            tail = located.get(to_title)
            # the destination's last keyed row (1-based; rows below it are pushed down)
            keyed = tail.rows if tail is not None else []
            end = max((r.number for r in keyed if r.text("task_id").strip()), default=1)
            runs = _runs(rows)
            count = sum(hi - lo + 1 for lo, hi in runs)
            out.append(
                {
                    "insertDimension": {
                        "range": {
                            "sheetId": dest.sheet_id,
                            "dimension": "ROWS",
                            "startIndex": end,
                            "endIndex": end + count,
                        },
                        "inheritFromBefore": False,
                    }
                }
            )
            at = end  # 0-based index of the next destination row
            spans = _column_spans(source.columns, dest.columns)
            for lo, hi in runs:
                for offset in range(hi - lo + 1):
                    self._move_sources.append(
                        (to_title, at + offset + 1, source_title, lo + offset)
                    )
                for src_col, dst_col, width in spans:
                    out.append(
                        {
                            "copyPaste": {
                                "source": _grid(source.sheet_id, lo - 1, hi, src_col, width),
                                "destination": _grid(
                                    dest.sheet_id, at, at + hi - lo + 1, dst_col, width
                                ),
                                "pasteType": "PASTE_VALUES",
                                "pasteOrientation": "NORMAL",
                            }
                        }
                    )
                at += hi - lo + 1
            for lo, hi in reversed(runs):
                deletes.append(_delete_rows(source.sheet_id, lo, hi))
            self._move_plan.append((to_title, end + 1, end + count))
        return out + deletes

    def _delete_requests(
        self,
        changes: ChangeSet,
        positions: Mapping[str, Mapping[str, int]],
        result: ApplyResult,
    ) -> list[dict[str, Any]]:
        by_sheet: dict[str, set[int]] = {}
        for delete in changes.deletes:
            if delete.key is None:
                row: int | None = delete.row
            else:
                row = positions.get(delete.worksheet, {}).get(delete.key)
            if row is None:
                result.missing.append(str(delete.key))
            else:
                by_sheet.setdefault(delete.worksheet, set()).add(row)
        out: list[dict[str, Any]] = []
        for title, rows in by_sheet.items():
            sheet = self._sheet(title)
            for lo, hi in reversed(_runs(rows)):
                out.append(_delete_rows(sheet.sheet_id, lo, hi))
        return out

    def _append_requests(self, changes: ChangeSet) -> list[dict[str, Any]]:
        by_sheet: dict[str, list[dict[str, Any]]] = {}
        for append in changes.appends:
            sheet = self._sheet(append.worksheet)
            width = max(sheet.columns.values(), default=-1) + 1
            cells = [{} for _ in range(width)]  # type: list[dict[str, Any]]
            for name, value in append.values.items():
                if name in sheet.columns:
                    cells[sheet.columns[name]] = _cell_data(value)
            by_sheet.setdefault(append.worksheet, []).append({"values": cells})
        return [
            {
                "appendCells": {
                    "sheetId": self._sheet(title).sheet_id,
                    "rows": rows,
                    "fields": "userEnteredValue",
                }
            }
            for title, rows in by_sheet.items()
        ]

    def _was_applied(self, changes: ChangeSet) -> bool:
        """After a lost reply: did the (atomic) write happen? One marker is enough."""
        lease = changes.lease
        if lease is not None:
            body = self._http.request(
                "get", self._url_for(), params={"fields": "namedRanges(namedRangeId,name)"}
            ).json()
            ids = {str(r.get("namedRangeId")) for r in body.get("namedRanges", []) or []}
            if lease.token is not None:
                return lease.token in ids
            if lease.replaces is not None:
                return lease.replaces not in ids
        marker = next(
            (
                a
                for a in changes.appends
                if a.values.get("task_id") and a.worksheet != self._log_title()
            ),
            None,
        )
        if marker is not None:
            (snap,) = self.read([Read(marker.worksheet, ("task_id",))])
            return any(r.text("task_id") == marker.values["task_id"] for r in snap.rows)
        log_rows = [a for a in changes.appends if a.worksheet == self._log_title()]
        if log_rows:
            first = log_rows[0].values
            keys = ("ts", "task_id", "event", "run_id")
            (snap,) = self.read([Read(log_rows[0].worksheet, keys)])
            want = tuple(str(first.get(k, "")) for k in keys)
            return any(tuple(r.text(k) for k in keys) == want for r in snap.rows)
        return False  # updates only: sending them again is harmless

    def _log_title(self) -> str:
        return self._titles[1] if len(self._titles) > 1 else "QueueLog"

    # --- init ---------------------------------------------------------------------

    def ensure_worksheets(self, spec: Mapping[str, Sequence[str]]) -> dict[str, list[str]]:
        """Add missing worksheets and header cells in one batchUpdate; never removes data."""
        meta = self._metadata(
            {"fields": "sheets(properties(sheetId,title,gridProperties(rowCount,columnCount)))"}
        )
        existing = {s["properties"]["title"]: s["properties"] for s in meta.get("sheets", [])}
        present = [t for t in spec if t in existing]
        headers: dict[str, tuple[str, ...]] = {}
        if present:
            answers = self._batch_get([f"{quote_title(t)}!1:1" for t in present], "read")
            headers = {t: self._header_from(a) for t, a in zip(present, answers, strict=True)}
        requests: list[dict[str, Any]] = []
        added: dict[str, list[str]] = {}
        used_ids = {int(p.get("sheetId", 0)) for p in existing.values()}
        for title, columns in spec.items():
            header = list(headers.get(title, ()))
            missing = [c for c in columns if c not in header]
            if not missing:
                continue
            if title in existing:
                sheet_id = int(existing[title].get("sheetId", 0))
                col_count = int(existing[title].get("gridProperties", {}).get("columnCount", 26))
            else:
                sheet_id = self._rng.randrange(1, 2**31 - 1)
                while sheet_id in used_ids:
                    sheet_id = self._rng.randrange(1, 2**31 - 1)
                used_ids.add(sheet_id)
                col_count = max(26, len(columns))  # `init` trims the queue's grids after
                requests.append(
                    {
                        "addSheet": {
                            "properties": {
                                "sheetId": sheet_id,
                                "title": title,
                                "sheetType": "GRID",
                                "gridProperties": {
                                    "rowCount": 1000,
                                    "columnCount": col_count,
                                    "frozenRowCount": 1,
                                },
                            }
                        }
                    }
                )
            start = len(header)
            need = start + len(missing)
            if need > col_count:
                requests.append(
                    {
                        "appendDimension": {
                            "sheetId": sheet_id,
                            "dimension": "COLUMNS",
                            "length": need - col_count,
                        }
                    }
                )
            requests.append(
                {
                    "updateCells": {
                        "start": {"sheetId": sheet_id, "rowIndex": 0, "columnIndex": start},
                        "rows": [{"values": [_cell_data(c) for c in missing]}],
                        "fields": "userEnteredValue",
                    }
                }
            )
            added[title] = missing
        if requests:
            self._call("init", lambda: self._http.batch_update(self.key, {"requests": requests}))
        return added

    def move_block(self, worksheet: str, to: str, rows: Sequence[Row], to_end: int) -> BlockMoved:
        """One atomic ``batchUpdate``: insert rows after ``to_end`` in ``to``, ``copyPaste``
        the source rows ``lo``..``hi`` into them (column runs by header name), delete those
        source rows; then one read of what arrived, compared row by row with ``rows``
        (see ``Store.move_block``). A row not in the block that a person's edit put at those
        positions is kept in ``to`` and counted as ``stray``."""
        if not rows:
            return BlockMoved()
        lo, hi = rows[0].number, rows[-1].number
        if [r.number for r in rows] != list(range(lo, hi + 1)):
            raise ValueError("move_block: rows must be consecutive")
        source, dest = self._sheet(worksheet), self._sheet(to)
        names = [n for n in source.columns if n in dest.columns]
        count = hi - lo + 1
        requests: list[dict[str, Any]] = [
            {
                "insertDimension": {
                    "range": {
                        "sheetId": dest.sheet_id,
                        "dimension": "ROWS",
                        "startIndex": to_end,
                        "endIndex": to_end + count,
                    },
                    "inheritFromBefore": False,
                }
            }
        ]
        for src_col, dst_col, width in _column_spans(source.columns, dest.columns):
            requests.append(
                {
                    "copyPaste": {
                        "source": _grid(source.sheet_id, lo - 1, hi, src_col, width),
                        "destination": _grid(dest.sheet_id, to_end, to_end + count, dst_col, width),
                        "pasteType": "PASTE_VALUES",
                        "pasteOrientation": "NORMAL",
                    }
                }
            )
        requests.append(_delete_rows(source.sheet_id, lo, hi))
        arrived = Read(to, None, rows=tuple(range(to_end + 1, to_end + count + 1)))
        wanted = [row_identity(r, names) for r in rows]

        def landed() -> list[Row]:
            (snap,) = self.read([arrived])
            return snap.rows

        def applied() -> bool:
            return Counter(row_identity(r, names) for r in landed()) == Counter(wanted)

        self._call(
            "write",
            lambda: self._http.batch_update(self.key, {"requests": requests}),
            applied=applied,
        )
        outcome = BlockMoved()
        left = Counter(wanted)
        for row in landed():
            key = row_identity(row, names)
            if left[key] > 0:
                left[key] -= 1
                outcome.moved += 1
            elif any(key):
                outcome.stray += 1
        return outcome

    def fit_grids(self, titles: Sequence[str]) -> list[str]:
        """Trim trailing empty columns beyond the last header cell of ``titles``.

        Every cell of a grid counts against Google's limit of 10,000,000 cells per
        spreadsheet (https://support.google.com/drive/answer/37603), and Google creates
        worksheets 26 columns wide. One ``spreadsheets.get`` (grid sizes and header rows);
        when a grid is wider than its header, one ``values:batchGet`` of the columns beyond
        it (formulas included) and one ``batchUpdate`` deleting only columns that hold no
        value in any row: a manager's columns with values are kept, even unnamed ones.
        Returns one line per trimmed worksheet; run again, it changes nothing."""
        meta = self._metadata(
            {
                "includeGridData": "true",
                "fields": "sheets(properties(sheetId,title,gridProperties(columnCount)),"
                "data(rowData(values(formattedValue))))",
                "ranges": [f"{quote_title(t)}!1:1" for t in titles],
            }
        )
        wide: list[tuple[str, int, int, int]] = []  # title, sheet id, header width, columns
        for sheet in meta.get("sheets", []):
            props = sheet.get("properties", {})
            title = str(props.get("title", ""))
            width = max(len(_grid_header(sheet)), 1)
            count = int(props.get("gridProperties", {}).get("columnCount", 0))
            if title in titles and count > width:
                wide.append((title, int(props.get("sheetId", 0)), width, count))
        if not wide:
            return []
        ranges = [
            f"{quote_title(t)}!{column_letter(w)}:{column_letter(n - 1)}" for t, _i, w, n in wide
        ]
        answers = self._call(
            "read",
            lambda: self._http.values_batch_get(
                self.key,
                ranges,
                params={"majorDimension": "COLUMNS", "valueRenderOption": "FORMULA"},
            ),
        ).get("valueRanges", [])
        requests: list[dict[str, Any]] = []
        lines: list[str] = []
        for (title, sheet_id, width, count), answer in zip(wide, answers, strict=True):
            used = answer.get("values", []) or []
            while used and not any(str(v) != "" for v in used[-1]):
                used.pop()
            keep = width + len(used)  # columns up to the last one holding any value
            if keep >= count:
                continue
            requests.append(
                {
                    "deleteDimension": {
                        "range": {
                            "sheetId": sheet_id,
                            "dimension": "COLUMNS",
                            "startIndex": keep,
                            "endIndex": count,
                        }
                    }
                }
            )
            lines.append(
                f"{title}: grid trimmed to {keep} columns ({count - keep} empty column(s) removed)"
            )
        if requests:
            self._call("init", lambda: self._http.batch_update(self.key, {"requests": requests}))
        return lines

    def format_worksheets(self, queue: str, log: str, archive: str) -> list[str]:
        """Frozen headers, status drop-down, colours, warning-only protection, widths."""
        from sheetq.store.google_format import format_requests

        meta = self._metadata(
            {
                "fields": "sheets(properties(sheetId,title,gridProperties),conditionalFormats,"
                "protectedRanges(protectedRangeId,description))"
            }
        )
        info = self.open()
        requests, lines = format_requests(meta, info, queue, log, archive)
        if requests:
            self._call("init", lambda: self._http.batch_update(self.key, {"requests": requests}))
        return lines
