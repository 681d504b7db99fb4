"""What one ``sheetq process`` run was asked to do and what it did (docs/design.md §5).

``RunOptions`` are the run's flags; ``RunSummary`` is its ``--json`` document and the one
line for cron mail (``summary_line``). Shared by the sheet runner and the PostgreSQL worker.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from sheetq.errors import Interrupted
from sheetq.redact import plural


@dataclass
class RunOptions:
    """The flags of one run: batch size, how many batches, a time limit, types, dry run."""

    batch_size: int = 10
    max_batches: int | None = 1  # None: no limit (``--until-empty``)
    max_runtime: float | None = None  # seconds; no new batch is claimed after it
    types: Sequence[str] = ()
    dry_run: bool = False


@dataclass
class RunSummary:
    """What one run did: counts of outcomes, notes, open circuits (its ``--json`` document)."""

    run_id: str
    batches: int = 0
    claimed: int = 0
    done: int = 0
    retry: int = 0
    failed: int = 0
    skipped: int = 0
    recovered: int = 0
    expired: int = 0
    requeued: int = 0
    released: int = 0
    without_handler: Counter[str] = field(default_factory=Counter)
    alerts_sent: int = 0
    alerts_owed: int = 0
    seconds: float = 0.0
    locked: str = ""  # why the run did not take the queue, if it did not
    interrupted: str = ""  # the task running when SIGINT/SIGTERM arrived
    would_claim: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    open_circuits: dict[str, str] = field(default_factory=dict)
    requests: int = 0
    journal: dict[str, int] | None = None  # what a sheet run applied of a killed run's journal

    def as_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "run_id": self.run_id,
            "batches": self.batches,
            "claimed": self.claimed,
            "done": self.done,
            "retry": self.retry,
            "failed": self.failed,
            "skipped": self.skipped,
            "recovered": self.recovered,
            "expired": self.expired,
            "without_handler": sum(self.without_handler.values()),
            "alerts_sent": self.alerts_sent,
            "seconds": round(self.seconds, 3),
            "requeued": self.requeued,
            "released": self.released,
            "without_handler_by_type": dict(self.without_handler),
            "alerts_owed": self.alerts_owed,
            "open_circuits": self.open_circuits,
            "locked": bool(self.locked),
            "requests": self.requests,
            "notes": self.notes,
        }
        if self.would_claim:
            doc["would_claim"] = self.would_claim
        if self.journal is not None:
            doc["journal"] = self.journal
        return doc


def summary_line(summary: RunSummary) -> str:
    """``processed 12: 9 done, 2 retry, 1 failed, …`` — one line for cron mail."""
    if summary.locked:
        return f"sheetq: skipped: {summary.locked}"
    parts = [f"{summary.done} done", f"{summary.retry} retry", f"{summary.failed} failed"]
    for name in ("skipped", "recovered", "expired", "requeued", "released"):
        value = getattr(summary, name)
        if value:
            parts.append(f"{value} {name}")
    waiting = sum(summary.without_handler.values())
    if waiting:
        kinds = ", ".join(f"{t}: {n}" for t, n in sorted(summary.without_handler.items()))
        parts.append(f"{waiting} waiting without handler ({kinds})")
    if summary.alerts_sent:
        parts.append(f"{summary.alerts_sent} alerted")
    if summary.alerts_owed:
        parts.append(plural(summary.alerts_owed, "alert") + " owed")
    for name, why in summary.open_circuits.items():
        parts.append(f"circuit open for {name}: {why}")
    batches = f"{summary.batches} batch" + ("es" if summary.batches != 1 else "")
    return (
        f"sheetq: {summary.claimed} claimed in {batches} in {summary.seconds:.1f}s: "
        + ", ".join(parts)
    )


def dumps(doc: dict[str, Any]) -> str:
    """``doc`` as one line of JSON, non-ASCII kept (the ``--json`` output)."""
    return json.dumps(doc, ensure_ascii=False, sort_keys=False)


def stopped(exc: BaseException, summary: RunSummary, seconds: float) -> Interrupted:
    """``exc`` (SIGINT/SIGTERM: ``Interrupted``, or a ``KeyboardInterrupt`` met outside a
    handler) as an ``Interrupted`` that carries the run's ``summary`` so far, its
    ``seconds`` set, so that ``process --json`` still prints what was done."""
    out = exc if isinstance(exc, Interrupted) else Interrupted("", 130)
    if not summary.seconds:
        summary.seconds = seconds
    out.summary = summary
    return out


def interrupted_json(exc: Interrupted) -> dict[str, Any]:
    """The ``--json`` document of an interrupted run: its summary, plus ``interrupted``:
    the signal, the exit code, the task whose handler was running (``null`` if none) and
    what happened to it and the unstarted tasks."""
    import signal

    summary: RunSummary = exc.summary
    doc = summary.as_json()
    try:
        name = signal.Signals(exc.exit_code - 128).name
    except ValueError:
        name = ""
    doc["interrupted"] = {
        "signal": name,
        "exit_code": exc.exit_code,
        "task_id": summary.interrupted or None,
        "message": exc.message,
    }
    return doc
