"""The spreadsheet as a live mirror of a PostgreSQL queue (docs/design.md §12): pure planning.

A pass compares three things, each read once:

* **truth** — the tasks of the window in PostgreSQL (every open task: ``pending``,
  ``processing``, ``retry``, ``failed``; finished ones updated within ``[mirror]
  keep_finished``), as the §2 cell texts, in ``created_at`` order;
* **written** — what the mirror last wrote into each Queue row (``Written``: the status and
  owner cells, and a digest of every sheetq cell), kept in PostgreSQL (``sheetq_mirror``);
* **sheet** — one whole read of the sheetq columns of the Queue worksheet.

A cell that differs from what the mirror wrote was typed by a person (``read_edits``): the
two edits a manager may make flow back to PostgreSQL (``pending``/``retry`` over a
``failed``/``skipped`` row requeues the task, a new ``owner`` is saved); anything else is put
back. Then ``plan_write`` plans the one atomic write that makes the sheet equal PostgreSQL:
changed cells of rows by ``task_id`` (only the cells that differ), new tasks appended, rows
that left the window deleted, new log rows appended to QueueLog — split into writes of at
most ``MAX_WRITE_BYTES`` of request JSON. Managers' own columns are never read nor written.

Nothing here does I/O: ``sheetq.mirror_run`` reads and writes, ``sheetq.postgres.mirror``
holds the SQL.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, tzinfo

from sheetq.config import Settings
from sheetq.model import LOG_COLUMNS, QUEUE_COLUMNS, Event, Status, parse_priority
from sheetq.sheet.enqueue import append_bytes
from sheetq.sheet.plan import log_row
from sheetq.sheet.store import (
    AppendRow,
    CellValue,
    ChangeSet,
    DeleteRow,
    Snapshot,
    UpdateRow,
    cell_text,
)
from sheetq.times import format_ts, parse_ts

MAX_WRITE_BYTES = 9_000_000  # request JSON per write; Google refuses a body over 10,485,760
OPEN = ("pending", "processing", "retry", "failed")  # always in the mirror
_TASK_ID = QUEUE_COLUMNS.index("task_id")
_STATUS = QUEUE_COLUMNS.index("status")
_OWNER = QUEUE_COLUMNS.index("owner")
_PRIORITY = QUEUE_COLUMNS.index("priority")
_UPDATED = QUEUE_COLUMNS.index("updated_at")
_UPDATE_OVERHEAD = 160  # bytes of one updateCells request around its cells
_CELL = 34  # bytes of {"userEnteredValue": {"stringValue": ""}} and its comma

Texts = tuple[str, ...]  # a task's §2 cells as text, in QUEUE_COLUMNS order


@dataclass(frozen=True)
class Written:
    """What the mirror last wrote into a task's row: the ``status`` and ``owner`` cells and
    the ``digest`` of all its sheetq cells."""

    status: str
    owner: str
    digest: str


def digest(texts: Texts) -> str:
    """sha1 of a row's sheetq cells as text (what ``Written.digest`` holds)."""
    return hashlib.sha1("\x1f".join(texts).encode(), usedforsecurity=False).hexdigest()


def written_of(texts: Texts) -> Written:
    return Written(texts[_STATUS], texts[_OWNER], digest(texts))


def row_texts(values: Mapping[str, CellValue]) -> Texts:
    """A sheet row's sheetq cells as text (numbers without a needless ``.0``)."""
    return tuple([v if type(v) is str else cell_text(v) for v in map(values.get, QUEUE_COLUMNS)])


@dataclass(frozen=True)
class SheetRow:
    """A Queue row as read: its number, task id (stripped) and sheetq cells as text."""

    number: int
    task_id: str
    texts: Texts


def sheet_rows(sheet: Snapshot) -> list[SheetRow]:
    """The rows of a whole read that hold a task id, first occurrence of each id only (a
    row a person copied is left alone), with their cells as text: computed once a pass."""
    out: list[SheetRow] = []
    seen: set[str] = set()
    for row in sheet.rows:
        texts = row_texts(row.values)
        task_id = texts[_TASK_ID].strip()
        if task_id and task_id not in seen:
            seen.add(task_id)
            out.append(SheetRow(row.number, task_id, texts))
    return out


def cell_values(texts: Texts) -> dict[str, CellValue]:
    """The cells to write for a task: text, ``retry_count`` as a number (docs/design.md §2)."""
    out: dict[str, CellValue] = dict(zip(QUEUE_COLUMNS, texts, strict=True))
    if out["retry_count"] != "":
        out["retry_count"] = int(str(out["retry_count"]))
    return out


# --- a person's edits ------------------------------------------------------------------------


