"""The person-edit sweep (docs/design.md §5 "Rows are addressed by `task_id`, in every
write"): for every command that writes, for every boundary between two of its Sheets requests,
each edit a person makes in the browser is applied at that boundary (the emulator's
``after(k, …)`` hook), and the promises are checked:

- ids: the task ids in Queue ∪ QueueArchive are those of before (minus a row the person
  deleted, plus what the command creates), none twice;
- bystanders: no row other than the command's targets changes any cell, a manager's columns
  and rows included;
- targets: every target ends as the command says;
- log: QueueLog agrees with the Queue (last event's status = row status; archived → last
  event ``archived``) and no change is logged twice.

Each test is one (command, edit) pair; it measures the command's request count N on an
unedited copy of the fixture, then loops over the boundaries k = 1..N-1, collects every
broken promise and fails once with the whole list. The cases run are counted in ``CASES``
and printed by the last test of the module (run the whole module to see it).

To extend: a command is a ``Command`` in ``_commands()`` (its fixture rows from the ``Row``
builder, its arguments, its targets and a check of what they become); an edit is a function
of a ``Ctx`` in ``EDITS``. Fixtures are built once per command and copied for each case.
"""

from __future__ import annotations

import hashlib
import json
import unicodedata
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from sheetq.model import QUEUE_COLUMNS
from tests.conftest import GoogleBook, Result, make_google, run_cli, write_config
from tests.fakes.sheets_emulator import SheetsEmulator
from tests.fakes.telegram_fake import FORUM_CHAT_ID, FakeBotAPI

pytestmark = [pytest.mark.google, pytest.mark.slow, pytest.mark.xdist_group("person_sweep")]

NOW = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)
QUEUE, LOG, ARCHIVE = "Queue", "QueueLog", "QueueArchive"
LOG_ARCHIVE = "QueueLogArchive"
NOTE = "manager: call the supplier about the March invoices"
ORIGINAL_COLUMNS = QUEUE_COLUMNS[:9]  # the Apps Script layout sheetq adopts (docs/design.md §2)


# --- the fixture builder ----------------------------------------------------------------------


@dataclass
class Row:
    """One Queue row of a fixture, as sheetq would have left it.

    ``age`` is how long before NOW it was created; ``kind`` goes into the payload (the
    process handler's instruction); ``alerted`` marks a failed row whose alert went out.
    """

    name: str
    status: str
    age: timedelta
    type: str = "job"
    kind: str = "ok"
    retry_count: int = 0
    alerted: bool = True
    notes: str = ""
    task_id: str = ""  # filled by the builder
    payload: dict[str, Any] = field(default_factory=dict)
    raw_payload: str = ""  # payload_json as an old script wrote it (adoption fixtures)

    @property
    def payload_text(self) -> str:
        """payload_json of an adopted row: the old script's text, or compact JSON in the
        payload's own key order (as JavaScript's JSON.stringify writes it)."""
        if self.raw_payload or not self.type:
            return self.raw_payload
        return json.dumps(self.payload, separators=(",", ":"), ensure_ascii=False)


def hours(n: float) -> timedelta:
    return timedelta(hours=n)


def days(n: float) -> timedelta:
    return timedelta(days=n)


def ts(when: datetime) -> str:
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


