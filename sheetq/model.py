"""The words of the sheet: statuses, error classes, events, column names, Task.

Enum values are exactly the cell text of docs/design.md §2.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any


class Status(StrEnum):
    PENDING = "pending"
    PROCESSING = "processing"
    RETRY = "retry"
    DONE = "done"
    FAILED = "failed"
    SKIPPED = "skipped"

    @classmethod
    def parse(cls, cell: object) -> Status | None:
        """Read a status cell as people type it (``' Pending'``, ``RETRY``); ``None`` if unknown."""
        if type(cell) is str:
            found = _STATUS_TEXT.get(cell)  # sheetq's own exact text: the common case
            if found is not None:
                return found
        text = str(cell if cell is not None else "").strip().lower()
        return _STATUS_TEXT.get(text)


_STATUS_TEXT = {s.value: s for s in Status}
WAITING = frozenset({Status.PENDING, Status.RETRY})
FINISHED = frozenset({Status.DONE, Status.FAILED, Status.SKIPPED})


class ErrorClass(StrEnum):
    TRANSIENT = "transient"  # try again later: timeouts before sending, 5xx, EX_TEMPFAIL
    RATE_LIMITED = "rate_limited"  # 429 / Retry-After
    PERMANENT = "permanent"  # bad data: retrying cannot help
    AUTH = "auth"  # revoked or wrong credentials: a person must fix them
    UNKNOWN = "unknown"  # outcome lost: the action may or may not have happened
    EXPIRED = "expired"  # older than the type's max_age; never run
    DUPLICATE = "duplicate"  # another row with the same idempotency key won
    CONFIG = "config"  # the handler is misconfigured (missing command, variable…)


RETRYABLE = frozenset({ErrorClass.TRANSIENT, ErrorClass.RATE_LIMITED, ErrorClass.UNKNOWN})


class Event(StrEnum):
    ENQUEUED = "enqueued"
    DUPLICATE = "duplicate"
    CONFLICT = "conflict"
    CLAIMED = "claimed"
    DONE = "done"
    RETRY = "retry"
    FAILED = "failed"
    SKIPPED = "skipped"
    EXPIRED = "expired"
    RECOVERED = "recovered"
    REQUEUED = "requeued"
    ALERTED = "alerted"
    ARCHIVED = "archived"
    OUTCOME_REFUSED = "outcome_refused"  # a late outcome, refused (docs/design.md §11)
    # a connector's changes (docs/design.md §13): task_id empty, type = the connector
    BREAKER_OPENED = "breaker_opened"
    BREAKER_CLOSED = "breaker_closed"
    PAUSED = "paused"
    RESUMED = "resumed"


# The first nine are the original Apps Script layout (adoptable by `init`).
QUEUE_COLUMNS: tuple[str, ...] = (
    "task_id",
    "created_at",
    "type",
    "payload_json",
    "status",
    "retry_count",
    "next_retry_at",
    "last_error",
    "idempotency_key",
    "updated_at",
    "error_class",
    "result",
    "lease_owner",
    "lease_until",
    "payload_hash",
    "alerted_at",
    "owner",
    "priority",
    "group",
)
# The Connectors worksheet (docs/design.md §13): one row per connector. `next_start` (the
# rate limit's next start, so a run a second later does not start afresh), `opened_at` (when
# the breaker opened, for the `escalate_after` alert) and `alerted` (what Telegram was last
# told: opened, escalated, closed; an alert is owed until it says so) are sheetq's own.
CONNECTORS_SHEET = "Connectors"
CONNECTOR_COLUMNS: tuple[str, ...] = (
    "name",
    "state",
    "until",
    "reason",
    "failures",
    "running",
    "updated_at",
    "next_start",
    "opened_at",
    "alerted",
)
LOG_COLUMNS: tuple[str, ...] = (
    "ts",
    "task_id",
    "type",
    "event",
    "status",
    "retry_count",
    "message",
    "run_id",
    "duration_ms",
)

MAX_CELL_CHARS = 50_000  # Google Sheets: characters per cell
MAX_ERROR_CHARS = 500
MAX_RESULT_CHARS = 1_000
# What a handler's result is kept to before the cell's cut, so the cut can say how much was lost.
MAX_HANDLER_TEXT = 1_000_000
MAX_KEY_CHARS = 200
# A task's priority (docs/design.md §14): an integer, higher first; what a PostgreSQL
# `integer` holds comfortably, and a person can read.
MAX_PRIORITY = 1_000_000_000
PRIORITY_RULE = f"an integer from {-MAX_PRIORITY:,} to {MAX_PRIORITY:,} (higher runs first)"


def parse_priority(value: object) -> int | None:
    """A priority as people give it: ``10``, ``-5``, ``" 3 "``, ``3.0`` (a sheet's number) →
    int; ``None`` for anything else (``"high"``, ``1.5``, ``TRUE``, out of range). An empty
    cell is ``None`` too: the caller falls back to the type's priority."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int):
        number = value
    elif isinstance(value, float):
        if not value.is_integer():
            return None
        number = int(value)
    else:
        text = str(value).strip().replace("\u2212", "-")  # a typographic minus
        if not text or not (text.lstrip("+-").isdigit() and text.isascii()):
            return None
        number = int(text)
    return number if -MAX_PRIORITY <= number <= MAX_PRIORITY else None


@dataclass(frozen=True)
class Task:
    """What a handler gets. ``attempt`` is 1-based; ``created_at`` is UTC."""

    task_id: str
    type: str
    payload: dict[str, Any]
    idempotency_key: str
    attempt: int
    created_at: datetime | None


# --- cells and records --------------------------------------------------------

# What a cell (or a database column, as the commands print it) holds: text, a number, a
# boolean, or nothing (``None``/``""``).
CellValue = str | int | float | bool | None


def cell_text(value: CellValue) -> str:
    """A cell as text: ``""`` for empty, ``TRUE``/``FALSE``, numbers without a needless ``.0``."""
    if type(value) is str:
        return value
    if value is None:
        return ""
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


@dataclass
class Row:
    """One record as the commands print it: ``number`` is its sheet row (1-based, row 1 is
    the header), ``values`` its cells by column name."""

    number: int
    values: dict[str, CellValue]

    def text(self, column: str) -> str:
        """The cell as text (see ``cell_text``)."""
        return cell_text(self.values.get(column))


# --- identifiers -------------------------------------------------------------

_CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
_ulid_lock = threading.Lock()
_ulid_last = (0, 0)


def new_ulid(now_ms: int | None = None) -> str:
    """A ULID (26 chars, Crockford base32): sortable by creation time, URL-safe.

    Monotonic within one process: ids made in the same millisecond still sort
    in creation order (https://github.com/ulid/spec).
    """
    global _ulid_last
    ms = int(time.time() * 1000) if now_ms is None else now_ms
    with _ulid_lock:
        last_ms, last_rand = _ulid_last
        if ms <= last_ms:
            ms, rand = last_ms, last_rand + 1
        else:
            rand = int.from_bytes(os.urandom(10), "big") >> 1  # leave room to increment
        _ulid_last = (ms, rand)
    value = (ms << 80) | (rand & ((1 << 80) - 1))
    chars = []
    for _ in range(26):
        chars.append(_CROCKFORD[value & 31])
        value >>= 5
    return "".join(reversed(chars))


def new_task_id() -> str:
    """A task id: ``t_`` + ULID (28 chars)."""
    return "t_" + new_ulid()


def new_run_id(kind: str = "run") -> str:
    """An id for one sheetq invocation, written in QueueLog's ``run_id`` (and, for
    ``process``, as ``lease_owner``): ``run_`` + ULID, or ``enqueue_``/``requeue_``… + ULID,
    so every log row says which invocation wrote it (and a lost write can be found)."""
    return f"{kind}_{new_ulid()}"
