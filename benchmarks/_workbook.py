"""Large, realistic local workbooks for the benchmarks, written fast through the port.

Rows go in with ``SqliteStore.apply`` (one transaction per 10,000 appends), not with
`sheetq enqueue` one task at a time. Payloads are the lines of
``../shared/data/leads.jsonl`` when that file exists (cycled, ``lead_id`` made unique),
else synthetic leads of the same shape. The product never needs that file.
"""

from __future__ import annotations

import itertools
import json
import random
import shutil
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from sheetq.idempotency import canonical_json, derive_key, payload_hash
from sheetq.model import LOG_COLUMNS, QUEUE_COLUMNS, new_task_id
from sheetq.sheet.sqlite import SqliteStore
from sheetq.sheet.store import AppendRow, CellValue, ChangeSet
from sheetq.times import format_ts

ROOT = Path(__file__).resolve().parent.parent
LEADS = ROOT.parent / "shared" / "data" / "leads.jsonl"
TYPES = ("lead", "order", "report")
NOW = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)  # the benchmarks' frozen clock (SHEETQ_NOW)
LOG_PER_TASK = 4
_CHUNK = 10_000
Record = dict[str, CellValue]


def payloads(first_id: int = 0) -> Iterator[dict[str, Any]]:
    """Realistic payloads for ever: the leads file cycled (``lead_id`` counting up from
    ``first_id``, so every key is new), or synthetic leads."""
    lines: list[dict[str, Any]] = []
    if LEADS.exists():
        for line in LEADS.read_text(encoding="utf-8").splitlines():
            try:
                value = json.loads(line)
            except ValueError:
                continue
            if isinstance(value, dict):
                lines.append(value)
    if not lines:
        lines = [
            {
                "lead_id": "L-1",
                "name": "Ірина Петренко",
                "phone": "+380446083290",
                "email": None,
                "product": "Стіл дубовий",
                "message": "Передзвоніть, будь ласка, після 18:00",
                "utm": {"source": "google", "campaign": "brand"},
                "consent": True,
                "submitted_at": "2026-11-16T22:25:00+02:00",
            }
        ]
    for n, base in enumerate(itertools.cycle(lines), start=first_id):
        yield {**base, "lead_id": f"L-{n:07d}"}


def queue_records(count: int, *, seed: int = 7, due: int = 0, first_id: int = 0) -> list[Record]:
    """``count`` Queue rows of a queue that has been running for a month: 85 % done, 5 %
    failed (already alerted), 3 % skipped, 7 % waiting (created in the last two days, with
    a future ``next_retry_at``); plus ``due`` pending rows that are due at ``NOW``."""
    rng = random.Random(seed)
    source = payloads(first_id)
    start = NOW - timedelta(days=30)
    step = timedelta(days=30) / max(count, 1)
    out: list[Record] = []
    for i in range(count + due):
        task_type = TYPES[i % len(TYPES)]
        body = next(source)
        canonical = canonical_json(body)
        created = start + step * i if i < count else NOW - timedelta(minutes=1)
        record: Record = {
            "task_id": new_task_id(),
            "created_at": format_ts(created),
            "type": task_type,
            "payload_json": canonical,
            "retry_count": 0,
            "idempotency_key": derive_key(task_type, body, canonical),
            "updated_at": format_ts(created + timedelta(seconds=40)),
            "payload_hash": payload_hash(canonical),
            "owner": "sales" if task_type == "lead" else "ops",
        }
        roll = rng.random() if i < count else -1.0
        if roll < 0:
            record["status"] = "pending"
        elif roll < 0.85:
            record.update(status="done", result=f"crm-{rng.randrange(10**8)}")
        elif roll < 0.90:
            record.update(
                status="failed",
                retry_count=5,
                error_class="permanent",
                last_error="422 from CRM: phone number is not valid",
                alerted_at=format_ts(created + timedelta(minutes=50)),
            )
        elif roll < 0.93:
            record.update(status="skipped", error_class="duplicate", last_error="duplicate")
        else:  # waiting, young enough not to expire (max_age 72h), not due before NOW
            waiting = rng.choice(("pending", "retry"))
            young = NOW - timedelta(hours=rng.uniform(1, 48))
            later = NOW + timedelta(hours=rng.randrange(1, 72))
            record.update(
                status=waiting,
                created_at=format_ts(young),
                updated_at=format_ts(young),
                next_retry_at=format_ts(later),
            )
            if waiting == "retry":
                record.update(retry_count=rng.randrange(1, 4), error_class="transient")
        out.append(record)
    return out


def log_records(queue: list[Record], per_task: int = LOG_PER_TASK) -> list[Record]:
    """``per_task`` QueueLog rows per task: enqueued, claimed, the outcome, then alerted or
    a suppressed duplicate, as a month of runs leaves them."""
    out: list[Record] = []
    for row in queue:
        created = datetime.fromisoformat(str(row["created_at"]))
        events = ["enqueued", "claimed", str(row["status"]), "alerted"]
        if row["status"] != "failed":
            events[3] = "duplicate"
        for n, event in enumerate(events[:per_task]):
            out.append(
                {
                    "ts": format_ts(created + timedelta(seconds=20 * n)),
                    "task_id": row["task_id"],
                    "type": row["type"],
                    "event": event if event not in ("pending", "retry") else "retry",
                    "status": str(row["status"]),
                    "retry_count": row["retry_count"],
                    "message": "" if event != "failed" else str(row.get("last_error", "")),
                    "run_id": "run_01BENCHMARK0000000000000000",
                    "duration_ms": 850 if event in ("done", "failed") else "",
                }
            )
    return out


def append(store: SqliteStore, worksheet: str, records: list[Record]) -> None:
    """Append rows in transactions of 10,000."""
    for lo in range(0, len(records), _CHUNK):
        chunk = records[lo : lo + _CHUNK]
        store.apply(ChangeSet(appends=[AppendRow(worksheet, r) for r in chunk]))


def build_local(path: Path, rows: int, *, log_per_task: int = LOG_PER_TASK) -> Path:
    """A sheetq workbook at ``path`` with ``rows`` Queue rows and ``log_per_task`` × as many
    QueueLog rows; nothing is due at ``NOW``."""
    store = SqliteStore(path, create=True)
    try:
        store.ensure_worksheets(
            {"Queue": QUEUE_COLUMNS, "QueueLog": LOG_COLUMNS, "QueueArchive": QUEUE_COLUMNS}
        )
        queue = queue_records(rows)
        append(store, "Queue", queue)
        append(store, "QueueLog", log_records(queue, log_per_task))
    finally:
        store.close()
    return path


def with_due(source: Path, target: Path, due: int = 10) -> Path:
    """A copy of ``source`` with ``due`` more pending rows that are due at ``NOW``."""
    shutil.copyfile(source, target)
    store = SqliteStore(target)
    try:
        fresh = queue_records(0, due=due, seed=11, first_id=10**6)
        append(store, "Queue", fresh)
        append(store, "QueueLog", log_records(fresh, 1))
    finally:
        store.close()
    return target
