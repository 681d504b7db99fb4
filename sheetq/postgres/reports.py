"""``status``, ``list``, ``show`` and ``stats`` on PostgreSQL, computed in SQL (docs/design.md §11).

Each gives the numbers the shared Python gives over every row (``sheetq.sheet.tally``,
``sheetq.stats.compute``, the filters of ``sheetq.cli.inspect``), so the ``--json``
documents are identical (``row`` is ``null``); ``tests/postgres/test_reports_sql.py``
compares both over random queues. The SQL groups and filters; the text rules (a type or a
status cell stripped of Python's whitespace, a status lower-cased, the error class of a
failed row) are applied in Python to the few distinct values the groups return, so they
are the shared code's own rules, not a second copy of them in SQL.

Times: the shared code reads a database time as ``format_ts`` text, i.e. truncated to the
second in UTC; the statements truncate likewise (``date_trunc('second', …)`` with the
session in UTC), so a time with microseconds compares as the Python path compares it.
Task ids are compared exactly (sheetq writes them without surrounding spaces).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg

from sheetq.config import Settings
from sheetq.model import LOG_COLUMNS, QUEUE_COLUMNS, WAITING, ErrorClass, Row, Status
from sheetq.port import BlockedGroup, DueAtPriority, QueueTally
from sheetq.postgres.codec import values_from_record
from sheetq.postgres.queries import QUERIES
from sheetq.postgres.session import Session
from sheetq.stats import UNRECORDED, Sample, Stats

# Python's str.strip() removes exactly these characters (``str.isspace``); btrim(x, WS)
# does the same in SQL (tests/postgres/test_reports_sql.py checks the list).
WS = (
    "\t\n\x0b\x0c\r\x1c\x1d\x1e\x1f \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004"
    "\u2005\u2006\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000"
)
_OUTCOMES = frozenset({"done", "retry", "failed", "skipped"})
_SIMPLE = frozenset({"enqueued", "duplicate", "conflict", "claimed", "skipped", "requeued"})
_WAITING = tuple(sorted(str(s) for s in WAITING))


def _utc(conn: psycopg.Connection[Any]) -> None:
    """Truncations and hour buckets in UTC, whatever the server's default zone."""
    conn.execute(QUERIES["utc_session"])


def _second(moment: datetime) -> datetime:
    """A time as the shared code reads it back from ``format_ts`` text (UTC, whole second)."""
    return moment.astimezone(UTC).replace(microsecond=0)


# --- status ------------------------------------------------------------------------------


def status_tally(session: Session, settings: Settings, now: datetime) -> QueueTally:
    """``sheetq status``'s counts by ``GROUP BY type, status`` (one statement) as of ``now``
    (the tasks held by gone runs: ``sheetq.postgres.presence``). The schema's CHECK admits
    only §3 statuses and typed times, so nothing is unrecognised or unparseable here."""
    due_before = now.replace(microsecond=0) + timedelta(seconds=1)  # trunc(t) <= now
    tally = QueueTally()
    with session.transaction() as conn:
        _utc(conn)
        params = {"queue": session.queue, "due": due_before, "ws": WS}
        groups = conn.execute(QUERIES["status_groups"], params).fetchall()
        levels = conn.execute(QUERIES["status_priorities"], params).fetchall()
        blocked = conn.execute(QUERIES["status_blocked_groups"], params).fetchall()
    oldest: datetime | None = None
    for g in groups:
        name, kind, n = str(g["status"]), str(g["type"]).strip(), int(g["n"])
        tally.total += n
        tally.counts[name] += n
        tally.by_type[kind or "(empty)"][name] += n
        tally.due += int(g["due"])
        tally.owed += int(g["owed"])
        if g["oldest"] is not None:
            first = _second(g["oldest"])
            oldest = first if oldest is None else min(oldest, first)
        if name in _WAITING and settings.type_config(kind).handler is None:
            tally.without_handler += n
    if oldest is not None:
        tally.oldest = max(0.0, (now - oldest).total_seconds())
    tally.by_priority = [
        DueAtPriority(
            int(r["priority"]),
            int(r["due"]),
            str(r["task_id"]),
            max(0.0, (now - _second(r["since"])).total_seconds()),
        )
        for r in levels
    ]
    tally.blocked = [
        BlockedGroup(
            str(r["group"]),
            str(r["task_id"]),
            str(r["type"]),
            str(r["status"]),
            str(r["error_class"]),
            int(r["waiting"]),
            None if r["oldest"] is None else max(0.0, (now - _second(r["oldest"])).total_seconds()),
        )
        for r in blocked
    ]
    return tally


