"""``sheetq init --dashboard``: a worksheet of live spreadsheet formulas over Queue and QueueLog.

A manager sees the numbers without any sheetq run: counts by type × status, rows still
owed an alert, the oldest waiting task and its age, done and failed in the last 24 hours,
success rates. These formulas (``sheetq.sheet.store.Formula``) are the only formula cells
sheetq writes; labels are data.

* Columns are found by header name when the dashboard is built, then referenced by
  letter (``'Queue'!E:E``); Google Sheets itself keeps those references right when a
  person later moves or inserts columns. Titles are always quoted (``'Jon''s Queue'!C:C``).
* Whole-column ranges (``E:E``, ``E2:E``): rows added later are counted.
* Types: those present in the Queue or configured when the dashboard is built, one row
  each, plus "all types" (every row) and "other types" (types added since: rebuild to
  list them).
* Time: sheetq writes UTC text (``2026-01-05T09:00:00Z``), which sorts and compares as
  text; ``NOW()`` is in the spreadsheet's time zone, so the dashboard holds a table of
  that zone's UTC offsets (daylight saving included, ten years ahead) and turns
  ``NOW()`` into the same UTC text before comparing.
* Rebuilding (``init --dashboard`` again) rewrites the same cells in place and clears
  rows the previous build used beyond the new ones; other worksheets, and columns of the
  dashboard not named in its header, are untouched.
* Google Sheets only: a local workbook has no formula engine (``sheetq status`` and
  ``sheetq stats`` give the same numbers there), so nothing is written.

Formulas use English function names and comma separators, as the Sheets API expects
whatever the spreadsheet's locale [U: not verified against a non-English spreadsheet].
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta

from sheetq.config import Settings
from sheetq.sheet import is_local
from sheetq.sheet.store import (
    CellValue,
    ChangeSet,
    Formula,
    Read,
    Store,
    UpdateRow,
    WorkbookInfo,
    column_letter,
)
from sheetq.times import zone

STATUSES = ("pending", "processing", "retry", "done", "failed", "skipped")
HEADER: tuple[str, ...] = (
    "type",
    *STATUSES,
    "total",
    "about",
    "UTC offset from (local time)",
    "from (date serial)",
    "UTC offset (hours)",
)
MAX_TYPES = 200  # rows of the type table; the rest are counted under "other types"
OFFSET_YEARS = 10  # how far ahead the time zone table reaches
_ISO_TEXT = '"yyyy-mm-dd""T""hh:mm:ss""Z"""'  # TEXT() format of sheetq's timestamps
_SERIAL_EPOCH = datetime(1899, 12, 30)

Grid = list[dict[str, CellValue]]  # data rows (sheet row 2 on), by header name


def dashboard_title(settings: Settings) -> str:
    """``Dashboard`` for the default queue, ``<queue> Dashboard`` for any other one."""
    queue = settings.queue_sheet
    return "Dashboard" if queue == "Queue" else f"{queue} Dashboard"


def build_dashboard(store: Store, settings: Settings, *, now: datetime | None = None) -> list[str]:
    """Build or rebuild the dashboard worksheet; returns lines to print.

    Costs on Google about 7 Sheets API requests (open and the type column; then creating or
    finding the worksheet, reading its previous extent, and one atomic write).
    """
    title = dashboard_title(settings)
    if is_local(settings.spreadsheet):
        return [
            f"{title}: not built: the dashboard needs Google Sheets (a local workbook has no "
            "formula engine); `sheetq status` and `sheetq stats` show the same numbers"
        ]
    info = store.open()
    (snap,) = store.read([Read(settings.queue_sheet, ("type",))])
    present = {row.text("type").strip() for row in snap.rows}
    types = sorted((present | set(settings.types)) - {""})
    created, formulas = _write_google(store, settings, title, info, types, now or datetime.now(UTC))
    listed = ", ".join(types[:MAX_TYPES]) or "none yet"
    verb = "built" if created else "rebuilt in place"
    return [
        f"{title}: {verb}: {formulas} live formulas over '{settings.queue_sheet}' and "
        f"'{settings.log_sheet}'; types listed: {listed}"
    ]