def canonical(payload: Any) -> str:
    """docs/design.md §4: sorted keys, compact separators, non-ASCII kept, strings NFC."""

    def nfc(value: Any) -> Any:
        if isinstance(value, str):
            return unicodedata.normalize("NFC", value)
        if isinstance(value, dict):
            return {nfc(k): nfc(v) for k, v in value.items()}
        if isinstance(value, list):
            return [nfc(v) for v in value]
        return value

    return json.dumps(nfc(payload), sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def sha(payload: Any) -> str:
    return "sha256:" + hashlib.sha256(canonical(payload).encode("utf-8")).hexdigest()


def build_rows(rows: list[Row]) -> list[Row]:
    """Give each row a task id (sortable, unique) and a payload naming it."""
    for i, row in enumerate(rows, start=1):
        row.task_id = row.task_id or f"t_01KSWEEP{i:017d}"
        row.payload = row.payload or {"order_id": f"A-{i}", "name": row.name, "kind": row.kind}
    return rows


def queue_values(rows: list[Row], header: list[str]) -> list[list[Any]]:
    """The Queue cells of ``rows`` in the order of ``header`` (cells the header lacks dropped)."""
    out = []
    for row in rows:
        created = NOW - row.age
        updated = created + timedelta(minutes=1) if row.status != "pending" else created
        cells: dict[str, Any] = {
            "task_id": row.task_id,
            "created_at": ts(created),
            "type": row.type,
            "payload_json": canonical(row.payload),
            "status": row.status,
            "retry_count": row.retry_count,
            "idempotency_key": f"{row.type}:order_id={row.payload['order_id']}",
            "updated_at": ts(updated),
            "payload_hash": sha(row.payload),
            "notes": row.notes,
        }
        if row.status == "retry":
            cells["next_retry_at"] = ts(NOW + hours(1))
            cells["last_error"] = "503 from the CRM"
            cells["error_class"] = "transient"
        if row.status == "failed":
            cells["last_error"] = "bad data: field missing"
            cells["error_class"] = "permanent"
            cells["alerted_at"] = ts(updated) if row.alerted else ""
        if row.status == "done":
            cells["result"] = f"crm-{row.name}"
        out.append([cells.get(name, "") for name in header])
    return out


def log_values(rows: list[Row], header: list[str]) -> list[list[Any]]:
    """QueueLog rows telling each fixture row's history, oldest first: enqueued, then (for a
    finished or retrying row) claimed and its outcome, then its alert; in ``header`` order."""
    out: list[list[Any]] = []

    def event(at: datetime, row: Row, name: str, status: str, retry_count: int) -> None:
        cells = {"ts": ts(at), "task_id": row.task_id, "type": row.type, "event": name}
        cells |= {"status": status, "retry_count": retry_count, "run_id": "run_fixture"}
        out.append([cells.get(column, "") for column in header])

    for row in sorted(rows, key=lambda r: -r.age.total_seconds()):
        created = NOW - row.age
        ended = created + timedelta(minutes=1)
        event(created, row, "enqueued", "pending", 0)
        if row.status in ("done", "failed", "retry"):
            event(created, row, "claimed", "processing", max(row.retry_count - 1, 0))
            event(ended, row, row.status, row.status, row.retry_count)
        if row.status == "skipped":
            event(ended, row, "skipped", "skipped", row.retry_count)
        if row.status == "failed" and row.alerted:
            event(ended, row, "alerted", "failed", row.retry_count)
    return out


# --- commands ---------------------------------------------------------------------------------


@dataclass
class Ctx:
    """One case: the emulator, the spreadsheet copy, and what the command is about."""

    emu: SheetsEmulator
    key: str
    spec: Command
    calls: Path  # handler calls, one task id per line
    fake: FakeBotAPI | None

    @property
    def book(self) -> GoogleBook:
        return GoogleBook(self.emu, self.key)


@dataclass
class Snap:
    """Queue, QueueArchive, QueueLog and QueueLogArchive as records (by header name)."""

    queue: list[dict[str, str]]
    archive: list[dict[str, str]]
    log: list[dict[str, str]]
    log_archive: list[dict[str, str]] = field(default_factory=list)

    @property
    def history(self) -> list[dict[str, str]]:
        """Every log row, oldest first: QueueLogArchive's, then QueueLog's."""
        return self.log_archive + self.log

    def rows(self, ident: str) -> dict[str, tuple[str, dict[str, str]]]:
        """identity → (sheet, cells) over Queue and QueueArchive (first one wins)."""
        out: dict[str, tuple[str, dict[str, str]]] = {}
        for sheet, records in ((QUEUE, self.queue), (ARCHIVE, self.archive)):
            for record in records:
                value = record.get(ident, "")
                if value and value not in out:
                    out[value] = (sheet, _cells(record))
        return out

    def loose(self, ident: str) -> Counter[tuple[tuple[str, str], ...]]:
        """Queue rows without an identity (a manager's note rows), as sorted non-empty cells."""
        return Counter(
            tuple(sorted((k, v) for k, v in _cells(r).items() if v))
            for r in self.queue
            if not r.get(ident, "")
        )


def _cells(record: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in record.items() if k != "_row"}


def snapshot(book: GoogleBook) -> Snap:
    def records(sheet: str) -> list[dict[str, str]]:
        try:
            return book.records(sheet)
        except KeyError:  # the worksheet does not exist (yet)
            return []

    return Snap(records(QUEUE), records(ARCHIVE), records(LOG), records(LOG_ARCHIVE))


Check = Callable[[Ctx, Snap, Snap, list[Result]], list[str]]


@dataclass
class Command:
    """A command of the sweep: its fixture, its arguments, its targets and what they become."""

    name: str
    rows: list[Row]
    args: list[str]
    targets: Callable[[dict[str, Row]], set[str]]  # identities of the rows it may change
    check: Check
    bystander: str  # the row name a person deletes (never a target)
    new_tasks: int = 0  # rows the command adds
    stdin: str | None = None
    rerun: bool = True  # a user runs it again (cron, a webhook retry)
    ident: str = "task_id"  # what identifies a row across the run
    adopt: bool = False  # the fixture is an Apps Script sheet, not an initialised one
    telegram: bool = False
    archive_notes: bool = True  # the manager added the notes column to QueueArchive too
    log_edits: bool = False  # also swept with a person sorting QueueLog (LOG_EDITS)

    @property
    def by_name(self) -> dict[str, Row]:
        return {r.name: r for r in self.rows}

    def identity(self, row: Row) -> str:
        return row.task_id if self.ident == "task_id" else row.payload_text


def base_rows(
    overrides: dict[str, dict[str, Any]] | None = None, extra: Row | None = None
) -> list[Row]:
    """The common fixture: finished and waiting rows, created_at out of sheet order (a person
    sorted them by status once), a manager's notes on some; ``overrides`` change fields of
    named rows, ``extra`` is added in the middle."""
    rows = [
        Row("done_old", "done", hours(5), notes="called back"),
        Row("pend_2", "pending", hours(4), notes="VIP"),
        Row("failed_1", "failed", hours(3), retry_count=1),
        Row("pend_1", "pending", hours(1)),
        Row("retry_1", "retry", hours(2), retry_count=1),
        Row("failed_2", "failed", hours(7), retry_count=5, notes="ask Olena"),
        Row("skipped_1", "skipped", hours(6)),
        Row("done_new", "done", hours(0.5)),
        Row("later_1", "pending", hours(2.5), type="later"),
    ]
    for row in rows:
        for name, value in (overrides or {}).get(row.name, {}).items():
            setattr(row, name, value)
    if extra is not None:
        rows.insert(4, extra)
    return build_rows(rows)


# per-command target checks -----------------------------------------------------------------


def _new_rows(before: Snap, after: Snap) -> list[dict[str, str]]:
    old = {r["task_id"] for r in before.queue + before.archive}
    return [r for r in after.queue + after.archive if r.get("task_id") and r["task_id"] not in old]


def _events(snap: Snap, task_id: str, event: str) -> int:
    return sum(1 for e in snap.history if e["task_id"] == task_id and e["event"] == event)


def _expect_new(payloads: list[dict[str, Any]]) -> Check:
    def check(ctx: Ctx, before: Snap, after: Snap, results: list[Result]) -> list[str]:
        problems = []
        new = _new_rows(before, after)
        for payload in payloads:
            found = [r for r in new if r["payload_json"] == canonical(payload)]
            if len(found) != 1:
                problems.append(f"{payload}: {len(found)} rows, expected 1")
                continue
            row = found[0]
            if row["status"] != "pending" or row["payload_hash"] != sha(payload):
                problems.append(f"{payload}: status {row['status']!r}, hash {row['payload_hash']}")
            if _events(after, row["task_id"], "enqueued") != 1:
                problems.append(f"{payload}: {_events(after, row['task_id'], 'enqueued')} enqueued")
        return problems + _enqueued_once(results)

    return check


def _enqueued_once(results: list[Result]) -> list[str]:
    """The sender's retry (the second run) is told "duplicate" and adds nothing."""
    try:
        first, second = (json.loads(r.stdout) for r in results)
    except ValueError:
        return ["the --json output is not one JSON document"]
    if "results" in second:  # --jsonl
        if second["enqueued"] != 0:
            return [f"the same --jsonl again enqueued {second['enqueued']} more"]
        return []
    if (second["outcome"], second["task_id"]) != ("duplicate", first["task_id"]):
        return [f"the same enqueue again: {second['outcome']} {second['task_id']}"]
    return []


def _expect_status(status: str, event: str) -> Check:
    def check(ctx: Ctx, before: Snap, after: Snap, results: list[Result]) -> list[str]:
        problems = []
        rows = after.rows("task_id")
        for task_id in ctx.spec.targets(ctx.spec.by_name):
            sheet, row = rows.get(task_id, ("", {}))
            name = _name(ctx, task_id)
            if (sheet, row.get("status")) != (QUEUE, status):
                problems.append(f"{name}: {row.get('status')!r} in {sheet or 'no sheet'}")
            if _events(after, task_id, event) != 1:
                problems.append(f"{name}: {_events(after, task_id, event)} {event!r} log rows")
        return problems

    return check


PROCESS_EXPECT = {"ok": ("done", "0"), "retry": ("retry", "1"), "fail": ("failed", "1")}


def _check_process(ctx: Ctx, before: Snap, after: Snap, results: list[Result]) -> list[str]:
    problems = []
    rows = after.rows("task_id")
    calls = Counter(ctx.calls.read_text().split()) if ctx.calls.exists() else Counter()
    for task_id in ctx.spec.targets(ctx.spec.by_name):
        row = next(r for r in ctx.spec.rows if r.task_id == task_id)
        status, retry_count = PROCESS_EXPECT[row.kind]
        got = rows.get(task_id, ("", {}))[1]
        if (got.get("status"), got.get("retry_count")) != (status, retry_count):
            problems.append(
                f"{row.name}: status {got.get('status')!r} retry_count {got.get('retry_count')!r}"
                f", expected {status} {retry_count}"
            )
        if calls[task_id] != 1:
            problems.append(f"{row.name}: handler ran {calls[task_id]} times over the two runs")
        if row.kind == "fail":
            if not got.get("alerted_at"):
                problems.append(f"{row.name}: failed without alerted_at")
            if _events(after, task_id, "alerted") != 1:
                problems.append(f"{row.name}: {_events(after, task_id, 'alerted')} alerted rows")
    for record in after.queue:
        if record.get("status") == "processing":
            problems.append(f"{_name(ctx, record.get('task_id', ''))}: left processing")
    problems += _one_message(ctx)
    return problems


def _one_message(ctx: Ctx) -> list[str]:
    assert ctx.fake is not None
    sent = len(ctx.fake.messages)
    return [] if sent == 1 else [f"Telegram received {sent} messages, expected 1"]


def _check_alert(ctx: Ctx, before: Snap, after: Snap, results: list[Result]) -> list[str]:
    problems = []
    rows = after.rows("task_id")
    for task_id in ctx.spec.targets(ctx.spec.by_name):
        got = rows.get(task_id, ("", {}))[1]
        name = _name(ctx, task_id)
        if got.get("status") != "failed" or not got.get("alerted_at"):
            problems.append(f"{name}: status {got.get('status')!r}, alerted_at empty")
        if _events(after, task_id, "alerted") != 1:
            problems.append(f"{name}: {_events(after, task_id, 'alerted')} alerted rows")
    for task_id, (_, got) in rows.items():
        if got.get("status") == "failed" and not got.get("alerted_at"):
            problems.append(f"{_name(ctx, task_id)}: failed row left unmarked")
    return problems + _one_message(ctx)


def _check_archive(ctx: Ctx, before: Snap, after: Snap, results: list[Result]) -> list[str]:
    problems = []
    rows = after.rows("task_id")
    old = before.rows("task_id")
    targets = ctx.spec.targets(ctx.spec.by_name)
    for task_id in targets:
        sheet, got = rows.get(task_id, ("", {}))
        name = _name(ctx, task_id)
        # a cell of a column QueueArchive lacks is dropped (archive warns once)
        kept = {c: v for c, v in old[task_id][1].items() if ctx.spec.archive_notes or c != "notes"}
        if sheet != ARCHIVE:
            problems.append(f"{name}: in {sheet or 'neither sheet'}, expected QueueArchive")
        elif _diff(kept, got):
            problems.append(f"{name}: archived with other cells: {_diff(kept, got)}")
        if sheet == ARCHIVE and any(r.get("task_id") == task_id for r in after.queue):
            problems.append(f"{name}: also still in Queue")
        if _events(after, task_id, "archived") != 1:
            problems.append(f"{name}: {_events(after, task_id, 'archived')} archived log rows")
    for record in after.archive:
        if record.get("task_id") not in targets:
            name = _name(ctx, record.get("task_id", ""))
            problems.append(f"{name} ({record.get('status')}) in QueueArchive")
    return problems


def _check_archive_logs(ctx: Ctx, before: Snap, after: Snap, results: list[Result]) -> list[str]:
    """archive, then the log rows older than 30 days moved to QueueLogArchive."""
    return _check_archive(ctx, before, after, results) + _check_log_moved(
        ctx, before, after, results
    )


def _check_log_moved(ctx: Ctx, before: Snap, after: Snap, results: list[Result]) -> list[str]:
    """The log rows older than 30 days moved to QueueLogArchive: none lost, none twice, none
    newer moved, every older one moved — unless a person's sort of QueueLog made the command
    refuse (it says so: not in time order), when the older ones may stay."""
    problems: list[str] = []
    cutoff = ts(NOW - days(30))
    refused = any(r.code == 2 and "not in time order" in r.stderr for r in results)

    def rows(records: list[dict[str, str]]) -> Counter[tuple[str, ...]]:
        return Counter(tuple(sorted(_cells(r).items())) for r in records)

    was = rows(before.history)
    now = rows([e for e in after.history if e["event"] not in ("archived", "recovered")])
    if now != was:
        problems.append(f"log rows lost {dict(was - now)} or made up {dict(now - was)}")
    newer = [e for e in after.log_archive if e["ts"] >= cutoff]
    older = [e for e in after.log if e["ts"] < cutoff]
    if newer or (older and not refused):
        problems.append(f"{len(newer)} newer log rows archived, {len(older)} older left")
    return problems


def _check_init(ctx: Ctx, before: Snap, after: Snap, results: list[Result]) -> list[str]:
    problems = []
    rows = after.rows(ctx.spec.ident)
    was = before.rows(ctx.spec.ident)
    for ident in ctx.spec.targets(ctx.spec.by_name):
        got = rows.get(ident, ("", {}))[1]
        payload = json.loads(ident)
        where = _name(ctx, ident)
        if got.get("payload_hash") != sha(payload):
            problems.append(f"{where}: payload_hash {got.get('payload_hash')!r} not its own")
        for column in ("task_id", "idempotency_key", "created_at"):
            if not got.get(column):
                problems.append(f"{where}: {column} left empty")
        for column, value in was.get(ident, ("", {}))[1].items():
            if value and got.get(column) != value:
                problems.append(f"{where}: {column} {value!r} became {got.get(column)!r}")
    return problems


def _all_targets(by_name: dict[str, Row]) -> set[str]:
    return set()


def _names(*names: str) -> Callable[[dict[str, Row]], set[str]]:
    return lambda by_name: {by_name[n].task_id for n in names}


NEW_ONE = {"order_id": "NEW-1", "name": "Юлія", "phone": "+380501234567"}
NEW_LINES = [{"order_id": f"NEW-{i}", "n": i} for i in (2, 3, 4)]


def _commands() -> dict[str, Command]:
    base = {row.name: row for row in base_rows()}
    process_rows = build_rows(
        [
            Row("done_old", "done", hours(5), notes="called back"),
            Row("ok_1", "pending", hours(1), kind="ok"),
            Row("fail_1", "pending", hours(3), kind="fail", notes="VIP"),
            Row("failed_old", "failed", hours(8), retry_count=1),
            Row("ok_2", "pending", hours(0.5), kind="ok"),
            Row("retry_1", "pending", hours(2), kind="retry"),
            Row("later_1", "pending", hours(2.5), type="later"),
            Row("skipped_1", "skipped", hours(6)),
            Row("done_new", "done", hours(0.2)),
        ]
    )
    archive_rows = build_rows(
        [
            Row("failed_old", "failed", days(45), retry_count=1),
            Row("done_a", "done", days(40), notes="called back"),
            Row("done_b", "done", days(39)),
            Row("done_c", "done", days(38)),
            Row("pend_a", "pending", hours(2), type="later"),
            Row("pend_b", "pending", hours(1), type="later", notes="VIP"),
            Row("pend_c", "pending", hours(3), type="later"),
            Row("done_fresh", "done", days(2)),
            Row("retry_a", "retry", hours(1), retry_count=1),
        ]
    )
    alert_rows = base_rows(
        {"failed_1": {"alerted": False}, "failed_2": {"alerted": False}},
        extra=Row("failed_3", "failed", hours(9), retry_count=1),
    )
    commands = [
        Command(
            "enqueue",
            base_rows(),
            ["enqueue", "job", json.dumps(NEW_ONE, ensure_ascii=False), "--json"],
            _all_targets,
            _expect_new([NEW_ONE]),
            bystander="pend_1",
            new_tasks=1,
        ),
        Command(
            "enqueue_jsonl",
            base_rows(),
            ["enqueue", "job", "-", "--jsonl", "--json"],
            _all_targets,
            _expect_new(NEW_LINES),
            bystander="pend_1",
            new_tasks=3,
            stdin="\n".join(
                json.dumps(p)
                for p in [*NEW_LINES, base["pend_2"].payload]  # + a duplicate of pend_2
            )
            + "\n",
        ),
        Command(
            "process",
            process_rows,
            ["process", "--json"],
            _names("ok_1", "fail_1", "ok_2", "retry_1"),
            _check_process,
            bystander="done_old",
            telegram=True,
        ),
        Command(  # the pipelined shape: batch 1's results ride in batch 2's claim write
            "process_pipelined",
            process_rows,
            ["process", "--batch-size", "2", "--until-empty", "--json"],
            _names("ok_1", "fail_1", "ok_2", "retry_1"),
            _check_process,
            bystander="done_old",
            telegram=True,
        ),
        Command(
            "requeue",
            base_rows(),
            ["requeue", "--status", "failed", "--json"],
            _names("failed_1", "failed_2"),
            _expect_status("pending", "requeued"),
            bystander="done_old",
            rerun=False,
        ),
        Command(
            "skip",
            base_rows(),
            ["skip", "--task", base["pend_2"].task_id, "--reason", "customer cancelled", "--json"],
            _names("pend_2"),
            _expect_status("skipped", "skipped"),
            bystander="done_old",
            rerun=False,
        ),
        Command(
            "archive",
            archive_rows,
            ["archive", "--older-than", "30d", "--json"],
            _names("done_a", "done_b", "done_c"),
            _check_archive,
            bystander="failed_old",
        ),
        Command(  # the manager's notes column is in Queue only
            "archive_notes_in_queue_only",
            archive_rows,
            ["archive", "--older-than", "30d", "--json"],
            _names("done_a", "done_b", "done_c"),
            _check_archive,
            bystander="failed_old",
            archive_notes=False,
        ),
        Command(
            "archive_with_log",
            archive_rows,
            ["archive", "--older-than", "30d", "--log-older-than", "30d", "--json"],
            _names("done_a", "done_b", "done_c"),
            _check_archive_logs,
            bystander="failed_old",
            archive_notes=False,
            log_edits=True,
        ),
        Command(
            "archive_log_only",
            archive_rows,
            ["archive", "--log-older-than", "30d", "--json"],
            _all_targets,
            _check_log_moved,
            bystander="failed_old",
            archive_notes=False,
            log_edits=True,
        ),
        Command(
            "init_adopt",
            adopt_rows(),
            ["init"],
            lambda by_name: {
                r.payload_text for r in by_name.values() if r.type and not r.raw_payload
            },
            _check_init,
            bystander="bad",
            ident="payload_json",
            adopt=True,
        ),
        Command(
            "alert",
            alert_rows,
            ["alert", "--json"],
            _names("failed_1", "failed_2"),
            _check_alert,
            bystander="done_old",
            telegram=True,
        ),
    ]
    return {c.name: c for c in commands}


def adopt_rows() -> list[Row]:
    """An Apps Script queue: no payload_hash, some rows without task_id or created_at."""
    return build_rows(
        [
            Row("old_1", "done", days(20), type="lead", notes="called back"),
            Row("old_2", "pending", days(1), type="lead", task_id="AS-1002"),
            Row("old_3", "failed", days(3), type="order", retry_count=2, notes="VIP"),
            Row("old_4", "pending", days(2), type="lead"),
            Row("old_5", "done", days(10), type="order", task_id="AS-1005"),
            Row("old_6", "pending", hours(5), type="lead"),
            Row("sep", "", days(0), type="", notes="— rows below came from the old form —"),
            Row("old_7", "", hours(1), type="lead"),
            Row("bad", "failed", days(4), type="lead", raw_payload="{not json", notes="typo"),
        ]
    )


def adopt_values(rows: list[Row]) -> list[list[Any]]:
    """The Apps Script layout: nine original columns and a notes column; created_at only on
    every other row, task_id only where the old script wrote one."""
    out: list[list[Any]] = [[*ORIGINAL_COLUMNS, "notes"]]
    for i, row in enumerate(rows):
        if not row.type:  # a manager's separator row
            out.append(["" for _ in ORIGINAL_COLUMNS] + [row.notes])
            continue
        created = ts(NOW - row.age) if i % 2 == 0 else ""
        task_id = row.task_id if row.task_id.startswith("AS-") else ""
        out.append(
            [
                task_id,
                created,
                row.type,
                row.payload_text,
                row.status,
                row.retry_count,
                "",
                "bad data" if row.status == "failed" else "",
                "",
                row.notes,
            ]
        )
    return out


COMMANDS = _commands()


# --- person edits -----------------------------------------------------------------------------


def _header(ctx: Ctx) -> list[str]:
    return [str(h) for h in ctx.emu.values(ctx.key, QUEUE)[0]]


def _sort(column: str, ascending: bool = True) -> Callable[[Ctx], None]:
    def edit(ctx: Ctx) -> None:
        ctx.emu.sort_rows(ctx.key, QUEUE, _header(ctx).index(column), ascending=ascending)

    return edit


def _reverse(ctx: Ctx) -> None:
    ctx.emu.reverse_rows(ctx.key, QUEUE)


def _insert_note(ctx: Ctx) -> None:
    ctx.emu.insert_rows(ctx.key, QUEUE, 2, count=2)
    letter = _letter(_header(ctx).index("notes"))
    ctx.emu.set_values(ctx.key, QUEUE, [[NOTE]], f"{letter}2")


def _delete_bystander(ctx: Ctx) -> None:
    grid = ctx.emu.values(ctx.key, QUEUE)
    column = [str(h) for h in grid[0]].index(ctx.spec.ident)
    wanted = ctx.spec.identity(ctx.spec.by_name[ctx.spec.bystander])
    for number, row in enumerate(grid[1:], start=2):
        if len(row) > column and str(row[column]) == wanted:
            ctx.emu.delete_rows(ctx.key, QUEUE, number)
            return
    raise AssertionError(f"bystander {ctx.spec.bystander} not found in Queue")


def _move(column: str, to: int) -> Callable[[Ctx], None]:
    def edit(ctx: Ctx) -> None:
        ctx.emu.move_column(ctx.key, QUEUE, _header(ctx).index(column), to)

    return edit


def _letter(index: int) -> str:
    from sheetq.sheet.store import column_letter

    return column_letter(index)


EDITS: dict[str, Callable[[Ctx], None]] = {
    "sort_created_asc": _sort("created_at"),
    "sort_created_desc": _sort("created_at", ascending=False),
    "sort_status": _sort("status"),
    "reverse": _reverse,
    "insert_note_rows": _insert_note,
    "delete_bystander": _delete_bystander,
    "move_status_to_A": _move("status", 0),
    "move_notes_to_B": _move("notes", 1),
}


def _sort_log(ctx: Ctx) -> None:
    header = [str(h) for h in ctx.emu.values(ctx.key, LOG)[0]]
    ctx.emu.sort_rows(ctx.key, LOG, header.index("task_id"))


def _reverse_log(ctx: Ctx) -> None:
    ctx.emu.reverse_rows(ctx.key, LOG)


# a person sorting QueueLog: swept for the commands that move log rows by position
LOG_EDITS: dict[str, Callable[[Ctx], None]] = {
    "sort_log_by_task": _sort_log,
    "reverse_log": _reverse_log,
}
ALL_EDITS = {**EDITS, **LOG_EDITS}


def _pairs() -> list[tuple[str, str]]:
    """(command, edit): every edit of the Queue for every command, and the edits of QueueLog
    for the commands that move log rows."""
    return [(c, e) for c in COMMANDS for e in EDITS] + [
        (c, e) for c, spec in COMMANDS.items() if spec.log_edits for e in LOG_EDITS
    ]


def _edits_of(spec: Command) -> list[str]:
    return [*EDITS, *(LOG_EDITS if spec.log_edits else ())]


# --- the invariants ---------------------------------------------------------------------------


def _diff(old: dict[str, str], new: dict[str, str]) -> str:
    names = [c for c in {**old, **new} if c and old.get(c, "") != new.get(c, "")]
    return ", ".join(f"{c}: {old.get(c, '')!r}→{new.get(c, '')!r}" for c in names)


def check_ids(ctx: Ctx, before: Snap, after: Snap, edit: str) -> list[str]:
    """No task lost, none made up, none twice."""
    ident = ctx.spec.ident
    problems = []
    old = set(before.rows(ident))
    if edit == "delete_bystander":
        old.discard(ctx.spec.identity(ctx.spec.by_name[ctx.spec.bystander]))
    now = Counter(r[ident] for r in after.queue + after.archive if r.get(ident))
    lost = old - set(now)
    if lost:
        problems.append(f"lost {sorted(_name(ctx, i) for i in lost)}")
    made = set(now) - old
    if edit == "delete_bystander":
        made.discard(ctx.spec.identity(ctx.spec.by_name[ctx.spec.bystander]))
    if len(made) != ctx.spec.new_tasks:
        problems.append(f"{len(made)} new rows, expected {ctx.spec.new_tasks}")
    twice = sorted(_name(ctx, i) for i, n in now.items() if n > 1)
    if twice:
        problems.append(f"twice: {twice}")
    if ident != "task_id":
        ids = Counter(r["task_id"] for r in after.queue + after.archive if r.get("task_id"))
        if [i for i, n in ids.items() if n > 1]:
            problems.append(f"task_id twice: {[i for i, n in ids.items() if n > 1]}")
    return problems


def check_bystanders(ctx: Ctx, before: Snap, after: Snap, edit: str) -> list[str]:
    """Rows other than the targets keep every cell, in the same worksheet; note rows stay."""
    ident = ctx.spec.ident
    targets = ctx.spec.targets(ctx.spec.by_name)
    deleted = ctx.spec.identity(ctx.spec.by_name[ctx.spec.bystander])
    problems = []
    now = after.rows(ident)
    for key, (sheet, cells) in before.rows(ident).items():
        if key in targets or (edit == "delete_bystander" and key == deleted):
            continue
        if key not in now:
            continue  # reported by check_ids
        new_sheet, new_cells = now[key]
        if new_sheet != sheet:
            problems.append(f"{_name(ctx, key)}: moved to {new_sheet}")
        changed = _diff(cells, new_cells)
        if changed and ident == "payload_json":  # init: a bystander may gain new columns only
            changed = _diff(cells, {c: v for c, v in new_cells.items() if c in cells})
        if changed:
            problems.append(f"{_name(ctx, key)} ({cells.get('status')}): {changed}")
    expected = before.loose(ident)
    if edit == "insert_note_rows":
        expected[(("notes", NOTE),)] += 1
    got = after.loose(ident)
    if got != expected:
        problems.append(f"note rows {dict(expected - got) or ''} became {dict(got - expected)}")
    return problems


def check_log(ctx: Ctx, before: Snap, after: Snap, edit: str) -> list[str]:
    """Last event's status = row status (archived: last event archived); nothing logged twice."""
    if ctx.spec.adopt:
        return []
    problems = []
    last: dict[str, dict[str, str]] = {}
    for entry in sorted(after.history, key=lambda e: e["ts"]):  # a person may sort QueueLog
        last[entry["task_id"]] = entry
    for sheet, records in ((QUEUE, after.queue), (ARCHIVE, after.archive)):
        for record in records:
            task_id = record.get("task_id", "")
            if not task_id:
                continue
            entry = last.get(task_id)
            if entry is None:
                problems.append(f"{_name(ctx, task_id)}: no log row")
            elif sheet == ARCHIVE and entry["event"] != "archived":
                problems.append(f"{_name(ctx, task_id)}: archived, last event {entry['event']}")
            elif sheet == QUEUE and entry["status"] != record.get("status"):
                problems.append(
                    f"{_name(ctx, task_id)}: row {record.get('status')!r}, last log "
                    f"{entry['event']}/{entry['status']!r}"
                )
    seen = Counter(
        (e["task_id"], e["event"], e["status"], e["retry_count"])
        for e in after.history
        if e["event"] not in ("duplicate", "conflict")
    )
    twice = [f"{_name(ctx, t)} {ev}" for (t, ev, _, _), n in seen.items() if n > 1]
    if twice:
        problems.append(f"logged twice: {sorted(twice)}")
    return problems


def _name(ctx: Ctx, key: str) -> str:
    for row in ctx.spec.rows:
        if key in (row.task_id, row.payload_text):
            return row.name
    return key[:40]


# --- running a case ---------------------------------------------------------------------------


@dataclass
class Template:
    """A spreadsheet holding a command's fixture, copied for each case."""

    key: str
    snap: Snap


_TEMPLATES: dict[str, Template] = {}


def template(spec: Command, emu: SheetsEmulator, monkeypatch: pytest.MonkeyPatch) -> Template:
    """Build the command's fixture spreadsheet once per session."""
    if spec.name in _TEMPLATES:
        return _TEMPLATES[spec.name]
    book = make_google(emu, monkeypatch)
    if spec.adopt:
        emu.add_sheet(book.key, QUEUE)
        emu.set_values(book.key, QUEUE, adopt_values(spec.rows), user_entered=False)
    else:
        result = run_cli(["init"])
        assert result.code == 0, result.stderr
        header = [str(h) for h in book.grid(QUEUE)[0]] + ["notes"]
        widened = (QUEUE, ARCHIVE) if spec.archive_notes else (QUEUE,)
        for title in widened:  # init sized the grids; a manager adds a column
            emu.widen(book.key, title, len(header))
        emu.set_values(book.key, QUEUE, [header], "A1", user_entered=False)
        if spec.archive_notes:
            emu.set_values(book.key, ARCHIVE, [header], "A1", user_entered=False)
        emu.set_values(book.key, QUEUE, queue_values(spec.rows, header), "A2", user_entered=False)
        log_header = [str(h) for h in book.grid(LOG)[0]]
        emu.set_values(book.key, LOG, log_values(spec.rows, log_header), "A2", user_entered=False)
    _TEMPLATES[spec.name] = Template(book.key, snapshot(book))
    return _TEMPLATES[spec.name]


HANDLERS = """\
import os
from sheetq import FailTask, RetryTask


def run(task):
    with open(os.environ["SWEEP_CALLS"], "a") as calls:
        calls.write(task.task_id + "\\n")
    kind = task.payload.get("kind")
    if kind == "retry":
        raise RetryTask("CRM busy")
    if kind == "fail":
        raise FailTask("bad data: phone missing")
    return "crm-" + task.payload["order_id"]
"""


@pytest.fixture
def setup(
    sheets_emulator: SheetsEmulator,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> Iterator[Callable[[Command], Ctx]]:
    """Configuration (python handlers, a fake Bot API), fixed time, and a case factory."""
    make_google(sheets_emulator, monkeypatch)  # the emulator's URL, retries without waiting
    (Path.cwd() / "sweep_handlers.py").write_text(HANDLERS, encoding="utf-8")
    write_config(
        "[types.job]\npython = 'sweep_handlers:run'\nmax_age = '30d'\n"
        "[types.lead]\npython = 'sweep_handlers:run'\n"
        "[types.order]\npython = 'sweep_handlers:run'\n"
    )
    monkeypatch.setenv("SHEETQ_NOW", ts(NOW))
    with FakeBotAPI() as fake:
        monkeypatch.setenv("SHEETQ_TELEGRAM_API_URL", fake.base_url)
        monkeypatch.setenv("TELEGRAM_BOT_TOKEN", fake.token)
        monkeypatch.setenv("TELEGRAM_CHAT_ID", str(FORUM_CHAT_ID))
        monkeypatch.setenv("SHEETQ_TELEGRAM_TIMEOUT", "2")
        counter = iter(range(10**6))

        def case(spec: Command) -> Ctx:
            base = template(spec, sheets_emulator, monkeypatch)
            key = sheets_emulator.copy_spreadsheet(base.key)
            monkeypatch.setenv("SHEETQ_SPREADSHEET", key)
            calls = tmp_path / f"calls-{next(counter)}"
            monkeypatch.setenv("SWEEP_CALLS", str(calls))
            fake.messages.clear()
            return Ctx(sheets_emulator, key, spec, calls, fake if spec.telegram else None)

        yield case
    sheets_emulator.clear_faults()


def run_case(ctx: Ctx, edit: str | None, k: int | None) -> tuple[int, list[str]]:
    """Run the command (edited after request ``k``), then again if a user would; returns the
    request count of the first run and every broken promise."""
    emu, spec = ctx.emu, ctx.spec
    before = _TEMPLATES[spec.name].snap
    emu.clear_faults()
    emu.reset_counts()
    emu.errors.clear()
    problems: list[str] = []
    if edit is not None and k is not None:
        emu.after(k, lambda _emu: ALL_EDITS[edit](ctx))
    first = run_cli(spec.args, input=spec.stdin)
    count = emu.count()
    if emu.pending_hooks():
        problems.append(f"edit: not applied (the run made {count} requests)")
    problems += [f"edit: {e.strip().splitlines()[-1]}" for e in emu.errors]
    if first.code != 0 and not _refused_log_order(edit, first):
        problems.append(f"exit: {first.code}: {first.stderr.strip()[-300:]}")
    label = edit or "none"
    middle = check_ids(ctx, before, snapshot(ctx.book), label)
    results = [first]
    if spec.rerun:
        second = run_cli(spec.args, input=spec.stdin)
        results.append(second)
        if second.code != 0 and not _refused_log_order(edit, second):
            problems.append(f"exit (2nd run): {second.code}: {second.stderr.strip()[-300:]}")
    after = snapshot(ctx.book)
    final = check_ids(ctx, before, after, label)
    problems += [f"ids after the 1st run: {p}" for p in middle if p not in final]
    problems += [f"ids: {p}" for p in final]
    problems += [f"bystanders: {p}" for p in check_bystanders(ctx, before, after, label)]
    problems += [f"targets: {p}" for p in spec.check(ctx, before, after, results)]
    problems += [f"log: {p}" for p in check_log(ctx, before, after, label)]
    return count, problems


def _refused_log_order(edit: str | None, result: Result) -> bool:
    """A person sorted QueueLog: `archive --log-older-than` refuses, exit 2, saying so."""
    return edit in LOG_EDITS and result.code == 2 and "not in time order" in result.stderr


# --- the sweep --------------------------------------------------------------------------------


@pytest.mark.parametrize("echo", ["echo", "no-echo"])
@pytest.mark.parametrize(("command", "edit"), _pairs())
def test_person_edit_at_every_boundary(
    setup: Callable[[Command], Ctx],
    sheets_emulator: SheetsEmulator,
    command: str,
    edit: str,
    echo: str,
) -> None:
    """Each person edit between any two requests of a writing command keeps every promise,
    whether the endpoint echoes writes (Google does) or not (then sheetq reads to verify)."""
    spec = COMMANDS[command]
    sheets_emulator.echo_writes = echo == "echo"
    try:
        n, baseline = run_case(setup(spec), None, None)
        assert baseline == [], f"{command} without an edit already breaks: {baseline}"
        assert n >= 2, f"{command} made {n} request(s): no boundary to edit at"
        failures = []
        for k in range(1, n):
            _, problems = run_case(setup(spec), edit, k)
            failures += [f"{command} × {edit} × after request {k}/{n}: {p}" for p in problems]
    finally:
        sheets_emulator.echo_writes = True
    assert not failures, f"{len(failures)} broken promises:\n" + "\n".join(failures)


def test_sweep_size(setup: Callable[[Command], Ctx], capsys: pytest.CaptureFixture[str]) -> None:
    """Every writing command makes at least two requests, so the sweep edits it at one
    boundary or more; prints how many (command, boundary, edit) cases the sweep runs."""
    lines, total = [], 0
    for command, spec in COMMANDS.items():
        for echo in ("echo", "no-echo"):
            spec_setup = setup(spec)
            spec_setup.emu.echo_writes = echo == "echo"
            try:
                n, baseline = run_case(spec_setup, None, None)
            finally:
                spec_setup.emu.echo_writes = True
            assert baseline == [] and n >= 2, (command, echo, n, baseline)
            cases = (n - 1) * len(_edits_of(spec))
            total += cases
            lines.append(f"{command} ({echo}): N={n} requests, {cases} cases")
    with capsys.disabled():
        print("\nperson-edit sweep:", *lines, f"total: {total} cases", sep="\n  ")