# --- list and show -----------------------------------------------------------------------


def list_rows(
    session: Session, statuses: Sequence[str], types: Sequence[str], limit: int
) -> list[Row]:
    """``sheetq list``: Queue rows with one of ``statuses`` (all when empty) and one of
    ``types`` (all when empty), oldest first, at most ``limit`` (0: all)."""
    params = {
        "queue": session.queue,
        "statuses": list(statuses),
        "types": list(types),
        "limit": limit or None,
    }
    with session.transaction() as conn:
        records = conn.execute(QUERIES["list_tasks"], params).fetchall()
    return [Row(i, values_from_record(r, QUEUE_COLUMNS)) for i, r in enumerate(records, 2)]


def show_rows(session: Session, task_id: str) -> tuple[list[tuple[str, Row]], list[Row], int]:
    """``sheetq show``: the task's row in Queue, then in QueueArchive (worksheet, row), and
    its history in log order: the rows ``archive --log-older-than`` moved to
    ``sheetq_log_archive`` (the older ones), then those still in ``sheetq_log``; lookups by
    primary key and ``(queue, task_id, id)``. Also returns how many history rows came from
    ``sheetq_log_archive``."""
    settings = session.settings
    params = {"queue": session.queue, "task_id": task_id}
    with session.transaction() as conn:
        tasks = conn.execute(QUERIES["show_task"], params).fetchall()
        log = conn.execute(QUERIES["show_history"], params).fetchall()
    found = [
        (
            settings.archive_sheet if r["archived"] else settings.queue_sheet,
            Row(2, values_from_record(r, QUEUE_COLUMNS)),
        )
        for r in tasks
    ]
    history = [Row(n, values_from_record(r, LOG_COLUMNS)) for n, r in enumerate(log, 2)]
    archived = [r for r in log if r["archived"]]
    return found, history, len(archived)


# --- stats -------------------------------------------------------------------------------


def _outcome(event: str, status: str) -> str | None:
    """What a window log row with this event and (stripped, lower-cased) status counts as:
    ``done``/``retry``/``failed``/``expired``, ``""`` for an event counted on its own, or
    ``None`` for a late outcome refused after its lease ran out (counted nowhere)."""
    if event in _OUTCOMES and status != event:
        return None
    if event in _SIMPLE:
        return ""
    if event == "recovered":
        return status if status in ("done", "retry", "failed") else ""
    if event == "expired":
        return "expired"
    return event if event in ("done", "retry", "failed") else ""


