"""``sheetq stats``: throughput and failure numbers from QueueLog (docs/design.md §8). Pure.

The window is every QueueLog row with ``ts`` at or after ``since`` (rows stamped later
than now are counted too: the log is the record). Counts are of **transitions**, read
from each row's ``event`` and ``status``:

* ``enqueued``, ``duplicate`` (duplicates suppressed), ``conflict``, ``claimed``
  (attempts started), ``requeued``, ``archived``: rows of that event;
* ``done``: ``done`` rows, and ``recovered`` rows whose status is ``done`` (a reconcile
  check found the lost outcome);
* ``retry``: ``retry`` rows, and ``recovered`` rows whose status is ``retry`` (a lost
  outcome retried);
* ``failed`` (entries into the dead-letter queue): ``failed`` and ``expired`` rows, and
  ``recovered`` rows whose status is ``failed``; ``expired`` is also given on its own;
* ``skipped``: ``skipped`` rows.

A ``done``/``retry``/``failed``/``skipped`` row whose status is not its event is a late
outcome that PostgreSQL refused (its lease had run out and another run recovered the task,
docs/design.md §11): it records what the attempt said, not a transition, and counts nowhere.

Rates are floats in 0..1, ``None`` without data: ``success_rate`` = done / finished and
``dead_letter_rate`` = failed / finished, where finished = done + failed + skipped;
``retry_rate`` = retry / claimed.

Time to done (seconds): for each task whose first ``done`` in the window is there, from
its ``enqueued`` row (which may be older than the window) to that ``done``; tasks without
an ``enqueued`` row (adopted by ``init``) are left out. Percentiles use the
**nearest-rank** method: the smallest value with at least p % of the values at or below
it (always a value that occurred).

Failures by error class: QueueLog has no ``error_class`` column. An ``expired`` row is
``expired``; a ``failed`` row's message starts with its class as sheetq writes it
(``permanent: exit 65 …``, ``logged_class``), so each failure counts under its own class,
even after a requeue (a lost outcome's ``recovered`` row too: ``unknown: …``). Otherwise (a
message a person changed, a log written before this rule) the class is the task's row's
``error_class`` — in Queue, else in QueueArchive — while that row is still ``failed`` (the
row holds the class of its latest failure). A row that has moved on (requeued, done since)
or is gone no longer records why that failure happened: it counts as ``unrecorded``.

``oldest_waiting_seconds``: from Queue, the largest now − ``created_at`` over
``pending``/``retry`` rows.

Fast on a 200,000-row log: sheetq's own ``...Z`` timestamps are compared as text (ISO
text sorts by time) and only the timestamps of done tasks are turned into datetimes.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta, tzinfo
from typing import Any

from sheetq.model import WAITING, CellValue, ErrorClass, Row, Status
from sheetq.times import format_ts, parse_ts

LOG_COLUMNS = ("ts", "task_id", "type", "event", "status", "duration_ms", "message")
QUEUE_COLUMNS = ("task_id", "created_at", "type", "status", "error_class")
ARCHIVE_COLUMNS = ("task_id", "status", "error_class")
UNRECORDED = "unrecorded"
_WAITING_TEXT = frozenset(str(s) for s in WAITING)
_CLASSES = frozenset(str(c) for c in ErrorClass)
_OTHER_TEXT = frozenset(str(s) for s in Status if s not in WAITING)
_OUTCOMES = frozenset({"done", "retry", "failed", "skipped"})
_SIMPLE = frozenset({"enqueued", "duplicate", "conflict", "claimed", "skipped", "requeued"})
_BLOCKS = " ▁▂▃▄▅▆▇█"


@dataclass(frozen=True)
class Sample:
    """What ``stats`` reports of a set of measurements: how many there are and their
    nearest-rank p50 and p95 (``None`` when there are none). Units are the caller's
    (seconds for enqueue-to-done, milliseconds for handler durations)."""

    count: int
    p50: float | None
    p95: float | None

    @classmethod
    def of(cls, values: Sequence[float]) -> Sample:
        """The summary of ``values`` (any order)."""
        return cls(len(values), percentile(values, 50), percentile(values, 95))


@dataclass
class Stats:
    """The numbers of one window. Durations are seconds; ``by_hour`` maps the hour's ISO
    start (UTC) to its ``done`` and ``failed`` transition counts."""

    since: datetime
    now: datetime
    enqueued: int = 0
    duplicate: int = 0
    conflict: int = 0
    claimed: int = 0
    done: int = 0
    retry: int = 0
    failed: int = 0
    skipped: int = 0
    expired: int = 0
    recovered: int = 0
    requeued: int = 0
    archived: int = 0
    to_done: Sample = field(default_factory=lambda: Sample(0, None, None))
    handler_ms: Sample = field(default_factory=lambda: Sample(0, None, None))
    oldest_waiting: float | None = None
    failed_by_error_class: Counter[str] = field(default_factory=Counter)
    by_hour: dict[str, Counter[str]] = field(default_factory=dict)
    unreadable_ts: int = 0

    @property
    def finished(self) -> int:
        return self.done + self.failed + self.skipped

    @property
    def success_rate(self) -> float | None:
        return self.done / self.finished if self.finished else None

    @property
    def dead_letter_rate(self) -> float | None:
        return self.failed / self.finished if self.finished else None

    @property
    def retry_rate(self) -> float | None:
        return self.retry / self.claimed if self.claimed else None

    def as_json(self) -> dict[str, Any]:
        """The ``--json`` document (docs/design.md §8 keys first, then extras)."""
        return {
            "since": format_ts(self.since),
            "enqueued": self.enqueued,
            "duplicate": self.duplicate,
            "conflict": self.conflict,
            "done": self.done,
            "retry": self.retry,
            "failed": self.failed,
            "success_rate": self.success_rate,
            "dead_letter_rate": self.dead_letter_rate,
            "p50_seconds": self.to_done.p50,
            "p95_seconds": self.to_done.p95,
            "oldest_waiting_seconds": None
            if self.oldest_waiting is None
            else round(self.oldest_waiting),
            "failed_by_error_class": dict(sorted(self.failed_by_error_class.items())),
            "now": format_ts(self.now),
            "window_seconds": round((self.now - self.since).total_seconds()),
            "claimed": self.claimed,
            "skipped": self.skipped,
            "expired": self.expired,
            "recovered": self.recovered,
            "requeued": self.requeued,
            "archived": self.archived,
            "finished": self.finished,
            "retry_rate": self.retry_rate,
            "done_with_time": self.to_done.count,
            "handler_p50_ms": self.handler_ms.p50,
            "handler_p95_ms": self.handler_ms.p95,
            "by_hour": {hour: dict(c) for hour, c in sorted(self.by_hour.items())},
            "unreadable_ts": self.unreadable_ts,
        }


def percentile(values: Sequence[float], p: float) -> float | None:
    """Nearest-rank percentile: the ⌈p/100 · n⌉-th smallest value; ``None`` when empty."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(p / 100 * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


