"""Connectors on a sheet (docs/design.md §13): the ``Connectors`` worksheet, one row per
connector (``name``, ``state``, ``until``, ``reason``, ``failures``, ``running``,
``updated_at``, and sheetq's ``next_start``), read with the run's scan and written with its
last write, so the breaker and the rate limit's next start persist across runs.

A manager may type ``closed`` or ``paused`` into ``state``. sheetq tells a person's typing
from its own by the ``reason`` it writes: ``"STATE: why"`` for every state but ``closed``
(empty). A ``state`` that disagrees with its reason was typed by a person: ``paused`` is a
pause until resumed, ``closed`` a resume; each is logged (``paused``/``resumed``) and the
row rewritten in sheetq's words. Anything else typed there is put back on the next write.

Pure planning: rows in, a ``ChangeSet`` out; the runner and the commands do the I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, tzinfo
from typing import Any

from sheetq.config import ConnectorConfig, Settings
from sheetq.connectors import (
    DEFAULT_ESCALATE,
    Breaker,
    Change,
    State,
    effective,
    owed,
    pause,
    resume,
)
from sheetq.model import CONNECTOR_COLUMNS, CONNECTORS_SHEET, CellValue, Event, Row, Status
from sheetq.policy import is_due, log_values
from sheetq.port import ConnectorView
from sheetq.sheet.plan import QueueRow
from sheetq.sheet.store import AppendRow, ChangeSet, UpdateRow
from sheetq.times import format_ts, parse_ts

_STATES = {s.value: s for s in State}
# the columns a connector's alerts need: without them what was told cannot be recorded
ALERT_COLUMNS = ("opened_at", "alerted")


@dataclass
class Seen:
    """A connector's row as read: where it is, the state it holds (a person's edit
    applied), and the person's edit to log (``None``: none)."""

    row: int
    breaker: Breaker
    written: Breaker  # what the cells said in sheetq's terms (to know whether to write)
    edit: Change | None = None
    alerted: str = ""  # what Telegram was last told of it (``sheetq.connectors.owed``)
    typo: str = ""  # a ``state`` a person typed that sheetq does not know (kept as typed)

    def typo_note(self, name: str) -> str:
        """The note ``process`` and ``status`` print for a ``state`` sheetq does not know
        (``""``: none): the row, the value, and that the previous state holds."""
        if not self.typo:
            return ""
        known = ", ".join(s.value for s in State)
        return (
            f"'{CONNECTORS_SHEET}' row {self.row} ({name}): state {self.typo!r} is not one "
            f"sheetq knows ({known}); sheetq keeps its previous state "
            f"({self.written.state.value}): type `closed` or `paused` into the cell"
        )


def _time(value: object, tz: tzinfo, locale: str) -> datetime | None:
    found = parse_ts(value, tz, locale)
    return found if isinstance(found, datetime) else None


def _int(value: object) -> int:
    try:
        return max(0, int(float(str(value).strip() or 0)))
    except ValueError:
        return 0


def parse(rows: Sequence[Row], now: datetime, tz: tzinfo, locale: str) -> dict[str, Seen]:
    """The Connectors rows by name, persons' edits recognised (see the module's words)."""
    found: dict[str, Seen] = {}
    for row in rows:
        name = row.text("name").strip()
        if not name or name in found:
            continue
        typed = row.text("state").strip().lower()
        reason = row.text("reason").strip()
        prefix, _, why = reason.partition(":")
        ours = _STATES.get(prefix.strip(), State.CLOSED) if reason else State.CLOSED
        breaker = Breaker(
            state=ours,
            until=_time(row.values.get("until"), tz, locale),
            reason=why.strip(),
            failures=_int(row.values.get("failures")),
            next_at=_time(row.values.get("next_start"), tz, locale),
        )
        if ours in (State.OPEN, State.HALF_OPEN):  # a row from before `opened_at`: updated_at
            opened = row.values.get("opened_at") or row.values.get("updated_at")
            breaker = replace(breaker, opened_at=_time(opened, tz, locale))
        told = row.text("alerted").strip().lower()
        seen = Seen(row.number, breaker, breaker, alerted=told)
        if typed and typed not in _STATES:
            seen.typo = row.text("state").strip()
        elif typed != ours.value:
            if typed == State.PAUSED:
                seen.breaker, seen.edit = pause(breaker, now, None, "typed in the Connectors sheet")
            elif typed == State.CLOSED:
                seen.breaker, seen.edit = resume(breaker, "typed in the Connectors sheet")
        found[name] = seen
    return found


def values(breaker: Breaker, now: datetime, alerted: str = "") -> dict[str, CellValue]:
    """A connector's cells in sheetq's words (``running`` 0: on a sheet nothing runs
    between runs); ``alerted``: what Telegram was last told of it."""
    state = breaker.state
    opened = breaker.opened_at if state in (State.OPEN, State.HALF_OPEN) else None
    return {
        "state": state.value,
        "until": format_ts(breaker.until) if breaker.until and state is not State.CLOSED else "",
        "reason": "" if state is State.CLOSED else f"{state.value}: {breaker.reason}".strip(),
        "failures": breaker.failures,
        "running": 0,
        "updated_at": format_ts(now),
        "next_start": format_ts(breaker.next_at) if breaker.next_at else "",
        "opened_at": format_ts(opened) if opened else "",
        "alerted": alerted,
    }


