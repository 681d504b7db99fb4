"""The host journal: a kill loses no finished work (docs/design.md §5).

``process`` writes its results for a whole batch in one request at the end, so a run
killed with SIGKILL (or a lost machine) would leave every claimed row ``processing``
and, after the lease, turn known outcomes into unknown ones. The journal is a small
append-only file next to the host lock (``SHEETQ_LOCK_DIR``, one per spreadsheet and
queue worksheet, the lock file's name with ``.journal``), fsync'd before the run goes on:

* ``claim``   — the tasks a claim request is about to claim, with the status each had,
  the run id and the lease token (written before the claim request);
* ``started`` — a handler is about to start (task, attempt);
* ``ended``   — a handler returned: the exact Queue cells and QueueLog row the run
  will write for it.

After the batch's result request the journal is emptied, so a run that ends normally
leaves it empty. The next run on the host (it holds the host lock, so the journal's
run is dead) applies it first, through the storage port, so it works on every sheet
backend: known outcomes are written as the dead run would have, never-started tasks
go back to their previous status with no attempt counted, and started-but-unfinished
tasks get their lease ended now, so §5 step 2 recovers them at once. Only rows still
``processing`` under the dead run's id are touched.

Each line is ``<crc32 of the JSON, 8 hex digits> <JSON>\\n``; a line whose checksum
does not match (a kill mid-write tears the last line) is ignored.
"""

from __future__ import annotations

import json
import os
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from sheetq.config import Settings
from sheetq.model import Status
from sheetq.sheet.plan import Claim, QueueRow, release
from sheetq.sheet.store import AppendRow, ChangeSet, UpdateRow
from sheetq.times import format_ts

VERSION = 1
REWRITE_AT = 1 << 20  # bytes: a journal without fsync is rewritten, not appended to, past it


def journal_path(lock_file: Path) -> Path:
    """The journal next to a host lock file: ``<queue>-<digest>.journal``."""
    return lock_file.with_suffix(".journal")


def _line(record: Mapping[str, Any]) -> bytes:
    body = json.dumps(record, ensure_ascii=False, separators=(",", ":"), sort_keys=True)
    data = body.encode("utf-8")
    return f"{zlib.crc32(data):08x} ".encode() + data + b"\n"


def _parse(line: bytes) -> dict[str, Any] | None:
    """One record, or ``None`` for a torn or damaged line."""
    if not line.endswith(b"\n") or len(line) < 10 or line[8:9] != b" ":
        return None
    body = line[9:-1]
    try:
        if int(line[:8], 16) != zlib.crc32(body):
            return None
        record = json.loads(body.decode("utf-8"))
    except (ValueError, UnicodeDecodeError):
        return None
    return record if isinstance(record, dict) else None


@dataclass
class TaskEntry:
    """What the journal knows of one task of one run."""

    task_id: str
    previous: str = ""  # status before the claim
    started: bool = False
    attempt: int = 0
    ended: ChangeSet | None = None

    @property
    def outcome(self) -> str:
        """The status the dead run was going to write, ``""`` if not ended."""
        if self.ended is None:
            return ""
        for update in self.ended.updates:
            if update.key == self.task_id and "status" in update.values:
                return str(update.values["status"])
        return ""


@dataclass
class JournalState:
    """The journal as read: tasks by run id, the lease tokens those runs held."""

    runs: dict[str, dict[str, TaskEntry]] = field(default_factory=dict)
    leases: set[str] = field(default_factory=set)
    damaged: int = 0  # lines ignored: torn by a kill mid-write, or damaged
    size: int = 0  # bytes in the file

    def __bool__(self) -> bool:
        return any(self.runs.values())

    def entry(self, run_id: str, task_id: str) -> TaskEntry:
        tasks = self.runs.setdefault(run_id, {})
        return tasks.setdefault(task_id, TaskEntry(task_id))