# --- the plan (pure) ------------------------------------------------------------------------


def quote(title: str) -> str:
    """A worksheet title as a formula prefix: ``Jon's Queue`` → ``'Jon''s Queue'``."""
    return "'" + title.replace("'", "''") + "'"


def _literal(text: str) -> str:
    """A formula string literal."""
    return '"' + text.replace('"', '""') + '"'


def _equals(text: str) -> str:
    """A COUNTIFS criterion matching ``text`` exactly (case-insensitively): wildcards and
    leading operators in a type name are escaped."""
    escaped = text.replace("~", "~~").replace("*", "~*").replace("?", "~?")
    return _literal("=" + escaped)


def default_letters() -> dict[str, str]:
    """Dashboard column → letter when the header is laid out as ``HEADER``."""
    return {name: column_letter(i) for i, name in enumerate(HEADER)}


def plan_dashboard(
    info: WorkbookInfo,
    settings: Settings,
    types: Sequence[str],
    *,
    now: datetime,
    letters: Mapping[str, str] | None = None,
) -> Grid:
    """The dashboard's data rows (sheet row 2 on), cells by header name.

    ``letters`` are the dashboard's own columns (its header may have been rearranged);
    ``now`` (UTC) only decides where the time zone table starts.
    """
    at = dict(letters or default_letters())
    q = _Columns(
        info, settings.queue_sheet, ("task_id", "created_at", "type", "status", "alerted_at")
    )
    log = _Columns(info, settings.log_sheet, ("ts", "event", "status"))
    rows: Grid = []
    listed = list(types[:MAX_TYPES])
    for name in listed:
        row: dict[str, CellValue] = {"type": name}
        for status in STATUSES:
            row[status] = Formula(
                f"=COUNTIFS({q.whole('type')},{_equals(name)},"
                f"{q.whole('status')},{_literal(status)})"
            )
        rows.append(row)
    first, last = 2, 1 + len(listed)
    all_row = last + 1
    rows.append({"type": "all types", "about": "every row, whatever its type"})
    for status in STATUSES:
        rows[-1][status] = Formula(f"=COUNTIF({q.whole('status')},{_literal(status)})")
    rows.append(
        {
            "type": "other types",
            "about": "types not listed above (new since this dashboard was built): run "
            "`sheetq init --dashboard` again to list them",
        }
    )
    for status in STATUSES:
        col = at[status]
        listed_sum = f"-SUM({col}{first}:{col}{last})" if listed else ""
        rows[-1][status] = Formula(f"={col}{all_row}{listed_sum}")
    for offset, row in enumerate(rows):
        number = first + offset
        row["total"] = Formula(f"=SUM({at[STATUSES[0]]}{number}:{at[STATUSES[-1]]}{number})")
    if listed:
        rows[0]["about"] = (
            f"live counts of {quote(settings.queue_sheet)} by type and status: spreadsheet "
            "formulas, no sheetq run needed"
        )
    rows.append({})
    offsets = utc_offsets(info.time_zone, now)
    table_end = 1 + len(offsets)
    kpis = _kpis(info.time_zone, q, log, at, all_row, first + len(rows) + 1, table_end)
    rows.append({"type": "metric", STATUSES[0]: "value", "about": "about"})
    rows += kpis
    for index, (local, hours) in enumerate(offsets):
        while len(rows) <= index:
            rows.append({})
        rows[index][HEADER[-3]] = local.strftime("%Y-%m-%d %H:%M")
        rows[index][HEADER[-2]] = round((local - _SERIAL_EPOCH).total_seconds() / 86400, 6)
        rows[index][HEADER[-1]] = hours
    return rows