def view_values(view: ConnectorView) -> dict[str, CellValue]:
    """A connector's cells in the mirror, from PostgreSQL's view of it (``next_start`` is
    the database's own, not shown; ``opened_at`` and ``alerted`` are a sheet's own, not
    written: a mirror made before them keeps working)."""
    state = view.state
    return {
        "state": state,
        "until": format_ts(view.until) if view.until else "",
        "reason": "" if state == State.CLOSED else f"{state}: {view.reason}".strip(),
        "failures": view.failures,
        "running": view.running,
        "updated_at": format_ts(view.updated_at) if view.updated_at else "",
        "next_start": "",
    }


def _same(a: Breaker, b: Breaker) -> bool:
    return (a.state, a.until, a.reason, a.failures, a.next_at, a.opened_at) == (
        b.state,
        b.until,
        b.reason,
        b.failures,
        b.next_at,
        b.opened_at,
    )


def writes(
    settings: Settings,
    seen: Mapping[str, Seen],
    final: Mapping[str, Breaker],
    changes: Sequence[tuple[str, Change]],
    *,
    now: datetime,
    run_id: str,
    alerted: Mapping[str, str] | None = None,
    lacking: Sequence[str] = (),
) -> ChangeSet:
    """The Connectors rows that changed (re-located by ``name``), rows for configured
    connectors the worksheet lacks, and one QueueLog row per change (persons' edits first).
    ``alerted``: what Telegram has now been told of a connector, where this run told it
    something (else its row keeps what it said). ``lacking``: columns the worksheet does
    not have (made by an older sheetq, before `sheetq init` adds them): not written."""
    told = dict(alerted or {})
    out = ChangeSet()
    log = settings.log_sheet
    for name, item in seen.items():
        if item.edit is not None:
            out.appends.append(
                AppendRow(log, _log(now, name, item.edit, item.breaker.state, run_id))
            )
    for name, change in changes:
        state = final[name].state if name in final else State.CLOSED
        out.appends.append(AppendRow(log, _log(now, name, change, state, run_id)))
    for name, breaker in final.items():
        found = seen.get(name)
        said = told.get(name, found.alerted if found else "")
        cells = {k: v for k, v in values(breaker, now, said).items() if k not in lacking}
        if found is None:
            out.appends.append(AppendRow(CONNECTORS_SHEET, {"name": name, **cells}))
        elif found.edit is not None or not _same(breaker, found.written) or said != found.alerted:
            out.updates.append(UpdateRow(CONNECTORS_SHEET, name, found.row, cells, "name"))
    return out


def _log(
    now: datetime, name: str, change: Change, state: State, run_id: str
) -> dict[str, CellValue]:
    return dict(
        log_values(now, "", name, Event(change.event), state.value, 0, change.message, run_id)
    )


def counted(found: ConnectorView, rows: Sequence[QueueRow], now: datetime) -> ConnectorView:
    """``found`` with its types' tasks counted over the Queue's ``rows`` at ``now``, the
    same for ``connector list`` and ``status`` (docs/connectors.md): running
    (``processing``) and waiting (``pending``/``retry`` and due: no ``next_retry_at``, an
    unreadable one, or one that has passed)."""
    types = set(found.types)
    running = waiting = 0
    for row in rows:
        if row.type not in types:
            continue
        if row.status is Status.PROCESSING:
            running += 1
        elif row.status in (Status.PENDING, Status.RETRY) and is_due(row.next_retry_at, now):
            waiting += 1
    return replace(found, running=running, waiting=waiting)


def owed_alerts(
    settings: Settings,
    seen: Mapping[str, Seen],
    breakers: Mapping[str, Breaker],
    waiting: Callable[[tuple[str, ...]], int],
    now: datetime,
) -> list[dict[str, Any]]:
    """The alerts the connectors of ``breakers`` owe at ``now`` (``sheetq.connectors.owed``
    from their state and their row's ``alerted``), by name, each as
    ``sheetq.connectors.alert_text`` reads it; ``waiting``: how many due tasks these types
    have."""
    out: list[dict[str, Any]] = []
    for name in sorted(breakers):
        breaker = breakers[name]
        config = settings.connectors.get(name)
        item = seen.get(name)
        after = config.escalate_after if config else DEFAULT_ESCALATE
        kind = owed(breaker, item.alerted if item else "", now, after)
        if not kind:
            continue
        out.append(
            {
                "name": name,
                "kind": kind,
                "until": breaker.until,
                "opened_at": breaker.opened_at,
                "reason": breaker.reason,
                "last_error": "",
                "waiting": waiting(config.types if config and config.types else (name,)),
            }
        )
    return out


def initial_rows(settings: Settings, present: Sequence[str], now: datetime) -> list[AppendRow]:
    """``init``: a closed row for each configured connector the worksheet lacks."""
    return [
        AppendRow(CONNECTORS_SHEET, {"name": name, **values(Breaker(), now)})
        for name in sorted(settings.connectors)
        if name not in present
    ]


def view(config: ConnectorConfig, item: Seen | None, now: datetime) -> ConnectorView:
    """One connector as ``connector list`` and ``status`` show it."""
    breaker = item.breaker if item else Breaker()
    state = effective(breaker, now)
    return ConnectorView(
        name=config.name,
        state=state.value,
        until=breaker.until if state in (State.OPEN, State.PAUSED) else None,
        reason=breaker.reason if state is not State.CLOSED else "",
        failures=breaker.failures,
        types=config.types,
        rate_limit=config.rate_limit.text() if config.rate_limit else "",
        concurrency=config.concurrency,
    )


__all__ = ["CONNECTORS_SHEET", "CONNECTOR_COLUMNS", "Seen", "initial_rows", "parse", "writes"]