@dataclass
class Edits:
    """What people typed into sheetq's cells since the last pass.

    * ``requeue``: task id → the status it had (``failed``/``skipped``), to requeue;
    * ``owners``: task id → the owner typed;
    * ``priorities``: task id → the priority typed (docs/design.md §14);
    * ``warnings``: one line per row whose other typed cells are put back.
    """

    requeue: dict[str, str] = field(default_factory=dict)
    owners: dict[str, str] = field(default_factory=dict)
    priorities: dict[str, int] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)


def read_edits(
    sheet: Snapshot,
    truth: Mapping[str, Texts],
    written: Mapping[str, Written],
    rows: Sequence[SheetRow] | None = None,
) -> Edits:
    """The manager edits in ``sheet``: cells that differ from what the mirror last wrote
    (``written``; empty when it cannot be trusted, and then nothing flows back).

    ``pending``/``retry`` (any case, stray spaces) typed over a row written ``failed`` or
    ``skipped`` requeues it, unless the task in PostgreSQL is no longer in that status
    (running, or already requeued by ``sheetq requeue``): then it is put back. A changed
    ``owner`` is saved, and so is an integer typed into ``priority`` when it is the only
    other cell that differs from PostgreSQL (docs/design.md §14). Any other typed cell is
    put back, with a warning."""
    edits = Edits()
    for row in rows if rows is not None else sheet_rows(sheet):
        task_id = row.task_id
        last = written.get(task_id)
        if last is None or task_id not in truth:
            continue
        now = row.texts
        true = truth[task_id]
        if now == true or digest(now) == last.digest:
            continue  # as PostgreSQL has it, or as the mirror wrote it
        notes: list[str] = []
        typed_status = now[_STATUS]
        if typed_status != last.status:
            wanted = Status.parse(typed_status)
            if last.status in ("failed", "skipped") and wanted in (Status.PENDING, Status.RETRY):
                if true[_STATUS] == last.status:
                    edits.requeue[task_id] = last.status
                else:
                    notes.append(
                        f"status {typed_status.strip()!r} not applied: the task is "
                        f"{true[_STATUS]} now"
                    )
            elif wanted is None or wanted.value != last.status:
                notes.append(f"status {typed_status!r}")
        if now[_OWNER] != last.owner:
            edits.owners[task_id] = now[_OWNER].strip()
        others = list(now)
        others[_STATUS], others[_OWNER] = last.status, last.owner
        if digest(tuple(others)) != last.digest:
            changed = [
                name
                for i, name in enumerate(QUEUE_COLUMNS)
                if i not in (_STATUS, _OWNER) and now[i] != true[i]
            ]
            level = parse_priority(now[_PRIORITY])
            if changed == ["priority"] and level is not None:
                edits.priorities[task_id] = level
            elif changed:
                notes.append(", ".join(changed))
        if notes:
            edits.warnings.append(
                f"{sheet.worksheet} row {row.number} ({task_id}): {'; '.join(notes)} typed into "
                "sheetq's cells: put back (PostgreSQL is the truth; only pending/retry over a "
                "failed or skipped row, owner and an integer priority are applied)"
            )
    return edits


def plan_edits(
    edits: Edits,
    locked: Mapping[str, Texts],
    *,
    settings: Settings,
    now: datetime,
    run_id: str,
) -> tuple[ChangeSet, list[str], list[str], list[str]]:
    """The change set that applies ``edits`` in PostgreSQL, planned from the tasks as they
    are under a row lock (``locked``). A requeue applies only to a task still in the status
    the sheet showed; each is logged ``requeued`` ``(was failed)``. Returns the change set
    and the task ids requeued, whose owner was saved, and whose priority was saved."""
    changes = ChangeSet()
    stamp = format_ts(now)
    requeued: list[str] = []
    for task_id, was in edits.requeue.items():
        texts = locked.get(task_id)
        if texts is None or texts[_STATUS] != was:
            continue
        changes.updates.append(
            UpdateRow(
                settings.queue_sheet,
                task_id,
                0,
                {
                    "status": str(Status.PENDING),
                    "next_retry_at": stamp,  # due now; max_age counts from the redrive
                    "error_class": "",
                    "alerted_at": "",
                    "lease_owner": "",
                    "lease_until": "",
                    "updated_at": stamp,
                },
            )
        )
        changes.appends.append(
            log_row(
                now,
                task_id,
                texts[QUEUE_COLUMNS.index("type")],
                Event.REQUEUED,
                Status.PENDING,
                int(texts[QUEUE_COLUMNS.index("retry_count")] or 0),
                f"requeued in the spreadsheet (was {was})",
                run_id,
                worksheet=settings.log_sheet,
            )
        )
        requeued.append(task_id)
    owners: list[str] = []
    levels: list[str] = []
    for task_id, owner in edits.owners.items():
        texts = locked.get(task_id)
        if texts is None or texts[_OWNER] == owner:
            continue
        changes.updates.append(
            UpdateRow(settings.queue_sheet, task_id, 0, {"owner": owner, "updated_at": stamp})
        )
        owners.append(task_id)
    for task_id, level in edits.priorities.items():
        texts = locked.get(task_id)
        if texts is None or texts[_PRIORITY] == str(level):
            continue
        changes.updates.append(
            UpdateRow(settings.queue_sheet, task_id, 0, {"priority": level, "updated_at": stamp})
        )
        levels.append(task_id)
    return changes, requeued, owners, levels


