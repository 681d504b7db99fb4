"""Sheets API cost against the loopback emulator: requests per task (sheetq and a
row-by-row queue as a naive Apps Script does it) and bytes read per run.

The emulator counts requests as Google's quota does (one per HTTP request; 429 and 5xx
not counted). Bytes read are the JSON bodies the emulator sent back, without HTTP headers.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any

from benchmarks._inproc import environment, sheetq
from benchmarks._report import Measure
from benchmarks._workbook import NOW, ROOT, TYPES, log_records, queue_records
from sheetq.model import LOG_COLUMNS, QUEUE_COLUMNS
from tests.fakes.sheets_emulator import SheetsEmulator

BENCH_DIR = Path(__file__).resolve().parent
READ_OPS = frozenset({"spreadsheets.get", "values.get", "values.batchGet"})
WRITE_QUOTA = 60  # write requests per minute per user (reference §7); reads alike
WEBHOOKS = 60  # enqueues one by one in the webhook row


def bench_config() -> str:
    """sheetq.toml: every benchmark type runs the instant Python handler ``_handlers:ok``."""
    return "".join(
        f'[types.{name}]\npython = "_handlers:ok"\ncwd = "{BENCH_DIR}"\n'
        for name in ("job", *TYPES)
    )


class CountingEmulator(SheetsEmulator):
    """The emulator, also summing the size of every response body it sends (bytes)."""

    def __init__(self) -> None:
        super().__init__(seed=5)
        self.bytes_sent = 0

    def _respond(self, handler: Any, status: int, payload: Any, headers: dict[str, str]) -> None:  # type: ignore[override]
        data = json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
        with self._lock:
            self.bytes_sent += len(data)
        SheetsEmulator._respond(handler, status, payload, headers)

    def reads_writes(self) -> tuple[int, int]:
        """Counted (reads, writes) since the last ``reset_counts``."""
        with self._lock:
            counted = [r for r in self.requests if r.counted]
        reads = sum(1 for r in counted if r.op in READ_OPS)
        return reads, len(counted) - reads


class Session:
    """A workbook in the emulator, the environment sheetq needs, and a scratch folder."""

    def __init__(self, emu: CountingEmulator, key: str, work: Path) -> None:
        self.emu, self.key, self.work = emu, key, work
        config = work / "sheetq.toml"
        config.write_text(bench_config())
        self.env = {
            "SHEETQ_SPREADSHEET": key,
            "SHEETQ_SHEETS_API_URL": emu.base_url,
            "SHEETQ_CONFIG": str(config),
            "SHEETQ_LOCK_DIR": str(work / "locks"),
            "NO_PROXY": "127.0.0.1,localhost",
        }

    def run(self, args: Sequence[str], stdin: str = "", **extra: str) -> Any:
        with environment({**self.env, **extra}, self.work):
            ran = sheetq(args, stdin=stdin)
        if ran.code != 0:
            raise RuntimeError(f"sheetq {' '.join(args)}: exit {ran.code}: {ran.stderr.strip()}")
        return json.loads(ran.stdout) if "--json" in args else ran.stdout

    def counted(self, action: Callable[[], Any]) -> tuple[int, int, int, Any]:
        """(reads, writes, response bytes, result) of ``action``."""
        self.emu.reset_counts()
        before = self.emu.bytes_sent
        result = action()
        reads, writes = self.emu.reads_writes()
        return reads, writes, self.emu.bytes_sent - before, result


def _jsonl(count: int, start: int = 0) -> str:
    return "".join(json.dumps({"n": i}) + "\n" for i in range(start, start + count))


def _per_task(name: str, reads: int, writes: int, tasks: int, note: str) -> Measure:
    per_task = (reads + writes) / tasks
    busiest = max(reads, writes) / tasks
    rate = f"{WRITE_QUOTA / busiest:,.0f} tasks/min within 60 req/min" if busiest else ""
    return Measure(
        "1 requests",
        name,
        round(per_task, 3),
        "req/task",
        f"{reads + writes} = {reads} reads + {writes} writes; {rate}; {note}".strip("; "),
    )


def request_costs(
    emu: CountingEmulator, tasks: int, sizes: Sequence[int], hooks: int = WEBHOOKS
) -> list[Measure]:
    """`process --until-empty` per batch size, the row-by-row baseline, and enqueue (one
    task, ``hooks`` webhooks one by one, a 1,000-line ``--jsonl``)."""
    out: list[Measure] = []
    with tempfile.TemporaryDirectory(prefix="sheetq-bench-") as tmp:
        for size in sizes:
            session = _session(emu, Path(tmp) / f"b{size}")
            session.run(["enqueue", "job", "--jsonl", "--json"], stdin=_jsonl(tasks))
            args = ["process", "--batch-size", str(size), "--until-empty", "--json"]
            reads, writes, _, doc = session.counted(partial(session.run, args))
            assert doc["done"] == tasks, doc
            note = f"{tasks} tasks, {doc['batches']} batches"
            out.append(_per_task(f"process --batch-size {size}", reads, writes, tasks, note))
        session = _session(emu, Path(tmp) / "naive")
        session.run(["enqueue", "job", "--jsonl", "--json"], stdin=_jsonl(tasks))
        reads, writes, _, done = session.counted(lambda: row_by_row(emu, session.key))
        assert done == tasks
        out.append(
            _per_task(
                "row-by-row baseline (Apps Script style)",
                reads,
                writes,
                tasks,
                f"{tasks} tasks through gspread",
            )
        )
        session = _session(emu, Path(tmp) / "enqueue")
        reads, writes, _, _ = session.counted(
            lambda: session.run(["enqueue", "job", '{"n": 1}', "--json"])
        )
        out.append(_per_task("enqueue, 1 task", reads, writes, 1, ""))
        reads, writes, _, _ = session.counted(partial(webhooks, session, hooks))
        note = f"{hooks} separate `enqueue` calls, one task each"
        out.append(_per_task("enqueue one by one (webhooks)", reads, writes, hooks, note))
        reads, writes, _, doc = session.counted(
            lambda: session.run(["enqueue", "job", "--jsonl", "--json"], stdin=_jsonl(1000, 10))
        )
        assert doc["enqueued"] == 1000, doc
        out.append(_per_task("enqueue --jsonl, 1,000 lines", reads, writes, 1000, ""))
    return out


def _within_quota(name: str, reads: int, writes: int, tasks: int, note: str) -> Measure:
    """Tasks per minute when the run is paced by the quota: 60 reads and 60 writes per
    minute per user (Google Sheets API limits), so it takes max(reads, writes) / 60 min."""
    minutes = max(reads, writes) / WRITE_QUOTA
    return Measure(
        "1b throughput",
        name,
        round(tasks / minutes) if minutes else 0,
        "tasks/min",
        f"{reads} reads + {writes} writes for {tasks:,} tasks; {note}".strip("; "),
    )


def end_to_end(emu: CountingEmulator, counts: Sequence[int]) -> list[Measure]:
    """Tasks per minute within the quota, end to end: `enqueue --jsonl` then
    `process --until-empty --batch-size 100`; webhooks enqueued one by one; next to the
    physical floor (1 read + 1 write per batch of 100) and a row-by-row queue."""
    out: list[Measure] = []
    with tempfile.TemporaryDirectory(prefix="sheetq-bench-") as tmp:
        for count in counts:
            session = _session(emu, Path(tmp) / f"e2e{count}")
            r1, w1, _, _ = session.counted(
                lambda s=session, c=count: s.run(
                    ["enqueue", "job", "--jsonl", "--json"], stdin=_jsonl(c)
                )
            )
            args = ["process", "--batch-size", "100", "--until-empty", "--json"]
            r2, w2, _, doc = session.counted(partial(session.run, args))
            assert doc["done"] == count, doc
            out.append(
                _within_quota(
                    f"enqueue --jsonl + process, {count:,} tasks, batch 100",
                    r1 + r2,
                    w1 + w2,
                    count,
                    f"{doc['batches']} batches",
                )
            )
        session = _session(emu, Path(tmp) / "hooks")
        reads = writes = 0
        for n in range(20):
            r, w, _, _ = session.counted(
                lambda n=n: session.run(["enqueue", "job", json.dumps({"n": n}), "--json"])
            )
            reads, writes = reads + r, writes + w
        out.append(_within_quota("webhooks enqueued one by one", reads, writes, 20, "20 tasks"))
    out.append(_within_quota("physical floor: 1 read + 1 write per batch of 100", 1, 1, 100, ""))
    return out


def webhooks(session: Session, count: int, start: int = 0) -> None:
    """``count`` webhooks arriving one by one: one ``sheetq enqueue`` each, every third one
    a repeat delivery of the one before (a duplicate: nothing added, still a read and a
    log-row write). Event ids from ``start``."""
    for n in range(count):
        event = start + (n - 1 if n % 3 == 2 else n)
        body = {"event_id": f"E-{event}", "n": event}
        doc = session.run(["enqueue", "job", json.dumps(body), "--json"])
        assert doc["outcome"] == ("duplicate" if n % 3 == 2 else "enqueued"), doc


def _session(emu: CountingEmulator, work: Path, key: str | None = None) -> Session:
    work.mkdir(parents=True, exist_ok=True)
    session = Session(emu, key or emu.create_spreadsheet(), work)
    if key is None:
        session.run(["init", "--no-format"])
    return session


def row_by_row(emu: SheetsEmulator, key: str) -> int:
    """A naive queue: find pending rows, then per task read its row, write ``processing``,
    write status, counter and updated_at one cell each, append one log row. Returns the
    number of tasks done."""
    import gspread
    import requests

    from sheetq.sheet.store import column_letter

    class Redirect(requests.Session):
        def request(self, method: str, url: str, *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]
            url = url.replace("https://sheets.googleapis.com", emu.base_url)
            return super().request(method, url, *args, **kwargs)

    session = Redirect()
    session.trust_env = False
    client = gspread.Client(auth=None, session=session)  # type: ignore[arg-type]
    book = client.open_by_key(key)
    queue, log = book.worksheet("Queue"), book.worksheet("QueueLog")
    rows = queue.get_all_values()
    col = {name: column_letter(i) for i, name in enumerate(rows[0])}
    done = 0
    stamp = NOW.strftime("%Y-%m-%dT%H:%M:%SZ")
    for number, row in enumerate(rows[1:], start=2):
        if row[rows[0].index("status")] != "pending":
            continue
        task = queue.row_values(number)
        queue.update_acell(f"{col['status']}{number}", "processing")
        queue.update_acell(f"{col['status']}{number}", "done")  # the handler ran
        queue.update_acell(f"{col['retry_count']}{number}", 0)
        queue.update_acell(f"{col['updated_at']}{number}", stamp)
        log.append_row([stamp, task[0], "job", "done", "done", 0, "", "naive", ""])
        done += 1
    session.close()
    return done


# --- bytes read at scale -------------------------------------------------------------------


def _grid(records: list[dict[str, Any]], columns: Sequence[str]) -> list[list[Any]]:
    return [list(columns)] + [["" if r.get(c) is None else r[c] for c in columns] for r in records]


def bytes_read(emu: CountingEmulator, sizes: Sequence[int]) -> list[Measure]:
    """Bytes Google would send back to `process` (nothing due), `status` and `stats`, for a
    Queue of each size with a QueueLog four times as long."""
    out: list[Measure] = []
    with tempfile.TemporaryDirectory(prefix="sheetq-bench-") as tmp:
        for size in sizes:
            queue = queue_records(size)
            log = log_records(queue)
            key = emu.create_spreadsheet(
                sheets=("Queue", "QueueArchive", "QueueLog"), rows=len(log) + 2
            )
            emu.set_values(key, "Queue", _grid(queue, QUEUE_COLUMNS), user_entered=False)
            emu.set_values(key, "QueueLog", _grid(log, LOG_COLUMNS), user_entered=False)
            emu.set_values(key, "QueueArchive", [list(QUEUE_COLUMNS)], user_entered=False)
            session = _session(emu, Path(tmp) / f"g{size}", key)
            now = {"SHEETQ_NOW": NOW.strftime("%Y-%m-%dT%H:%M:%SZ")}
            for name, args in (
                ("process, nothing due", ["process", "--json"]),
                ("status", ["status", "--json"]),
                ("stats", ["stats", "--json"]),
            ):
                try:
                    reads, writes, sent, _ = session.counted(partial(session.run, args, **now))
                except RuntimeError as exc:
                    out.append(
                        Measure(
                            "2 bytes (google)",
                            f"{name} @ {size:,} rows",
                            "n/a",
                            "KB read",
                            str(exc)[:80],
                        )
                    )
                    continue
                out.append(
                    Measure(
                        "2 bytes (google)",
                        f"{name} @ {size:,} rows",
                        round(sent / 1024, 1),
                        "KB read",
                        f"{reads + writes} requests",
                    )
                )
            del queue, log
            emu._books.pop(key, None)  # free the emulator's memory before the next size
    return out


__all__ = ["ROOT", "CountingEmulator", "bytes_read", "request_costs", "row_by_row"]