class Journal:
    """The append-only, fsync'd journal file of one queue on this host."""

    def __init__(self, path: Path, *, sync: bool = True) -> None:
        """``sync``: fsync each record that must precede what follows it. A killed process's
        writes stay in the page cache, so the next run on the host reads them either way;
        the fsync is for a power loss, and is only worth its cost when the store's own writes
        survive one (``Store.survives_power_loss``): the local workbook's last commits may
        roll back on a power loss, and then no journal record could make up for them."""
        self.path = path
        self.sync = sync
        self._size = 0  # bytes in the file after our last write (0: unknown or empty)
        self._dirty = False  # something written since the last clear
        self.problem = ""  # why the journal could not be written, if it could not

    # --- writing ------------------------------------------------------------------

    def _append(self, records: Sequence[Mapping[str, Any]], *, sync: bool = True) -> None:
        """Append, and fsync unless ``sync`` is false. A journal that cannot be written (disk
        full, permissions) does not stop the run: ``problem`` says why (the runner reports
        it), and a kill would then leave outcomes unknown, as without a journal."""
        data = b"".join(_line({"v": VERSION, **r}) for r in records)
        try:
            new = not self.path.exists()
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            try:
                os.write(fd, data)
                self._size = os.lseek(fd, 0, os.SEEK_CUR)
                if sync and self.sync:
                    os.fsync(fd)
            finally:
                os.close(fd)
        except OSError as exc:
            if not self.problem:
                self.problem = f"host journal {self.path} not written ({exc.strerror or exc})"
            return
        if new and self.sync:
            _fsync_dir(self.path.parent)
        self._dirty = True

    def claimed(
        self, run_id: str, lease: str | None, lease_until: datetime | None, claims: Sequence[Claim]
    ) -> None:
        """Before the claim request: the tasks it claims and the status each had."""
        if not claims:
            return
        self._append(
            [
                {
                    "kind": "claim",
                    "run": run_id,
                    "lease": lease,
                    "lease_until": format_ts(lease_until) if lease_until else "",
                    "tasks": [
                        {"task_id": c.row.task_id, "previous": str(c.previous)} for c in claims
                    ],
                }
            ]
        )

    def started(self, run_id: str, claim: Claim) -> None:
        """Before a handler starts."""
        self._append(
            [
                {
                    "kind": "started",
                    "run": run_id,
                    "task_id": claim.row.task_id,
                    "previous": str(claim.previous),
                    "attempt": claim.row.retry_count + 1,
                }
            ]
        )

    def ended(self, run_id: str, task_id: str, changes: ChangeSet) -> None:
        """After a handler returned: the Queue cells and log rows the run will write.

        Written without its own fsync: a killed process leaves what it wrote in the page
        cache, so the next run reads it; the next record's fsync (the next ``started``, the
        next claim) or the batch's write to the sheet makes it durable against a power loss.
        A power loss before that leaves the task ``started`` without an end, which recovery
        treats as outcome unknown (never as not started), so nothing runs twice by accident;
        one fsync per task instead of two (the ``started`` mark's, which must precede the
        handler)."""
        self._append(
            sync=False,
            records=[
                {
                    "kind": "ended",
                    "run": run_id,
                    "task_id": task_id,
                    "updates": [
                        {
                            "worksheet": u.worksheet,
                            "key": u.key,
                            "row": u.row,
                            "values": dict(u.values),
                            "key_column": u.key_column,
                        }
                        for u in changes.updates
                    ],
                    "appends": [
                        {"worksheet": a.worksheet, "values": dict(a.values)}
                        for a in changes.appends
                    ],
                }
            ],
        )

    def keep_claim(
        self, run_id: str, lease: str | None, lease_until: datetime | None, claims: Sequence[Claim]
    ) -> None:
        """After a write that carried the previous batch's results and this claim: the
        journal holds this claim only, replaced atomically (a new file, fsync'd, renamed over
        the old one), so no kill leaves it holding neither. Without ``sync`` it is one line
        appended, a claim that says to forget every line before it (a rename or truncation
        makes the filesystem write out at once, an append does not); a torn one leaves the
        lines before it, this claim's included. The file is rewritten past ``REWRITE_AT``."""
        if not claims:
            self.clear()
            return
        record = {
            "kind": "claim",
            "run": run_id,
            "lease": lease,
            "lease_until": format_ts(lease_until) if lease_until else "",
            "tasks": [{"task_id": c.row.task_id, "previous": str(c.previous)} for c in claims],
        }
        if not self.sync and 0 < self._size < REWRITE_AT:
            self._append([{**record, "reset": True}], sync=False)
            return
        temp = self.path.with_name(self.path.name + ".new")
        line = _line({"v": VERSION, **record})
        try:
            fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            try:
                os.write(fd, line)
                if self.sync:
                    os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(temp, self.path)
            self._size = len(line)
            if self.sync:
                _fsync_dir(self.path.parent)
        except OSError as exc:
            if not self.problem:
                self.problem = f"host journal {self.path} not written ({exc.strerror or exc})"
            return
        self._dirty = True

    def clear(self) -> None:
        """Empty the journal (after the batch's results are written, or it was applied)."""
        if not self._dirty and not self.path.exists():
            return
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_TRUNC)
        except OSError:  # gone, or never writable (already warned)
            self._dirty = False
            return
        try:
            if self.sync:
                os.fsync(fd)
        finally:
            os.close(fd)
        self._dirty = False
        self._size = 0

    # --- reading ------------------------------------------------------------------

    def load(self) -> JournalState:
        """Read the journal; torn or damaged lines are counted and ignored."""
        state = JournalState()
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return state
        except OSError as exc:
            self.problem = f"host journal {self.path} not readable ({exc.strerror or exc})"
            return state
        state.size = len(data)
        for raw in data.splitlines(keepends=True):
            record = _parse(raw)
            if record is None:
                state.damaged += 1
                continue
            _apply_record(state, record)
        return state


