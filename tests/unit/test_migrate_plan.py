"""`sheetq.migrate`'s pure planning: conversion as the sheet engine reads, per-row refusals,
key winners (docs/design.md §4, §11)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest

from sheetq.config import Settings
from sheetq.errors import UsageError
from sheetq.migrate import Source, prepare, settle_keys
from sheetq.sheet.engine import _check_quiet
from sheetq.sheet.store import Row, Snapshot, WorkbookInfo
from sheetq.times import zone

NOW = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
INFO = WorkbookInfo(title="book", sheets={})


def _task(n: int, **cells: Any) -> Row:
    values: dict[str, Any] = {
        "task_id": f"t_{n}",
        "created_at": f"2026-01-0{n}T08:00:00Z",
        "type": "ok",
        "payload_json": json.dumps({"n": n}),
        "status": "pending",
        "idempotency_key": f"ok:{n}",
        "payload_hash": "sha256:x",
    }
    values.update(cells)
    return Row(n + 1, values)


def _prepare(rows: list[Row], log: list[Row] | None = None, tz: str = "UTC") -> Source:
    return prepare(
        queue=("Queue", rows),
        log=("QueueLog", log or []),
        archive=None,
        log_archive=None,
        tz=zone(tz),
        locale="en_US",
    )


def test_cells_are_read_as_the_sheet_engine_reads_them() -> None:
    """Status in capitals, a locale time in the sheet's zone, a count as a float: normalised."""
    (task,) = _prepare(
        [_task(1, status=" Retry ", next_retry_at="1/6/2026 10:00", retry_count=2.0)],
        tz="Europe/Kyiv",
    ).tasks
    assert task.values["status"] == "retry"
    assert task.values["next_retry_at"] == "2026-01-06T08:00:00Z"
    assert task.values["retry_count"] == 2
    assert task.values["updated_at"] == task.values["created_at"]  # empty: its creation


@pytest.mark.parametrize(
    ("cells", "column"),
    [
        ({"status": "maybe"}, "status"),
        ({"lease_until": "soon"}, "lease_until"),
        ({"created_at": ""}, "created_at"),
        ({"payload_json": "[1, 2]"}, "payload_json"),
        ({"retry_count": "two"}, "retry_count"),
        ({"retry_count": -1}, "retry_count"),
    ],
)
def test_a_bad_cell_refuses_its_row_only(cells: dict[str, Any], column: str) -> None:
    """One unconvertible cell: that row is refused, named by column; the next row is kept."""
    source = _prepare([_task(1, **cells), _task(2)])
    assert [t.task_id for t in source.tasks] == ["t_2"]
    (refusal,) = source.refused
    assert (refusal.task_id, refusal.row, refusal.column) == ("t_1", 2, column)


def test_repeated_task_id_and_rows_without_one() -> None:
    """A task id on two rows: the second is refused; a row with a payload but no task id too;
    an empty row is no task at all."""
    source = _prepare(
        [
            _task(1),
            Row(3, dict(_task(1).values)),
            Row(9, {"type": "ok", "payload_json": "{}"}),
            Row(10, {}),
        ]
    )
    assert [t.task_id for t in source.tasks] == ["t_1"]
    assert [(r.row, r.column) for r in source.refused] == [(3, "task_id"), (9, "task_id")]
    assert "row 2 of Queue" in source.refused[0].reason


def test_log_rows_need_a_time() -> None:
    """A log row whose ts is not a time is refused; a duration left empty stays empty."""
    source = _prepare(
        [],
        [
            Row(2, {"ts": "2026-01-05T09:00:00Z", "task_id": "t_1", "event": "enqueued"}),
            Row(3, {"ts": "later", "task_id": "t_1", "event": "claimed"}),
        ],
    )
    assert len(source.log) == 1 and source.log[0]["duration_ms"] == ""
    assert (source.refused[0].row, source.refused[0].column) == (3, "ts")


def test_key_winner_is_the_earliest_or_the_holder() -> None:
    """Of tasks sharing a key the earliest wins; a key held in the destination stays there;
    a finished loser keeps its status."""
    rows = [
        _task(2, idempotency_key="ok:k"),
        _task(1, idempotency_key="ok:k", status="done"),
        _task(3, idempotency_key="ok:k"),
    ]
    source = _prepare(rows)
    plan = settle_keys(source, {}, settings=Settings(spreadsheet="x"), now=NOW, run_id="m")
    assert plan.keys == [("ok:k", "t_1", "sha256:x")]
    assert {d.task_id: (d.was, d.now) for d in plan.duplicates} == {
        "t_2": ("pending", "skipped"),
        "t_3": ("pending", "skipped"),
    }
    assert set(plan.logs) == {"t_2", "t_3"}
    held = settle_keys(
        _prepare(rows), {"ok:k": "t_9"}, settings=Settings(spreadsheet="x"), now=NOW, run_id="m"
    )
    assert held.keys == [] and {d.winner for d in held.duplicates} == {"t_9"}
    assert {d.task_id: d.now for d in held.duplicates}["t_1"] == "done"


def test_quiet_check_refuses_live_leases_only() -> None:
    """Processing rows under a future lease refuse; an expired one does not."""
    expired = _task(1, status="processing", lease_until="2026-01-05T08:00:00Z")
    settings = Settings(spreadsheet="local:q.db")
    _check_quiet(INFO, Snapshot("Queue", (), [expired]), settings, NOW)
    live = _task(2, status="Processing", lease_until="2026-01-05T10:00:00Z")
    with pytest.raises(
        UsageError, match=r"1 task\(s\) are processing .* until 2026-01-05T10:00:00Z"
    ):
        _check_quiet(INFO, Snapshot("Queue", (), [expired, live]), settings, NOW)
