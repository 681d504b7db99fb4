"""Planning ``sheetq migrate``: a sheet or local queue read whole, checked and converted into the
rows PostgreSQL stores (docs/design.md §11 "Moving a queue"). Pure: no I/O, no driver.

Two steps, each a function (the sheet engine first refuses while a run holds the queue,
``SheetQueue.export``):

* ``prepare`` converts every row as the sheet engine reads it (status case- and
  space-insensitive, times typed by a person in ISO or locale form in the spreadsheet's time
  zone, counters that came back as numbers) into the §2 cell form the PostgreSQL codec
  stores: times as ``…Z`` text, counters as integers, statuses in sheetq's exact words. A
  cell that cannot be converted (a status nobody knows, a time that is not a time, a
  payload that is not a JSON object, a counter that is not a whole number ≥ 0, a repeated
  task id) refuses its row, with the worksheet, row number, column and value; the other
  rows are kept.
* ``settle_keys`` decides who holds each idempotency key (docs/design.md §4): a key already held
  in the destination stays with its holder; else the earliest ``created_at`` (then
  ``task_id``) of the tasks sharing it wins. A waiting or processing loser becomes
  ``skipped`` / ``duplicate`` with ``last_error`` naming the winner and a ``skipped`` log
  row, exactly as ``queue.plan_batch`` treats two racing enqueues; a finished loser keeps
  its status (it ran, or was settled, already).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, tzinfo
from typing import Any

from sheetq.config import Settings
from sheetq.errors import InputError
from sheetq.idempotency import parse_payload
from sheetq.model import (
    LOG_COLUMNS,
    QUEUE_COLUMNS,
    CellValue,
    ErrorClass,
    Event,
    Row,
    Status,
    cell_text,
)
from sheetq.policy import log_values
from sheetq.times import Unparseable, format_ts, parse_ts

TASK_TIMES = ("created_at", "next_retry_at", "updated_at", "lease_until", "alerted_at")
SHOWN_CHARS = 80  # a refused value is shown up to this many characters


@dataclass(frozen=True)
class Refusal:
    """A source row not copied: where it is, which cell, and why."""

    worksheet: str
    task_id: str
    row: int
    column: str
    value: str
    reason: str

    def as_json(self) -> dict[str, Any]:
        return {
            "worksheet": self.worksheet,
            "task_id": self.task_id,
            "row": self.row,
            "column": self.column,
            "value": self.value,
            "reason": self.reason,
        }


@dataclass
class SourceTask:
    """A task row converted: ``values`` holds every §2 column in the stored form."""

    worksheet: str
    row: int
    values: dict[str, CellValue]
    created: datetime

    @property
    def task_id(self) -> str:
        return str(self.values["task_id"])

    @property
    def key(self) -> str:
        return str(self.values["idempotency_key"])

    def order(self) -> tuple[datetime, str]:
        """Oldest first, as ``QueueRow.order``: ``created_at``, then ``task_id``."""
        return (self.created, self.task_id)


@dataclass
class Source:
    """What ``prepare`` made of the worksheets."""

    tasks: list[SourceTask] = field(default_factory=list)
    archive: list[SourceTask] = field(default_factory=list)
    log: list[dict[str, CellValue]] = field(default_factory=list)
    log_archive: list[dict[str, CellValue]] = field(default_factory=list)
    refused: list[Refusal] = field(default_factory=list)

    def keys(self) -> list[str]:
        """Every idempotency key the copied tasks carry (live and archived)."""
        return sorted({t.key for t in (*self.tasks, *self.archive) if t.key})


@dataclass(frozen=True)
class Duplicate:
    """A task that lost its key to ``winner``; ``was`` → ``now`` is its status change."""

    key: str
    task_id: str
    winner: str
    was: str
    now: str

    def as_json(self) -> dict[str, Any]:
        return {
            "idempotency_key": self.key,
            "task_id": self.task_id,
            "winner": self.winner,
            "was": self.was,
            "now": self.now,
        }


@dataclass
class KeyPlan:
    """``keys``: (key, task id, payload hash) to record for winners in the source;
    ``logs``: the ``skipped`` log rows of losers, by task id (written only if that task is
    copied by this run)."""

    keys: list[tuple[str, str, str]] = field(default_factory=list)
    duplicates: list[Duplicate] = field(default_factory=list)
    logs: dict[str, dict[str, CellValue]] = field(default_factory=dict)


# --- converting rows ------------------------------------------------------------------


class _Refused(Exception):
    def __init__(self, column: str, value: CellValue, reason: str) -> None:
        super().__init__(reason)
        self.column = column
        self.value = value
        self.reason = reason


def _shown(value: CellValue) -> str:
    text = cell_text(value)
    return text if len(text) <= SHOWN_CHARS else text[: SHOWN_CHARS - 1] + "…"


def _time(values: Mapping[str, CellValue], column: str, tz: tzinfo, locale: str) -> str:
    raw = values.get(column)
    moment = parse_ts(raw, tz, locale)
    if moment is None:
        return ""
    if isinstance(moment, Unparseable):
        raise _Refused(column, raw, "not a time (ISO 8601 or the spreadsheet's locale form)")
    return format_ts(moment)


def _count(values: Mapping[str, CellValue], column: str, *, empty: int | None) -> int | str:
    raw = values.get(column)
    text = cell_text(raw).strip()
    if not text:
        return "" if empty is None else empty
    if isinstance(raw, bool):
        raise _Refused(column, raw, "not a whole number")
    try:
        number = float(text)
    except ValueError:
        raise _Refused(column, raw, "not a whole number") from None
    if not number.is_integer() or number < 0:
        raise _Refused(column, raw, "not a whole number ≥ 0")
    return int(number)


def _task(
    values: Mapping[str, CellValue], tz: tzinfo, locale: str
) -> tuple[dict[str, Any], datetime]:
    out: dict[str, Any] = {c: cell_text(values.get(c)).strip() for c in QUEUE_COLUMNS}
    for column in ("payload_json", "last_error", "result"):
        out[column] = cell_text(values.get(column))  # data: kept exactly as written
    status = Status.parse(values.get("status"))
    if status is None:
        raise _Refused("status", values.get("status"), "not a status sheetq knows")
    out["status"] = str(status)
    for column in TASK_TIMES:
        out[column] = _time(values, column, tz, locale)
    if not out["created_at"]:
        raise _Refused(
            "created_at", values.get("created_at"), "empty: a task needs its creation time"
        )
    out["updated_at"] = out["updated_at"] or out["created_at"]
    out["retry_count"] = _count(values, "retry_count", empty=0)
    try:
        parse_payload(out["payload_json"], where="payload_json")
    except InputError as exc:
        raise _Refused("payload_json", values.get("payload_json"), exc.message) from None
    created = parse_ts(out["created_at"])
    assert isinstance(created, datetime)
    return out, created


def _log(values: Mapping[str, CellValue], tz: tzinfo, locale: str) -> dict[str, CellValue]:
    out: dict[str, CellValue] = {c: cell_text(values.get(c)) for c in LOG_COLUMNS}
    for column in ("task_id", "type", "event", "status", "run_id"):
        out[column] = cell_text(values.get(column)).strip()
    out["ts"] = _time(values, "ts", tz, locale)
    if not out["ts"]:
        raise _Refused("ts", values.get("ts"), "empty: a log row needs its time")
    out["retry_count"] = _count(values, "retry_count", empty=0)
    out["duration_ms"] = _count(values, "duration_ms", empty=None)
    return out


def _blank(values: Mapping[str, CellValue], columns: Sequence[str]) -> bool:
    return not any(cell_text(values.get(c)).strip() for c in columns)


def prepare(
    *,
    queue: tuple[str, Sequence[Row]],
    log: tuple[str, Sequence[Row]],
    archive: tuple[str, Sequence[Row]] | None,
    log_archive: tuple[str, Sequence[Row]] | None,
    tz: tzinfo,
    locale: str,
) -> Source:
    """Convert the worksheets (each ``(title, rows)``; ``None``: absent) into stored rows,
    refusing per row what cannot be converted. Empty rows are left out; a row with sheetq
    cells but no ``task_id`` is refused (run ``sheetq init`` to adopt it)."""
    source = Source()
    seen: dict[str, tuple[str, int]] = {}
    for sheet, target in ((queue, source.tasks), (archive, source.archive)):
        if sheet is None:
            continue
        title, rows = sheet
        for raw in rows:
            task_id = cell_text(raw.values.get("task_id")).strip()
            if not task_id:
                if not _blank(raw.values, ("type", "payload_json", "status", "created_at")):
                    source.refused.append(
                        Refusal(
                            title,
                            "",
                            raw.number,
                            "task_id",
                            "",
                            "empty: run `sheetq init` "
                            "to adopt the row (it fills task_id), then migrate again",
                        )
                    )
                continue
            if task_id in seen:
                where, number = seen[task_id]
                source.refused.append(
                    Refusal(
                        title,
                        task_id,
                        raw.number,
                        "task_id",
                        _shown(task_id),
                        f"the same task id is on row {number} of {where}",
                    )
                )
                continue
            try:
                values, created = _task(raw.values, tz, locale)
            except _Refused as exc:
                source.refused.append(
                    Refusal(title, task_id, raw.number, exc.column, _shown(exc.value), exc.reason)
                )
                continue
            seen[task_id] = (title, raw.number)
            target.append(SourceTask(title, raw.number, values, created))
    for sheet, target_log in ((log, source.log), (log_archive, source.log_archive)):
        if sheet is None:
            continue
        title, rows = sheet
        for raw in rows:
            if _blank(raw.values, LOG_COLUMNS):
                continue
            try:
                target_log.append(_log(raw.values, tz, locale))
            except _Refused as exc:
                source.refused.append(
                    Refusal(
                        title,
                        cell_text(raw.values.get("task_id")).strip(),
                        raw.number,
                        exc.column,
                        _shown(exc.value),
                        exc.reason,
                    )
                )
    return source


# --- keys -----------------------------------------------------------------------------


def settle_keys(
    source: Source,
    held: Mapping[str, str],
    *,
    settings: Settings,
    now: datetime,
    run_id: str,
) -> KeyPlan:
    """Decide each key's winner (``held``: key → task id already holding it in the
    destination) and turn waiting or processing losers into ``skipped`` / ``duplicate``.
    Changes the losers' ``values`` in place."""
    plan = KeyPlan()
    by_key: dict[str, list[SourceTask]] = {}
    for task in (*source.tasks, *source.archive):
        if task.key:
            by_key.setdefault(task.key, []).append(task)
    stamp = format_ts(now)
    for key, tasks in by_key.items():
        tasks.sort(key=SourceTask.order)
        winner = held.get(key) or tasks[0].task_id
        for task in tasks:
            if task.task_id == winner:
                plan.keys.append((key, winner, str(task.values["payload_hash"])))
                continue
            was = str(task.values["status"])
            if Status(was) in (Status.PENDING, Status.RETRY, Status.PROCESSING):
                message = f"duplicate of {winner} (same idempotency key, created earlier)"
                task.values.update(
                    status=str(Status.SKIPPED),
                    error_class=str(ErrorClass.DUPLICATE),
                    last_error=message,
                    next_retry_at="",
                    lease_owner="",
                    lease_until="",
                    updated_at=stamp,
                )
                plan.logs[task.task_id] = log_values(
                    now,
                    task.task_id,
                    str(task.values["type"]),
                    Event.SKIPPED,
                    Status.SKIPPED,
                    int(task.values["retry_count"] or 0),
                    message,
                    run_id,
                )
            plan.duplicates.append(
                Duplicate(key, task.task_id, winner, was, str(task.values["status"]))
            )
    return plan


# --- what the destination wrote ---------------------------------------------------------


@dataclass
class Copied:
    """Counts per kind of row: ``tasks``, ``log``, ``archive``, ``log_archive``."""

    tasks: int = 0
    log: int = 0
    archive: int = 0
    log_archive: int = 0

    def as_json(self) -> dict[str, int]:
        return {
            "tasks": self.tasks,
            "log": self.log,
            "archive": self.archive,
            "log_archive": self.log_archive,
        }


@dataclass
class Written:
    """What one migration wrote: ``copied`` and ``already_present`` counts, the schema
    migrations it ran, and the key decisions for the tasks it copied."""

    copied: Copied = field(default_factory=Copied)
    already_present: Copied = field(default_factory=Copied)
    schema_lines: list[str] = field(default_factory=list)
    keys: KeyPlan = field(default_factory=KeyPlan)
