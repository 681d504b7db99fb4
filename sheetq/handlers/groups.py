"""Process groups of running command handlers, recorded on the host, so that what a killed
run left running is ended before its task runs again (docs/design.md §5 "A recovered task
never races its first attempt").

A command handler runs in its own session and process group (``sheetq.handlers.command``),
and whatever it starts (a shell script's ``curl``, a ``python`` child) belongs to that
group. The handler itself dies with sheetq (``PR_SET_PDEATHSIG``), its children do not.
So each group is recorded when its handler starts, as one small JSON file in
``<SHEETQ_LOCK_DIR>/groups/`` (host, process group id, the boot it belongs to, its
leader's start time, and the sheetq process that runs it), and the file is removed when
the handler ends. Before a run on the host recovers or returns tasks (``end_orphans``;
the sheet runner, ``sheetq process`` and ``sheetq worker`` on PostgreSQL), every group
whose sheetq process is gone is ended: SIGTERM, then SIGKILL after ``GRACE`` seconds;
and only if it is still that handler's group: same host and boot, the group still has a
live process, it is not the caller's own group, and its leader (if alive) is the process
that was started (same start time, so a reused process id is never signalled).

The record lives on the host, beside the lock and the journal, for every backend: only a
run on that host can signal the group; a run on another host is bounded by the task's
lease, as before.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import os
import signal
import socket
import threading
import time
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import asdict, dataclass
from pathlib import Path

log = logging.getLogger("sheetq.runner")

GRACE = 5.0  # seconds between SIGTERM and SIGKILL when ending a dead run's group
_POLL = 0.02  # seconds between checks that an ended group is gone


@dataclass(frozen=True)
class Group:
    """One running handler's process group. ``since`` and ``owner_since`` are start times in
    clock ticks after boot (``/proc/PID/stat``), 0 where unknown."""

    host: str
    pgid: int
    boot: str
    since: int
    owner: int  # the sheetq process running the handler
    owner_since: int
    task_id: str
    attempt: int
    run_id: str

    def describe(self) -> str:
        return f"process group {self.pgid} of {self.task_id} (attempt {self.attempt})"


@dataclass(frozen=True)
class _Recording:
    directory: Path
    task_id: str
    attempt: int
    run_id: str


_recording: ContextVar[_Recording | None] = ContextVar("sheetq_group_recording", default=None)
_live: dict[int, tuple[Group, Path | None]] = {}  # pgid → this process's running groups
_live_lock = threading.Lock()


def directory_for(lock_dir: Path) -> Path:
    """Where a host's group records live: ``<lock_dir>/groups``."""
    return lock_dir / "groups"


@contextlib.contextmanager
def recording(directory: Path, *, task_id: str, attempt: int, run_id: str) -> Iterator[None]:
    """Within this block (in this thread), each command handler started is recorded in
    ``directory`` as running ``task_id``'s ``attempt`` for run ``run_id``."""
    token = _recording.set(_Recording(directory, task_id, attempt, run_id))
    try:
        yield
    finally:
        _recording.reset(token)


def spawned(pid: int) -> None:
    """A handler was started as ``pid``, leader of its own process group: record it (in
    ``directory`` of the enclosing ``recording``; outside one, only in this process, for
    ``end_running``). A record that cannot be written is logged, never fatal."""
    where = _recording.get()
    host, boot, owner, owner_since = _self()
    group = Group(
        host=host,
        pgid=pid,
        boot=boot,
        since=_start_time(pid),
        owner=owner,
        owner_since=owner_since,
        task_id=where.task_id if where else "",
        attempt=where.attempt if where else 0,
        run_id=where.run_id if where else "",
    )
    path: Path | None = None
    if where is not None:
        path = where.directory / f"{group.host}-{pid}.json"
        try:
            where.directory.mkdir(parents=True, exist_ok=True)
            temp = path.with_suffix(".tmp")
            temp.write_text(json.dumps(asdict(group)), encoding="utf-8")
            os.replace(temp, path)
        except OSError as exc:
            log.info("handler's process group %d not recorded in %s: %s", pid, path, exc)
            path = None
    with _live_lock:
        _live[pid] = (group, path)


def finished(pid: int) -> None:
    """The handler started as ``pid`` ended (and, if it timed out, its group was killed):
    forget its record."""
    with _live_lock:
        _group, path = _live.pop(pid, (None, None))
    if path is not None:
        with contextlib.suppress(OSError):
            path.unlink()


