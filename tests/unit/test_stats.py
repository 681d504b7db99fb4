"""The pure stats computation (sheetq.stats): counts, rates, percentiles, error classes."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from sheetq.sheet.store import Row
from sheetq.stats import UNRECORDED, compute, percentile, sparkline, timeline
from sheetq.times import format_ts

NOW = datetime(2026, 1, 5, 12, 0, tzinfo=UTC)
SINCE = NOW - timedelta(hours=24)


class Raw:
    """A ts cell as stored (e.g. a date serial number), not minutes ago."""

    def __init__(self, value: Any) -> None:
        self.value = value


def _ts(minutes_ago: float) -> str:
    return format_ts(NOW - timedelta(minutes=minutes_ago))


def _log(*entries: tuple[Any, ...]) -> list[Row]:
    """(minutes ago, an ISO text or a Raw cell; task_id, event, status[, type[, duration])"""
    rows = []
    for number, entry in enumerate(entries, start=2):
        when, task, event, status, *rest = entry
        task_type = rest[0] if rest else "job"
        duration = rest[1] if len(rest) > 1 else ""
        ts = when.value if isinstance(when, Raw) else _ts(when) if isinstance(when, int) else when
        rows.append(
            Row(
                number,
                {
                    "ts": ts,
                    "task_id": task,
                    "type": task_type,
                    "event": event,
                    "status": status,
                    "duration_ms": duration,
                },
            )
        )
    return rows


def _queue(*entries: tuple[str, str, str, str]) -> list[Row]:
    """(task_id, status, error_class, created_at)"""
    return [
        Row(n, {"task_id": t, "status": s, "error_class": e, "created_at": c, "type": "job"})
        for n, (t, s, e, c) in enumerate(entries, start=2)
    ]


@pytest.mark.parametrize(
    ("values", "p", "expected"),
    [
        ([15, 20, 35, 40, 50], 30, 20),
        ([15, 20, 35, 40, 50], 40, 20),
        ([15, 20, 35, 40, 50], 50, 35),
        ([15, 20, 35, 40, 50], 100, 50),
        ([15, 20, 35, 40, 50], 0, 15),
        ([4, 1, 3, 2], 50, 2),  # linear interpolation would say 2.5
        (list(range(1, 21)), 95, 19),
        (list(range(1, 101)), 95, 95),
        ([7], 95, 7),
        ([], 50, None),
    ],
)
def test_percentile_is_nearest_rank(values: list[int], p: float, expected: int | None) -> None:
    """Nearest rank: the ⌈p/100·n⌉-th smallest value, always one that occurred."""
    assert percentile(values, p) == expected


def test_counts_are_transitions_in_the_window() -> None:
    """Events before the window are not counted; recovered/expired count by where they led."""
    rows = _log(
        (2000, "old", "enqueued", "pending"),  # before the window
        (1500, "old", "done", "done"),
        (600, "a", "enqueued", "pending"),
        (590, "a", "claimed", "processing"),
        (589, "a", "retry", "retry"),
        (500, "a", "claimed", "processing"),
        (499, "a", "done", "done"),
        (400, "b", "enqueued", "pending"),
        (399, "b", "duplicate", "pending"),
        (398, "b", "conflict", "pending"),
        (300, "b", "expired", "failed"),
        (200, "c", "enqueued", "pending"),
        (190, "c", "claimed", "processing"),
        (100, "c", "recovered", "retry"),
        (90, "c", "claimed", "processing"),
        (80, "c", "recovered", "failed"),
        (70, "d", "enqueued", "pending"),
        (60, "d", "skipped", "skipped"),
        (50, "e", "enqueued", "pending"),
        (40, "e", "claimed", "processing"),
        (30, "e", "recovered", "done"),
        (20, "a", "archived", "done"),
    )
    stats = compute(rows, [], since=SINCE, now=NOW)
    doc = stats.as_json()
    expected = {"enqueued": 5, "duplicate": 1, "conflict": 1, "done": 2, "retry": 2, "failed": 2}
    assert {k: doc[k] for k in expected} == expected
    assert (doc["claimed"], doc["skipped"], doc["expired"], doc["recovered"]) == (5, 1, 1, 3)
    assert doc["archived"] == 1 and doc["finished"] == 5
    assert doc["success_rate"] == 0.4 and doc["dead_letter_rate"] == 0.4
    assert doc["retry_rate"] == 0.4
    assert doc["since"] == format_ts(SINCE)
    assert doc["failed_by_error_class"] == {"expired": 1, UNRECORDED: 1}


def test_time_to_done_counts_from_an_enqueue_before_the_window() -> None:
    """A task enqueued before the window and done inside it counts from its enqueue; a
    task without an enqueued row (adopted by init) is left out; the first done counts."""
    rows = _log(
        (30 * 60, "early", "enqueued", "pending"),  # 30 h ago, outside the 24 h window
        (60, "early", "done", "done"),
        (100, "quick", "enqueued", "pending"),
        (98, "quick", "done", "done"),
        (50, "quick", "done", "done"),  # done again after a requeue: the first one counts
        (10, "adopted", "done", "done"),
    )
    stats = compute(rows, [], since=SINCE, now=NOW)
    assert stats.to_done.count == 2
    assert stats.as_json()["p50_seconds"] == 120
    assert stats.as_json()["p95_seconds"] == 29 * 3600
    assert stats.enqueued == 1 and stats.done == 4


def test_error_class_comes_from_the_row_while_it_is_still_failed() -> None:
    """A failed event takes its class from the task's Queue row (else QueueArchive) while
    that row is failed; a row that moved on no longer records it."""
    rows = _log(
        (50, "q", "failed", "failed"),
        (40, "arch", "failed", "failed"),
        (30, "again", "failed", "failed"),
        (20, "gone", "failed", "failed"),
        (15, "blank", "failed", "failed"),
        (10, "q2", "failed", "failed"),
    )
    queue = _queue(
        ("q", "failed", "permanent", ""),
        ("q2", " Failed", "Auth", ""),
        ("again", "done", "", ""),
        ("blank", "failed", "", ""),
    )
    archive = [
        Row(2, {"task_id": "arch", "status": "failed", "error_class": "rate_limited"}),
        Row(3, {"task_id": "q", "status": "failed", "error_class": "transient"}),
    ]
    stats = compute(rows, queue, archive, since=SINCE, now=NOW)
    assert dict(stats.failed_by_error_class) == {
        "permanent": 1,
        "auth": 1,
        "rate_limited": 1,
        UNRECORDED: 3,
    }


def test_type_filter_applies_to_log_and_queue() -> None:
    """--type keeps only those task types, in the log counts and the oldest waiting age."""
    rows = _log(
        (50, "a", "enqueued", "pending", "lead"),
        (40, "b", "enqueued", "pending", "order"),
        (30, "a", "done", "done", "lead"),
    )
    queue = [
        Row(2, {"task_id": "x", "status": "pending", "type": "order", "created_at": _ts(500)}),
        Row(3, {"task_id": "y", "status": "retry", "type": "lead", "created_at": _ts(100)}),
    ]
    lead = compute(rows, queue, since=SINCE, now=NOW, types=["lead"])
    assert (lead.enqueued, lead.done, lead.oldest_waiting) == (1, 1, 6000.0)
    everything = compute(rows, queue, since=SINCE, now=NOW)
    assert (everything.enqueued, everything.oldest_waiting) == (2, 30000.0)


def test_oldest_waiting_counts_pending_and_retry_as_people_type_them() -> None:
    """Oldest waiting: pending/retry rows only, status read leniently, any time form."""
    queue = _queue(
        ("a", "done", "", _ts(9000)),
        ("b", " Pending ", "", _ts(120)),
        ("c", "RETRY", "", "2026-01-05 11:00"),  # locale-less form, in the sheet's zone
        ("d", "pending", "", ""),
        ("e", "на паузі", "", _ts(9000)),
    )
    kyiv = ZoneInfo("Europe/Kyiv")  # UTC+2 in January: 11:00 there is 09:00 UTC
    stats = compute([], queue, since=SINCE, now=NOW, tz=kyiv)
    assert stats.oldest_waiting == 3 * 3600


def test_timestamps_in_other_forms_are_read_and_garbage_counted() -> None:
    """A ts with an offset, or a date serial a person typed, is read; text that is no time
    is counted as unreadable and ignored."""
    rows = _log(
        ("2026-01-05T13:00:00+02:00", "a", "enqueued", "pending"),  # 11:00 UTC
        (Raw(46027.5), "a", "done", "done"),  # the serial of 2026-01-05 12:00
        ("yesterday-ish", "b", "enqueued", "pending"),
        ("", "c", "enqueued", "pending"),
    )
    stats = compute(rows, [], since=SINCE, now=NOW)
    assert (stats.enqueued, stats.done, stats.unreadable_ts) == (1, 1, 1)
    assert (stats.to_done.count, stats.to_done.p50) == (1, 3600)


def test_empty_log_gives_zeros_and_nulls() -> None:
    """No rows: every count 0, every rate and percentile None."""
    doc = compute([], [], since=SINCE, now=NOW).as_json()
    for key in ("enqueued", "duplicate", "conflict", "done", "retry", "failed"):
        assert doc[key] == 0
    for key in ("success_rate", "dead_letter_rate", "p50_seconds", "p95_seconds"):
        assert doc[key] is None
    assert doc["oldest_waiting_seconds"] is None and doc["failed_by_error_class"] == {}


def test_timeline_buckets_hours_and_sparkline_scales() -> None:
    """Done/failed per hour over 24 h; a 7-day window folds into ≤ 48 buckets of whole hours;
    the sparkline shows zero as blank and any count as at least the lowest block."""
    rows = _log(
        (23 * 60 + 30, "a", "done", "done"),
        (90, "b", "done", "done"),
        (80, "c", "failed", "failed"),
        (5, "d", "done", "done"),
    )
    stats = compute(rows, [], since=SINCE, now=NOW)
    seconds, done, failed = timeline(stats)
    assert seconds == 3600 and len(done) == 24
    assert done[0] == 1 and done[22] == 1 and done[23] == 1 and sum(failed) == 1
    week = compute(rows, [], since=NOW - timedelta(days=7), now=NOW)
    seconds, done, _ = timeline(week)
    assert seconds == 4 * 3600 and len(done) == 42 and sum(done) == 3
    assert sparkline([0, 1, 4, 8]) == " ▁▄█"
    assert sparkline([0, 0]) == "  "
    assert sparkline([1], top=100) == "▁"


@pytest.mark.slow
def test_two_hundred_thousand_rows_are_counted_exactly() -> None:
    """A large synthetic log gives exact counts (correctness at scale; speed is measured
    outside the test suite)."""
    start = NOW - timedelta(hours=20)
    rows = []
    for i in range(50_000):
        at = start + timedelta(seconds=i)
        task = f"t{i}"
        outcome = "done" if i % 10 else "failed"
        rows.append(Row(0, {"ts": format_ts(at), "task_id": task, "event": "enqueued"}))
        rows.append(Row(0, {"ts": format_ts(at), "task_id": task, "event": "claimed"}))
        rows.append(
            Row(
                0,
                {
                    "ts": format_ts(at + timedelta(seconds=i % 7)),
                    "task_id": task,
                    "event": outcome,
                    "status": outcome,
                },
            )
        )
        rows.append(Row(0, {"ts": format_ts(at), "task_id": task, "event": "duplicate"}))
    stats = compute(rows, [], since=SINCE, now=NOW)
    assert (stats.enqueued, stats.duplicate, stats.claimed) == (50_000, 50_000, 50_000)
    assert (stats.done, stats.failed) == (45_000, 5_000)
    assert stats.as_json()["p95_seconds"] == 6


def test_refused_late_outcome_counts_nowhere() -> None:
    """A `done` row whose status is `retry` (a late outcome PostgreSQL refused) is no `done`."""
    rows = _log(
        (60, "a", "enqueued", "pending"),
        (59, "a", "claimed", "processing"),
        (30, "a", "recovered", "retry"),
        (29, "a", "done", "retry"),  # the first attempt's outcome, after its lease ran out
    )
    stats = compute(rows, [], since=SINCE, now=NOW)
    assert (stats.done, stats.retry) == (0, 1)