class _Columns:
    """Whole-column references to named columns of a worksheet, found by header name."""

    def __init__(self, info: WorkbookInfo, title: str, names: Sequence[str]) -> None:
        found = info.sheet(title).columns()
        missing = [n for n in names if n not in found]
        if missing:
            from sheetq.errors import SchemaError

            raise SchemaError(f"worksheet '{title}' lacks {', '.join(missing)}; run `sheetq init`")
        self.prefix = quote(title)
        self.letter = {n: column_letter(found[n]) for n in names}

    def whole(self, name: str) -> str:
        """``'Queue'!E:E`` — the column with its header (fine for COUNTIF on data values)."""
        return f"{self.prefix}!{self.letter[name]}:{self.letter[name]}"

    def data(self, name: str) -> str:
        """``'Queue'!E2:E`` — the column below its header (for FILTER, SORT, SUMPRODUCT)."""
        return f"{self.prefix}!{self.letter[name]}2:{self.letter[name]}"


def _kpis(
    time_zone: str,
    q: _Columns,
    log: _Columns,
    at: Mapping[str, str],
    all_row: int,
    start: int,
    table_end: int,
) -> Grid:
    """The metric rows, from sheet row ``start`` on; values in the first status column."""
    v = at[STATUSES[0]]
    table = f"${at[HEADER[-2]]}$2:${at[HEADER[-1]]}${table_end}"
    utc_now = f"(NOW()-VLOOKUP(NOW(),{table},2,TRUE)/24)"
    row = {name: start + i for i, name in enumerate(_KPI_NAMES)}
    status, created = q.data("status"), q.data("created_at")
    since = f"{v}{row['since']}"

    def finished(new_status: str, events: Sequence[str]) -> Formula:
        any_event = "+".join(f"({log.data('event')}={_literal(e)})" for e in events)
        return Formula(
            f"=SUMPRODUCT(({log.data('ts')}>={v}{row['ago']})*"
            f"({log.data('status')}={_literal(new_status)})*({any_event}))"
        )

    values: dict[str, tuple[CellValue, str]] = {
        "waiting": (
            Formula(f"={at['pending']}{all_row}+{at['retry']}{all_row}"),
            "pending + retry rows",
        ),
        "owed": (
            Formula(f'=COUNTIFS({q.whole("status")},"failed",{q.whole("alerted_at")},"")'),
            "failed rows whose Telegram alert is still owed (empty alerted_at)",
        ),
        "since": (
            Formula(
                f'=IFERROR(INDEX(SORT(FILTER({created},(({status}="pending")+'
                f'({status}="retry"))*({created}<>""))),1,1),"")'
            ),
            "created_at of the oldest pending or retry row (UTC)",
        ),
        "age": (
            Formula(
                f'=IF({since}="","",ROUND(({utc_now}-DATEVALUE(LEFT({since},10))'
                f"-TIMEVALUE(MID({since},12,8)))*24,1))"
            ),
            "how long the oldest waiting row has waited, in hours",
        ),
        "now": (
            Formula(f"=TEXT({utc_now},{_ISO_TEXT})"),
            f"NOW() in the spreadsheet's time zone ({time_zone or 'UTC'}) minus its UTC offset "
            f"(table in columns {at[HEADER[-3]]}–{at[HEADER[-1]]}, daylight saving included)",
        ),
        "ago": (
            Formula(f"=TEXT({utc_now}-1,{_ISO_TEXT})"),
            "the start of the 24-hour window below (UTC)",
        ),
        "done": (
            finished("done", ("done", "recovered")),
            "QueueLog rows since then: tasks that ended done",
        ),
        "failed": (
            finished("failed", ("failed", "expired", "recovered")),
            "QueueLog rows since then: tasks that ended failed (the dead-letter queue)",
        ),
        "rate24": (
            Formula(
                f'=IFERROR(ROUND(100*{v}{row["done"]}/({v}{row["done"]}+{v}{row["failed"]}),1),"")'
            ),
            "done ÷ (done + failed), last 24 hours, in %",
        ),
        "rate": (
            Formula(
                f"=IFERROR(ROUND(100*{at['done']}{all_row}/({at['done']}{all_row}+"
                f'{at["failed"]}{all_row}),1),"")'
            ),
            "done ÷ (done + failed) over every row of the Queue, in %",
        ),
        "unrecognised": (
            Formula(f'=MAX(0,COUNTIF({q.data("task_id")},"?*")-{at["total"]}{all_row})'),
            "tasks whose status is none of the six (sheetq leaves them alone)",
        ),
    }
    return [
        {"type": _KPI_NAMES[name], STATUSES[0]: value, "about": about}
        for name, (value, about) in values.items()
    ]