# --- the write ---------------------------------------------------------------------------------


@dataclass
class Chunk:
    """One atomic write of a pass and what PostgreSQL records once it landed: ``record``
    (task id → what its row now holds), ``forget`` (rows deleted), ``last_log_id`` (the
    newest log row it appends, else ``None``)."""

    changes: ChangeSet = field(default_factory=ChangeSet)
    record: dict[str, Written] = field(default_factory=dict)
    forget: list[str] = field(default_factory=list)
    last_log_id: int | None = None
    size: int = 0
    updated: int = 0
    appended: int = 0
    deleted: int = 0
    log_appended: int = 0


@dataclass
class WritePlan:
    """The writes of a pass (empty: nothing to write) and the records PostgreSQL needs even
    without one (``record``: rows already as PostgreSQL has them but recorded otherwise;
    ``forget``: rows the sheet no longer has)."""

    chunks: list[Chunk]
    record: dict[str, Written]
    forget: list[str]
    put_back: int


def _put_back(now: Texts, true: Texts, last: Written) -> bool:
    """Whether a row being rewritten holds cells a person typed that PostgreSQL does not
    take: any typed cell but ``status``/``owner``, or a status or owner that differs from
    PostgreSQL's after the pass applied the edits (an applied requeue or owner is not a
    put-back, nor is the write of the ``updated_at`` it changed)."""
    if digest(now) == last.digest:
        return False  # as the mirror wrote it: PostgreSQL changed, nobody typed
    others = list(now)
    others[_STATUS], others[_OWNER] = last.status, last.owner
    if digest(tuple(others)) != last.digest and any(
        now[i] != true[i] for i in range(len(now)) if i not in (_STATUS, _OWNER, _UPDATED)
    ):
        return True  # (a typed cell PostgreSQL now holds, a saved priority, is no put-back)
    if now[_STATUS] != last.status:
        wanted = Status.parse(now[_STATUS])
        requeued = (
            last.status in ("failed", "skipped")
            and wanted in (Status.PENDING, Status.RETRY)
            and true[_STATUS] == Status.PENDING.value
        )
        if not requeued and (wanted is None or wanted.value != true[_STATUS]):
            return True
    return now[_OWNER] != last.owner and now[_OWNER].strip() != true[_OWNER]


def plan_write(
    sheet: Snapshot,
    truth: Mapping[str, Texts],
    written: Mapping[str, Written],
    logs: Sequence[tuple[int, Mapping[str, CellValue]]],
    *,
    settings: Settings,
    known: frozenset[str] | set[str] = frozenset(),
    max_bytes: int = MAX_WRITE_BYTES,
    rows: Sequence[SheetRow] | None = None,
) -> WritePlan:
    """The writes that make the sheet equal PostgreSQL (see the module docstring).

    ``known``: task ids found in PostgreSQL outside the window (finished long ago, archived):
    their rows are removed like rows the mirror wrote. A row whose task id sheetq does not
    know (a manager's own row) is left alone. ``logs``: (id, QueueLog cells) not yet mirrored,
    in id order."""
    queue, log = settings.queue_sheet, settings.log_sheet
    width = len(sheet.header) or len(QUEUE_COLUMNS)
    chunks = [Chunk()]
    record: dict[str, Written] = {}
    forget: list[str] = []
    put_back = 0

    def room(size: int) -> Chunk:
        chunk = chunks[-1]
        if chunk.size and chunk.size + size > max_bytes:
            chunk = Chunk()
            chunks.append(chunk)
        chunk.size += size
        return chunk

    seen: set[str] = set()
    for row in rows if rows is not None else sheet_rows(sheet):
        task_id = row.task_id
        seen.add(task_id)
        true = truth.get(task_id)
        if true is None:
            if task_id in written or task_id in known:
                chunk = room(_UPDATE_OVERHEAD)
                chunk.changes.deletes.append(DeleteRow(queue, task_id, row.number))
                chunk.forget.append(task_id)
                chunk.deleted += 1
            continue
        now = row.texts
        last = written.get(task_id)
        if now == true:
            mine = written_of(true)
            if last != mine:
                record[task_id] = mine
            continue
        changed = [name for i, name in enumerate(QUEUE_COLUMNS) if now[i] != true[i]]
        if last is not None and _put_back(now, true, last):
            put_back += 1
        values = cell_values(true)
        cells = {name: values[name] for name in changed}
        chunk = room(_UPDATE_OVERHEAD + sum(_CELL + len(json.dumps(v)) for v in cells.values()))
        chunk.changes.updates.append(UpdateRow(queue, task_id, row.number, cells))
        chunk.record[task_id] = written_of(true)
        chunk.updated += 1
    for task_id in written:
        if task_id not in seen and task_id not in truth:
            forget.append(task_id)  # gone from the sheet and from the window
    for task_id, true in truth.items():
        if task_id in seen:
            continue
        values = cell_values(true)
        chunk = room(append_bytes(values, width))
        chunk.changes.appends.append(AppendRow(queue, values))
        chunk.record[task_id] = written_of(true)
        chunk.appended += 1
    for log_id, logged in logs:
        line: dict[str, CellValue] = {name: logged.get(name, "") for name in LOG_COLUMNS}
        chunk = room(append_bytes(line, len(LOG_COLUMNS)))
        chunk.changes.appends.append(AppendRow(log, line))
        chunk.last_log_id = log_id
        chunk.log_appended += 1
    return WritePlan([c for c in chunks if c.changes], record, forget, put_back)