def window_stats(
    session: Session, *, since: datetime, now: datetime, types: Collection[str] = ()
) -> Stats:
    """``sheetq stats`` over the log window ``since``.. (``sheetq.stats`` for the rules):
    counts from one ``GROUP BY`` over the window's rows (index on ``(queue, ts)``); the
    times to done and handler durations as ``percentile_disc`` (nearest rank, as
    ``sheetq.stats.percentile``); the failures' error classes by a join to the task's row."""
    stats = Stats(since=since, now=now)
    start = _second(since)
    wanted = set(types)
    with session.transaction() as conn:
        _utc(conn)
        groups = conn.execute(
            QUERIES["stats_groups"], {"queue": session.queue, "since": start}
        ).fetchall()
        events: Counter[str] = Counter()
        done_pairs: set[tuple[str, str]] = set()
        failed_pairs: set[tuple[str, str]] = set()
        firsts: dict[tuple[str, str], int] = {}  # (hour, outcome) → first log id
        for g in groups:
            if wanted and str(g["type"]).strip() not in wanted:
                continue
            event, raw = str(g["event"]), str(g["status"])
            outcome = _outcome(event, raw.strip().lower())
            if outcome is None:
                continue
            n = int(g["n"])
            events[event] += n
            if outcome == "retry":
                stats.retry += n
            elif outcome == "done":
                stats.done += n
                done_pairs.add((event, raw))
            elif outcome in ("failed", "expired"):
                stats.failed += n
                if outcome == "expired":
                    stats.failed_by_error_class["expired"] += n
                else:
                    failed_pairs.add((event, raw))
            if outcome in ("done", "failed", "expired"):
                kind = "done" if outcome == "done" else "failed"
                hour = g["hour"].astimezone(UTC).strftime("%Y-%m-%dT%H:00:00Z")
                stats.by_hour.setdefault(hour, Counter())[kind] += n
                key = (hour, kind)
                firsts[key] = min(firsts.get(key, int(g["first"])), int(g["first"]))
        for hour, counter in stats.by_hour.items():  # outcomes in the order they first came
            stats.by_hour[hour] = _in_order(counter, {k: firsts[(hour, k)] for k in counter})
        for name in (
            "enqueued", "duplicate", "conflict", "claimed", "skipped",
            "expired", "recovered", "requeued", "archived",
        ):  # fmt: skip
            setattr(stats, name, events[name])
        params = {
            "queue": session.queue,
            "since": start,
            "ws": WS,
            "all": not wanted,
            "types": sorted(wanted),
        }
        if done_pairs:
            _to_done(conn, stats, sorted(done_pairs), params)
        if failed_pairs:
            _failure_classes(conn, stats, sorted(failed_pairs), params)
        waiting = conn.execute(QUERIES["stats_waiting"], {"queue": session.queue}).fetchall()
    firsts_waiting = [
        _second(w["first"]) for w in waiting if not wanted or str(w["type"]).strip() in wanted
    ]
    if firsts_waiting:
        stats.oldest_waiting = (now - min(firsts_waiting)).total_seconds()
    return stats


def _in_order(counter: Counter[str], first: dict[str, int]) -> Counter[str]:
    return Counter({kind: counter[kind] for kind in sorted(counter, key=first.__getitem__)})


def _pairs(pairs: Sequence[tuple[str, str]]) -> dict[str, list[str]]:
    return {"ev": [e for e, _ in pairs], "st": [s for _, s in pairs]}


def _to_done(
    conn: psycopg.Connection[Any],
    stats: Stats,
    pairs: Sequence[tuple[str, str]],
    params: dict[str, Any],
) -> None:
    """Enqueue-to-done seconds of each task first done in the window (from its earliest
    ``enqueued`` row, at any time) and handler durations of its ``done`` rows: their
    nearest-rank p50/p95 (``percentile_disc``) and how many there are."""
    done_event = [p for p in pairs if p[0] == "done"]
    row = conn.execute(QUERIES["stats_to_done"], params | _pairs(pairs)).fetchone()
    assert row is not None
    stats.to_done = _sample(row)
    if not done_event:
        return
    row = conn.execute(QUERIES["stats_handler_ms"], params | _pairs(done_event)).fetchone()
    assert row is not None
    stats.handler_ms = _sample(row)


def _sample(row: Any) -> Sample:
    """A ``count, p50, p95`` result row as ``stats``' summary of its measurements."""
    n = int(row["n"])
    if n == 0:
        return Sample(0, None, None)
    return Sample(n, int(row["p50"]), int(row["p95"]))


def _failure_classes(
    conn: psycopg.Connection[Any],
    stats: Stats,
    pairs: Sequence[tuple[str, str]],
    params: dict[str, Any],
) -> None:
    """Failures (other than expiry) in the window by the error class their log message
    starts with (``sheetq.stats.logged_class``), else by that of the task's row in Queue,
    else QueueArchive, while that row is ``failed``; ``unrecorded`` otherwise."""
    classes = {"classes": [str(c) for c in ErrorClass]}
    groups = conn.execute(
        QUERIES["stats_failure_classes"], params | _pairs(pairs) | classes
    ).fetchall()
    for g in groups:
        error_class = str(g["error_class"] or "").strip().lower()
        failed = Status.parse(g["status"]) is Status.FAILED
        kept = error_class if failed and error_class else UNRECORDED
        stats.failed_by_error_class[g["logged"] or kept] += int(g["n"])