_KPI_NAMES = {
    "waiting": "waiting (pending + retry)",
    "owed": "failed, not yet alerted",
    "since": "oldest waiting since (UTC)",
    "age": "oldest waiting age (hours)",
    "now": "now (UTC)",
    "ago": "24 hours ago (UTC)",
    "done": "done in the last 24 h",
    "failed": "failed in the last 24 h",
    "rate24": "success rate, last 24 h (%)",
    "rate": "success rate, all rows (%)",
    "unrecognised": "unrecognised status",
}


def utc_offsets(zone_name: str, now: datetime) -> list[tuple[datetime, float]]:
    """The zone's UTC offsets: (local wall time from which it applies, hours east of UTC),
    from 1 January of the year before ``now`` to ``OFFSET_YEARS`` years after, in order."""
    tz = zone(zone_name)
    start = datetime(now.year - 1, 1, 1, tzinfo=UTC)
    end = datetime(now.year + OFFSET_YEARS, 1, 1, tzinfo=UTC)

    def hours(moment: datetime) -> float:
        delta = moment.astimezone(tz).utcoffset() or timedelta(0)
        return delta.total_seconds() / 3600

    def local(moment: datetime) -> datetime:
        return moment.astimezone(tz).replace(tzinfo=None)

    out = [(local(start), hours(start))]
    day, current = start, hours(start)
    while day < end:
        following = day + timedelta(days=1)
        if hours(following) != current:
            lo, hi = day, following  # the change is in this day: find it to the second
            while hi - lo > timedelta(seconds=1):
                mid = lo + (hi - lo) / 2
                lo, hi = (mid, hi) if hours(mid) == current else (lo, mid)
            change = hi.replace(second=0, microsecond=0)
            current = hours(following)
            out.append((local(change), current))
        day = following
    return out


# --- writing ----------------------------------------------------------------------------------


def _write_google(
    store: Store,
    settings: Settings,
    title: str,
    info: WorkbookInfo,
    types: Sequence[str],
    now: datetime,
) -> tuple[bool, int]:
    """Write the dashboard through the port; returns (worksheet created, formula count):
    ``ensure_worksheets`` (the labels row), the worksheet's header, the previous build's
    extent, then one atomic ``apply`` that writes every cell by header name and clears
    rows the previous build used beyond this one."""
    added = store.ensure_worksheets({title: HEADER})
    (old,) = store.read([Read(title, HEADER)])
    header = old.header
    letters = {n: column_letter(header.index(n)) for n in HEADER if n in header}
    rows = plan_dashboard(info, settings, types, now=now, letters=letters)
    used = max((r.number for r in old.rows if any(r.text(n) for n in HEADER)), default=1)
    changes = ChangeSet()
    for offset, row in enumerate(rows):
        values = {name: row.get(name, "") for name in HEADER}
        changes.updates.append(UpdateRow(title, None, 2 + offset, values))
    for number in range(2 + len(rows), used + 1):
        changes.updates.append(UpdateRow(title, None, number, dict.fromkeys(HEADER, "")))
    store.apply(changes)
    formulas = sum(isinstance(v, Formula) for row in rows for v in row.values())
    return title in added and len(added[title]) == len(HEADER), formulas