# --- the first pass after `sheetq migrate` ------------------------------------------------------

LogIdentity = tuple[str, str, str]  # (task_id, event, ts as sheetq writes it)


def _identity(values: Mapping[str, CellValue], tz: tzinfo, locale: str) -> LogIdentity:
    """A log row's identity: its task, event and time. The time is normalised as ``migrate``
    stores it (a time typed in the spreadsheet's locale or time zone reads as the same
    moment); a cell that is no time keeps its text."""
    raw = values.get("ts")
    moment = parse_ts(raw, tz, locale)
    ts = format_ts(moment) if isinstance(moment, datetime) else cell_text(raw).strip()
    return (
        cell_text(values.get("task_id")).strip(),
        cell_text(values.get("event")).strip(),
        ts,
    )


@dataclass
class Recognised:
    """The log rows a first pass appends (``logs``: (id, cells), oldest first; the last
    one's id is ``last_id``'s when rows already present follow it) and the rows it found
    already in QueueLog (``present``). ``last_id``: the newest log id looked at (``None``:
    none), which the pass may record as mirrored once what it appends has landed."""

    logs: list[tuple[int, Mapping[str, CellValue]]]
    present: int
    last_id: int | None


class LogRecogniser:
    """Which log rows of PostgreSQL QueueLog already holds: the rows ``sheetq migrate``
    copied from this spreadsheet (docs/design.md §12), recognised by task, event and time.
    A multiset: two identical rows in QueueLog (two duplicates enqueued in one second)
    stand for two rows in PostgreSQL, no more."""

    def __init__(self, log: Snapshot, tz: tzinfo, locale: str) -> None:
        self._left: Counter[LogIdentity] = Counter(
            _identity(row.values, tz, locale) for row in log.rows
        )
        self._left.pop(("", "", ""), None)  # blank rows
        self.logs: list[tuple[int, Mapping[str, CellValue]]] = []
        self.present = 0
        self.last_id: int | None = None

    def feed(self, page: Sequence[tuple[int, Mapping[str, CellValue]]], limit: int) -> bool:
        """Look at a page of log rows (id order); whether the page was looked at whole with
        fewer than ``limit`` rows to append (then the next page may be looked at too)."""
        for log_id, values in page:
            if len(self.logs) >= limit:
                return False
            self.last_id = log_id
            key = _identity(values, UTC, "en_US")  # PostgreSQL's times: sheetq's ``…Z``
            if self._left[key] > 0:
                self._left[key] -= 1
                self.present += 1
            else:
                self.logs.append((log_id, values))
        return len(self.logs) < limit

    def result(self) -> Recognised:
        """The rows to append; the last one carries the newest id looked at, so that rows
        found present after it count as mirrored once it has landed."""
        logs = list(self.logs)
        if logs and self.last_id is not None:
            logs[-1] = (self.last_id, logs[-1][1])
        return Recognised(logs, self.present, self.last_id)


def token_for(last_log_id: int, nonce: int) -> str:
    """The mirror's version token, written into the sheet with each write (a named range's
    id): 15 digits of the last log id mirrored, then 6 digits of nonce."""
    return f"{last_log_id:015d}{nonce % 10**6:06d}"


def token_log_id(token: str | None) -> int | None:
    """The last log id a token says was mirrored (``None``: no token, or not one of ours)."""
    if not token or len(token) != 21 or not token.isdigit():
        return None
    return int(token[:15])


def range_name(queue_sheet: str) -> str:
    """The named range that carries the mirror's token (a valid Sheets range name)."""
    return "sheetq_mirror_" + hashlib.sha256(queue_sheet.encode()).hexdigest()[:12]