def _apply_record(state: JournalState, record: Mapping[str, Any]) -> None:
    kind = record.get("kind")
    run = str(record.get("run", ""))
    if not run:
        return
    if kind == "claim":
        if record.get("reset"):  # it holds this claim only (``Journal.keep_claim``)
            state.runs.clear()
            state.leases.clear()
        if record.get("lease"):
            state.leases.add(str(record["lease"]))
        for task in record.get("tasks", ()):
            entry = state.entry(run, str(task["task_id"]))
            entry.previous = str(task.get("previous", ""))
    elif kind == "started":
        entry = state.entry(run, str(record["task_id"]))
        entry.started = True
        entry.attempt = int(record.get("attempt", 0))
        entry.previous = entry.previous or str(record.get("previous", ""))
    elif kind == "ended":
        entry = state.entry(run, str(record["task_id"]))
        entry.started = True
        entry.ended = ChangeSet(
            updates=[
                UpdateRow(
                    u["worksheet"],
                    u["key"],
                    int(u["row"]),
                    u["values"],
                    u.get("key_column", "task_id"),
                )
                for u in record.get("updates", ())
            ],
            appends=[AppendRow(a["worksheet"], a["values"]) for a in record.get("appends", ())],
        )


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


# --- applying a dead run's journal -------------------------------------------------


@dataclass
class Recovery:
    """What applying the journal writes, and what it found."""

    changes: ChangeSet = field(default_factory=ChangeSet)
    applied: int = 0  # known outcomes written
    returned: int = 0  # never-started tasks given back, no attempt counted
    unknown: int = 0  # started, unfinished: lease ended now, recovered per on_unknown
    left: int = 0  # rows already changed by a person or another run: left alone
    notes: list[str] = field(default_factory=list)

    def as_json(self) -> dict[str, int]:
        return {
            "applied": self.applied,
            "returned": self.returned,
            "unknown": self.unknown,
            "left": self.left,
        }


def plan_recovery(
    state: JournalState,
    rows: Sequence[QueueRow],
    *,
    now: datetime,
    run_id: str,
    settings: Settings,
) -> Recovery:
    """The change set that applies a dead run's journal to the current Queue rows.

    Only rows still ``processing`` under the journal's run id are changed; every update
    is re-located by ``task_id`` when applied, like every write.
    """
    out = Recovery()
    by_id = {r.task_id: r for r in rows}
    for dead, tasks in state.runs.items():
        for entry in tasks.values():
            row = by_id.get(entry.task_id)
            held = row is not None and row.status is Status.PROCESSING and row.lease_owner == dead
            if row is None or not held:
                if entry.ended is not None and not _landed(entry, row, dead):
                    out.left += 1
                    now_is = "gone from the Queue" if row is None else f"now {row.status_text!r}"
                    out.notes.append(
                        f"{entry.task_id}: run {dead} finished it as {entry.outcome} but its "
                        f"row is {now_is} (changed by a person or another run); left as it is"
                    )
                elif entry.ended is None and entry.started and row is not None:
                    out.left += 1  # another host recovered it, or a person changed it
                continue
            if entry.ended is not None:
                for update in entry.ended.updates:
                    out.changes.updates.append(
                        UpdateRow(
                            update.worksheet,
                            update.key,
                            row.row if update.key == entry.task_id else update.row,
                            update.values,
                            update.key_column,
                        )
                    )
                out.changes.appends.extend(entry.ended.appends)
                out.applied += 1
            elif entry.started:
                out.changes.updates.append(
                    UpdateRow(
                        settings.queue_sheet,
                        entry.task_id,
                        row.row,
                        {"lease_until": format_ts(now)},
                    )
                )
                out.unknown += 1
            else:
                previous = Status.parse(entry.previous) or Status.PENDING
                out.changes.extend(
                    release(
                        Claim(row, previous),
                        now=now,
                        run_id=run_id,
                        reason=f"run {dead} was killed before starting it (host journal)",
                        settings=settings,
                    )
                )
                out.returned += 1
    return out


def _landed(entry: TaskEntry, row: QueueRow | None, dead: str) -> bool:
    """The dead run's result request reached the row before the kill (nothing to do)."""
    return (
        row is not None
        and row.status is not None
        and str(row.status) == entry.outcome
        and row.lease_owner != dead
    )


def host_lock_held(lock_file: Path) -> bool | None:
    """Whether a process holds this host lock file now, read from ``/proc/locks`` (Linux);
    ``None`` when that cannot be told. Read-only: never takes the lock, so it cannot make a
    starting ``process`` think the queue is busy."""
    try:
        st = lock_file.stat()
        text = Path("/proc/locks").read_text()
    except OSError:
        return None
    ident = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    return any(
        len(fields) > 5 and fields[1] == "FLOCK" and fields[5] == ident
        for fields in (line.split() for line in text.splitlines())
    )
