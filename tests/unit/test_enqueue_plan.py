"""Enqueue planning (docs/design.md §4): writes under a byte cap, whole lines in order."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from sheetq.accept import KnownKey, NewTask
from sheetq.config import Settings
from sheetq.idempotency import canonical_json, payload_hash
from sheetq.sheet.enqueue import append_bytes, plan_enqueue

NOW = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
SETTINGS = Settings(spreadsheet="local:x.db")


def _task(n: int, text: str = "") -> NewTask:
    canonical = canonical_json({"n": n, "text": text})
    return NewTask("t", canonical, payload_hash(canonical), f"t:n={n}", line=n)


def test_append_bytes_counts_the_json_google_receives() -> None:
    """The estimate is the JSON of the adapter's appendCells row, escapes included, rounded
    up by at most one separator."""
    values = {"a": 'Юлія "q"', "b": 3, "c": ""}
    cells = [{"userEnteredValue": {"stringValue": 'Юлія "q"'}}]
    cells += [{"userEnteredValue": {"numberValue": 3}}, {}, {}]
    sent = len(json.dumps({"values": cells})) + len(", ")
    assert sent <= append_bytes(values, width=4) <= sent + 2


def test_batch_splits_into_writes_of_whole_lines_in_order() -> None:
    """Under a small cap the lines spread over several writes, each under the cap, each
    holding its lines' Queue rows and their enqueued log rows, in line order."""
    tasks = [_task(n, "x" * 1_000) for n in range(1, 11)]
    cap = 6_000
    results, writes = plan_enqueue(tasks, {}, settings=SETTINGS, now=NOW, max_write_bytes=cap)
    assert len(writes) > 2 and [r.outcome for r in results] == ["enqueued"] * 10
    order: list[str] = []
    for write in writes:
        rows = [a for a in write.appends if a.worksheet == "Queue"]
        logs = [a for a in write.appends if a.worksheet == "QueueLog"]
        assert [r.values["task_id"] for r in rows] == [e.values["task_id"] for e in logs]
        assert write.appends[: len(rows)] == rows  # Queue rows before log rows
        assert sum(append_bytes(a.values, len(a.values)) for a in write.appends) < cap
        order += [str(r.values["task_id"]) for r in rows]
    assert order == [r.task_id for r in results]


def test_no_cap_is_one_write_and_duplicates_ride_with_their_line() -> None:
    """Without a cap everything is one write; a duplicate of a known key adds only a log row."""
    known = {"t:n=1": KnownKey("t_old", _task(1).payload_hash, "done")}
    results, writes = plan_enqueue([_task(1), _task(2)], known, settings=SETTINGS, now=NOW)
    assert [r.outcome for r in results] == ["duplicate", "enqueued"]
    assert len(writes) == 1
    assert [a.worksheet for a in writes[0].appends] == ["Queue", "QueueLog", "QueueLog"]