def _text(value: CellValue) -> str:
    if type(value) is str:
        return value.strip()
    if value is None:
        return ""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value).strip()


def _as_key(value: CellValue, tz: tzinfo, locale: str) -> str | None:
    """A timestamp cell in sheetq's own ``YYYY-MM-DDTHH:MM:SSZ`` form; ``None`` if empty or
    not a time."""
    moment = parse_ts(value, tz, locale)
    return format_ts(moment) if isinstance(moment, datetime) else None


def _moment(key: str) -> datetime:
    return datetime.fromisoformat(key)


def compute(
    log_rows: Iterable[Row],
    queue_rows: Iterable[Row],
    archive_rows: Iterable[Row] = (),
    *,
    since: datetime,
    now: datetime,
    types: Collection[str] = (),
    tz: tzinfo = UTC,
    locale: str = "en_US",
) -> Stats:
    """The stats of the window ``since``..``now`` (see the module docstring).

    ``log_rows`` need ``LOG_COLUMNS``; ``queue_rows`` ``QUEUE_COLUMNS``; ``archive_rows``
    ``ARCHIVE_COLUMNS``. ``types``: only these task types (all when empty).
    """
    stats = Stats(since=since, now=now)
    start = format_ts(since)
    wanted = set(types)
    enqueued_at: dict[str, str] = {}
    done_at: dict[str, str] = {}
    failures: list[str] = []  # task ids of failures other than expiry
    handler_ms: list[int] = []
    to_done: list[int] = []
    events: Counter[str] = Counter()
    for raw in log_rows:
        values = raw.values
        ts = values.get("ts")
        # sheetq's own form is compared as text; anything else is parsed (rare)
        if type(ts) is str and len(ts) == 20 and ts[19] == "Z" and ts[10] == "T":
            key = ts
        else:
            parsed = _as_key(ts, tz, locale)
            if parsed is None:
                if ts not in (None, ""):
                    stats.unreadable_ts += 1
                continue
            key = parsed
        if wanted and _text(values.get("type")) not in wanted:
            continue
        event = values.get("event")
        if type(event) is not str:
            event = _text(event)
        if event == "enqueued":
            task = _text(values.get("task_id"))
            earlier = enqueued_at.get(task)
            if earlier is None or key < earlier:
                enqueued_at[task] = key
        if key < start:
            continue
        if event in _OUTCOMES and _text(values.get("status")).lower() != event:
            continue  # a late outcome refused after its lease ran out (§11): not a transition
        events[event] += 1
        if event in _SIMPLE:
            continue
        outcome = event
        if event == "recovered":
            outcome = _text(values.get("status")).lower()
        elif event == "expired":
            outcome = "failed"
        if outcome == "done":
            task = _text(values.get("task_id"))
            first = done_at.get(task)
            if first is None or key < first:
                done_at[task] = key
            if event == "done":
                duration = values.get("duration_ms")
                if isinstance(duration, int | float) and not isinstance(duration, bool):
                    handler_ms.append(int(duration))
            stats.done += 1
        elif outcome == "failed":
            logged = "expired" if event == "expired" else logged_class(values.get("message"))
            if logged:
                stats.failed_by_error_class[logged] += 1
            else:
                failures.append(_text(values.get("task_id")))
            stats.failed += 1
        elif outcome == "retry":
            stats.retry += 1
            continue
        else:
            continue
        stats.by_hour.setdefault(key[:13] + ":00:00Z", Counter())[outcome] += 1
    stats.enqueued = events["enqueued"]
    stats.duplicate = events["duplicate"]
    stats.conflict = events["conflict"]
    stats.claimed = events["claimed"]
    stats.skipped = events["skipped"]
    stats.expired = events["expired"]
    stats.recovered = events["recovered"]
    stats.requeued = events["requeued"]
    stats.archived = events["archived"]
    for task, finished in done_at.items():
        begun = enqueued_at.get(task)
        if begun is not None and begun <= finished:
            delta = _moment(finished) - _moment(begun)
            to_done.append(int(delta.total_seconds()))
    stats.to_done = Sample.of(to_done)
    stats.handler_ms = Sample.of(handler_ms)
    queue = list(queue_rows)
    classes = _error_classes(set(failures), queue, archive_rows)
    for task in failures:
        stats.failed_by_error_class[classes.get(task) or UNRECORDED] += 1
    stats.oldest_waiting = _oldest_waiting(queue, now, wanted, tz, locale)
    return stats


