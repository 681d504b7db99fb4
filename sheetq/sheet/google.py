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
  never parsed — the batchUpdate equivalent of RAW), ``copyPaste`` + ``deleteDimension``
  for moves, and ``appendCells`` (no table detection). Every row is addressed by its key:
  located right before the write and verified right after, by the write's own echo or a
  read, and repaired if a person's edit came in between (``google_writes.py``).

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
import re
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from sheetq.errors import (
    SchemaError,
    StoreError,
    StoreUnavailable,
    UsageError,
)
from sheetq.model import CONNECTORS_SHEET
from sheetq.sheet.google_auth import GOOGLE_API, credentials_for, session_for, spreadsheet_key
from sheetq.sheet.google_cells import (
    _cell_data,
    _column_spans,
    _columns,
    _delete_rows,
    _grid,
    _grid_cells,
    _grid_header,
    _layout_guess,
    _runs,
    _Sheet,
    quote_title,
)
from sheetq.sheet.google_writes import VerifiedWrites
from sheetq.sheet.store import (
    BlockMoved,
    CellValue,
    Read,
    Row,
    SheetInfo,
    Snapshot,
    WorkbookInfo,
    cell_text,
    column_letter,
    row_identity,
)

if TYPE_CHECKING:
    from sheetq.config import Settings

_ERRNO = re.compile(r"\[Errno -?\d+\] [^'\"()\[\]]+")  # "[Errno 111] Connection refused"
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


class GoogleStore(VerifiedWrites):
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
        self._move_sources: list[tuple[str, int, str, int]] = []  # (to, row, from, row)
        self._tails: dict[str, int] = {}  # worksheet → its last row in the last whole read
        self._monotonic = monotonic
        self._deadline = None if time_limit is None else monotonic() + time_limit
        self._limit = (time_limit or 0.0, time_limit_name)

    @classmethod
    def from_settings(
        cls,
        settings: Settings,
        *,
        time_limit: float | None = None,
        time_limit_name: str = "",
        extra_titles: Sequence[str] = (),
    ) -> GoogleStore:
        """Build the adapter from ``SHEETQ_SPREADSHEET`` and the credential settings;
        ``time_limit`` as in the constructor; ``extra_titles``: worksheets whose header rows
        ``open()`` also reads (besides Queue, QueueLog and QueueArchive)."""
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
            titles=(
                settings.queue_sheet,
                settings.log_sheet,
                settings.archive_sheet,
                *extra_titles,
                # the Connectors rows are read with the run's scan (docs/design.md §13)
                *((CONNECTORS_SHEET,) if settings.connectors_sheet else ()),
            ),
            account=account,
            time_limit=time_limit,
            time_limit_name=time_limit_name or "its time limit",
        )

    # --- plumbing ---------------------------------------------------------------

    @property
    def requests_made(self) -> int:
        return self._requests

    @property
    def survives_power_loss(self) -> bool:
        return True  # Google acknowledged it: it is not on this host

    def version(self) -> int | None:
        return None  # only a read tells whether a person or another program wrote

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
                    f"{RETRY_BUDGET:.0f}s: {self._cause(exc)}"
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
        """The failure in a few words: the HTTP status and Google's message, or the
        exception's type and the system's reason (``ConnectionError ([Errno 111]
        Connection refused)``) — never requests' text, which holds the whole URL."""
        response = getattr(exc, "response", None)
        code = getattr(response, "status_code", None)
        if code is not None and hasattr(exc, "error"):
            message = str(getattr(exc, "error", {}).get("message", ""))
            return f"{code} {message}".strip()
        reason = _ERRNO.search(str(exc))
        return f"{type(exc).__name__} ({reason.group(0)})" if reason else type(exc).__name__

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
        pairs = [(n, sheet.columns[n]) for n in names]
        height = next(
            (
                number
                for number in sorted(cells, reverse=True)  # the last row first: one look
                if number > 1 and any(cell_text(cells[number].get(i)) != "" for _, i in pairs)
            ),
            1,
        )
        self._tails[sheet.title] = height
        empty: Mapping[int, CellValue] = {}
        rows = []
        for number in range(2, height + 1):
            got = cells.get(number, empty).get
            rows.append(Row(number, {n: got(i) for n, i in pairs}))
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
        positions arrived in ``to`` too: counted as ``stray`` and listed in ``strays``."""
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
                outcome.strays.append(row)
        return outcome

    def grid_sizes(self) -> dict[str, tuple[int, int]]:
        """Every worksheet's ``rowCount`` × ``columnCount``, title → (rows, columns): one
        ``spreadsheets.get`` without ranges (a get with ranges answers only for the
        worksheets they touch) and with a field mask of those properties only."""
        meta = self._metadata(
            {"fields": "sheets(properties(title,gridProperties(rowCount,columnCount)))"}
        )
        out: dict[str, tuple[int, int]] = {}
        for sheet in meta.get("sheets", []):
            props = sheet.get("properties", {})
            grid = props.get("gridProperties", {})
            out[str(props.get("title", ""))] = (
                int(grid.get("rowCount", 0)),
                int(grid.get("columnCount", 0)),
            )
        return out

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
        from sheetq.sheet.google_format import format_requests

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