def end_running() -> list[Group]:
    """SIGKILL the process group of every handler this process is running (sheetq is about
    to exit at once: a second SIGTERM), and drop their records. Returns those groups."""
    with _live_lock:
        running = list(_live.items())
        _live.clear()
    ended: list[Group] = []
    for pgid, (group, path) in running:
        if pgid != os.getpgrp():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pgid, signal.SIGKILL)
                ended.append(group)
        if path is not None:
            with contextlib.suppress(OSError):
                path.unlink()
    return ended


def end_orphans(directory: Path, *, grace: float = GRACE) -> list[str]:
    """End every recorded group on this host whose sheetq process is gone (a run killed with
    SIGKILL, a crash), per the module docstring. Returns one line for each group ended;
    records of groups already gone are dropped silently, records of live runs kept."""
    try:
        paths = sorted(directory.glob("*.json"))
    except OSError:
        return []
    host, boot, own = socket.gethostname(), _boot_id(), os.getpgrp()
    said: list[str] = []
    for path in paths:
        group = _load(path)
        if group is None:
            with contextlib.suppress(OSError):
                path.unlink()  # torn (a kill mid-write) or foreign: nothing to act on
            continue
        if group.host != host:
            continue  # a shared lock directory: that host's runs end their own
        if group.boot == boot and _alive(group.owner, group.owner_since):
            continue  # its run is alive and will end or report it
        if group.boot == boot and group.pgid != own and _still_ours(group):
            how = _end(group.pgid, grace)
            said.append(
                f"ended {group.describe()}, left running by killed run {group.run_id} "
                f"on this host ({how})"
            )
            log.info(said[-1])
        with contextlib.suppress(OSError):
            path.unlink()
    return said


# --- reading /proc ------------------------------------------------------------------


def _load(path: Path) -> Group | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return Group(**data)
    except (OSError, ValueError, TypeError):
        return None


@functools.lru_cache(maxsize=4)
def _identity(pid: int) -> tuple[str, str, int, int]:
    return socket.gethostname(), _boot_id(), pid, _start_time(pid)


def _self() -> tuple[str, str, int, int]:
    """This process: host, boot, pid and start time (read once per process)."""
    return _identity(os.getpid())


def _boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def _stat(pid: int) -> list[str] | None:
    """The fields of ``/proc/PID/stat`` after the command name (state first), or None."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text[text.rfind(")") + 2 :].split()


def _start_time(pid: int) -> int:
    fields = _stat(pid)
    return int(fields[19]) if fields and len(fields) > 19 else 0


def _alive(pid: int, since: int) -> bool:
    """Whether process ``pid`` is running and is the one that started at ``since``."""
    fields = _stat(pid)
    if fields is None:
        if Path("/proc/self/stat").exists():
            return False
        try:  # no /proc: ask the kernel
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    if fields[0] in ("Z", "X"):
        return False
    return not since or int(fields[19]) == since


def _members(pgid: int) -> list[int]:
    """Live (not zombie) processes whose process group is ``pgid``; None-safe on systems
    without /proc (then: the group answers signal 0, as one member)."""
    proc = Path("/proc")
    if not (proc / "self" / "stat").exists():
        try:
            os.killpg(pgid, 0)
        except (ProcessLookupError, PermissionError):
            return []
        return [pgid]
    found: list[int] = []
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        fields = _stat(int(entry.name))
        if fields and len(fields) > 2 and fields[0] not in ("Z", "X") and int(fields[2]) == pgid:
            found.append(int(entry.name))
    return found


def _still_ours(group: Group) -> bool:
    """The group still has a live process, and its leader, if alive, is the handler that was
    started (a process id reused by another program after the group died is left alone)."""
    if not _members(group.pgid):
        return False
    leader = _stat(group.pgid)
    if leader is None or leader[0] in ("Z", "X"):
        return True  # the leader died (with sheetq); the id stays the group's while it lives
    return not group.since or int(leader[19]) == group.since


def _end(pgid: int, grace: float) -> str:
    """SIGTERM the group, SIGKILL what is left after ``grace`` seconds; says which it took."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while _members(pgid):
        if time.monotonic() >= deadline:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pgid, signal.SIGKILL)
            return f"SIGKILL after {grace:g}s"
        time.sleep(_POLL)
    return "SIGTERM"