def logged_class(message: CellValue) -> str:
    """The error class a QueueLog message starts with (``permanent: exit 65 …``:
    ``permanent``), as ``sheetq.policy.outcome_message`` writes a failure's; ``""`` when it
    starts with none. PostgreSQL's ``stats_failure_classes`` reads it the same way."""
    head, colon, _ = _text(message).partition(": ")
    return head if colon and head in _CLASSES else ""


def _error_classes(
    needed: set[str], queue: Iterable[Row], archive: Iterable[Row]
) -> dict[str, str]:
    """task_id → error class of its row while that row is ``failed`` (Queue first)."""
    found: dict[str, str] = {}
    seen: set[str] = set()
    if not needed:
        return found
    for rows in (queue, archive):
        for raw in rows:
            task = _text(raw.values.get("task_id"))
            if task not in needed or task in seen:
                continue
            seen.add(task)
            if Status.parse(raw.values.get("status")) is Status.FAILED:
                error_class = _text(raw.values.get("error_class")).lower()
                if error_class:
                    found[task] = error_class
    return found


def _oldest_waiting(
    queue: Iterable[Row], now: datetime, types: Collection[str], tz: tzinfo, locale: str
) -> float | None:
    oldest: float | None = None
    for raw in queue:
        values = raw.values
        status = values.get("status")
        if status not in _WAITING_TEXT and (
            status in _OTHER_TEXT or Status.parse(status) not in WAITING
        ):
            continue
        if types and _text(values.get("type")) not in types:
            continue
        created = parse_ts(values.get("created_at"), tz, locale)
        if isinstance(created, datetime):
            age = (now - created).total_seconds()
            oldest = age if oldest is None else max(oldest, age)
    return oldest


# --- presentation helpers (pure) ---------------------------------------------------------


def timeline(stats: Stats, buckets: int = 48) -> tuple[int, list[int], list[int]]:
    """``done`` and ``failed`` per bucket over the window, oldest first: (bucket length in
    seconds, done counts, failed counts). Buckets are whole hours, at most ``buckets``."""
    first = stats.since.astimezone(UTC).replace(minute=0, second=0, microsecond=0)
    hours = max(1, math.ceil((stats.now - first).total_seconds() / 3600))
    per = max(1, math.ceil(hours / buckets))
    count = math.ceil(hours / per)
    done, failed = [0] * count, [0] * count
    for hour, counter in stats.by_hour.items():
        index = int((_moment(hour) - first) / timedelta(hours=per))
        if 0 <= index < count:
            done[index] += counter.get("done", 0)
            failed[index] += counter.get("failed", 0)
    return per * 3600, done, failed


def sparkline(values: Sequence[int], top: int | None = None) -> str:
    """One character per value, ``" "`` for 0 and ``▁``…``█`` scaled to ``top`` (default
    the largest value); any value above 0 shows at least ``▁``."""
    high = top if top is not None else max(values, default=0)
    if high <= 0:
        return " " * len(values)
    steps = len(_BLOCKS) - 1
    return "".join(
        _BLOCKS[0] if v <= 0 else _BLOCKS[max(1, min(steps, math.ceil(v / high * steps)))]
        for v in values
    )
