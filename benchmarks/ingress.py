"""The two ends of the pipeline, measured (docs/design.md §15): webhooks per minute within
the Sheets API quota (`sheetq serve` against one `sheetq enqueue` process per webhook), and
`sheetq serve`'s requests per second and latency on a local workbook and on PostgreSQL.

    python benchmarks/ingress.py                  # about a minute on 2 cores
    python benchmarks/ingress.py --requests 500 --skip-postgres --markdown

Everything runs on this machine: the Sheets API emulator of tests/fakes (counting requests
as Google's quota does), an embedded PostgreSQL (tests/pgserver.py, durability on), and
`sheetq serve` as a real process. The load generator is httpx in this process, signing each
webhook (hmac-sha256); on 2 shared cores it takes a good part of the CPU, so the rates are
a floor. One table on stdout, progress on stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import hmac
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402

from benchmarks._report import Measure, render_json, render_markdown, render_text  # noqa: E402

SECRET = "bench-secret-0123456789"
QUOTA = 60  # Sheets API requests per minute per user, reads and writes each
CONFIG = """\
[ingress]
listen = "127.0.0.1:0"
batch_window = "1s"

[types.lead]
key_fields = ["lead_id"]

[ingress.routes.lead]
type = "lead"
signature = "hmac-sha256"
secret = "${BENCH_SECRET}"
"""


def _say(text: str) -> None:
    sys.stderr.write(f"ingress: {text}\n")


def _env(work: Path, **extra: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("SHEETQ_", "TELEGRAM_")) and k != "GOOGLE_APPLICATION_CREDENTIALS"
    }
    env.update(
        SHEETQ_CONFIG=str(work / "sheetq.toml"),
        SHEETQ_LOCK_DIR=str(work / "locks"),
        BENCH_SECRET=SECRET,
        PYTHONPATH=str(ROOT),
        NO_PROXY="127.0.0.1,localhost",
    )
    env.update(extra)
    return env


def _sheetq(env: dict[str, str], *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    ran = subprocess.run(
        [sys.executable, "-m", "sheetq", *args],
        input=stdin,
        capture_output=True,
        text=True,
        env=env,
        cwd=env["SHEETQ_LOCK_DIR"].rsplit("/", 1)[0],
        check=False,
    )
    if ran.returncode != 0:
        raise RuntimeError(f"sheetq {' '.join(args)}: exit {ran.returncode}: {ran.stderr}")
    return ran


@contextmanager
def _serve(env: dict[str, str], work: Path) -> Iterator[str]:
    """`sheetq serve` running; yields its base URL."""
    log = work / "serve.log"
    with log.open("w") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "sheetq", "serve"], stderr=err, env=env, cwd=work
        )
    try:
        deadline = time.monotonic() + 30
        while not (found := re.search(r"listening on (http://\S+)", log.read_text())):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"sheetq serve did not start: {log.read_text()}")
            time.sleep(0.05)
        yield found.group(1)
    finally:
        proc.terminate()
        proc.wait(30)


def _body(n: int) -> tuple[bytes, dict[str, str]]:
    body = json.dumps({"lead_id": f"L-{n}", "name": "Олена", "phone": "+380501234567"})
    raw = body.encode()
    return raw, {"X-Signature": hmac.new(SECRET.encode(), raw, hashlib.sha256).hexdigest()}


async def _load(
    url: str, count: int, *, concurrency: int, spread: float = 0.0, start: int = 0
) -> tuple[float, list[float]]:
    """``count`` webhooks, at most ``concurrency`` at once (or started evenly over
    ``spread`` seconds); (wall seconds, each latency in seconds). Every answer must be 202."""
    latencies: list[float] = []
    gate = asyncio.Semaphore(concurrency)
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(timeout=60, limits=limits) as client:

        async def one(n: int) -> None:
            if spread:
                await asyncio.sleep(spread * n / count)
            raw, headers = _body(start + n)
            async with gate:
                began = time.perf_counter()
                answer = await client.post(f"{url}/hooks/lead", content=raw, headers=headers)
                latencies.append(time.perf_counter() - began)
            if answer.status_code != 202:
                raise RuntimeError(f"webhook {n}: {answer.status_code} {answer.text}")

        began = time.perf_counter()
        await asyncio.gather(*(one(n) for n in range(count)))
        return time.perf_counter() - began, latencies


def _pct(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def google(tmp: Path, burst: int, one_by_one: int) -> list[Measure]:
    """Webhooks per minute within the quota on the emulator: serve (1 s window) and one
    `sheetq enqueue` process per webhook."""
    from tests.fakes.sheets_emulator import SheetsEmulator

    out: list[Measure] = []
    emu = SheetsEmulator(seed=7).start()
    try:
        for name in ("serve", "enqueue"):
            work = tmp / f"google-{name}"
            (work / "locks").mkdir(parents=True)
            (work / "sheetq.toml").write_text(CONFIG, encoding="utf-8")
            env = _env(
                work,
                SHEETQ_SPREADSHEET=emu.create_spreadsheet(),
                SHEETQ_SHEETS_API_URL=emu.base_url,
            )
            _sheetq(env, "init", "--no-format")
            reads = {"spreadsheets.get", "values.get", "values.batchGet"}
            emu.reset_counts()
            if name == "serve":
                with _serve(env, work) as url:
                    emu.reset_counts()
                    _say(f"Google: {burst} webhooks over {burst / 50:g} s into serve")
                    load = _load(url, burst, concurrency=burst, spread=burst / 50)
                    _wall, lat = asyncio.run(load)
                    count = burst
            else:
                _say(f"Google: {one_by_one} webhooks, one `sheetq enqueue` each")
                lat = []
                for n in range(one_by_one):
                    raw, _ = _body(n)
                    t0 = time.perf_counter()
                    _sheetq(env, "enqueue", "lead", "-", stdin=raw.decode())
                    lat.append(time.perf_counter() - t0)
                count = one_by_one
            counted = [r for r in emu.requests if r.counted]
            n_reads = sum(1 for r in counted if r.op in reads)
            n_writes = len(counted) - n_reads
            per_min = QUOTA * count / max(n_reads, n_writes, 1)
            label = "serve (batch_window 1s)" if name == "serve" else "one enqueue per webhook"
            out.append(
                Measure(
                    "ingress google",
                    f"webhooks/min within quota: {label}",
                    round(per_min),
                    "webhooks/min",
                    f"{count} webhooks: {n_reads} reads + {n_writes} writes; "
                    f"p99 {_pct(lat, 0.99):.2f} s",
                )
            )
    finally:
        emu.stop()
    return out


def throughput(tmp: Path, backend: str, requests: int, concurrency: int) -> list[Measure]:
    """serve's requests/s and latency percentiles on ``backend`` (local or postgres)."""
    work = tmp / f"tp-{backend}"
    (work / "locks").mkdir(parents=True)
    (work / "sheetq.toml").write_text(CONFIG, encoding="utf-8")
    server: Any = None
    if backend == "local":
        env = _env(work, SHEETQ_SPREADSHEET=f"local:{work / 'book.db'}")
        _sheetq(env, "init", "--no-format")
    else:
        import psycopg

        from tests.pgserver import EXISTING, PgServer

        server = PgServer()
        if not EXISTING:  # the test server runs without durability; a benchmark needs it
            with psycopg.connect(server.base_url, autocommit=True) as admin:
                for name in ("fsync", "synchronous_commit", "full_page_writes"):
                    admin.execute(f"ALTER SYSTEM SET {name} = on")
                admin.execute("SELECT pg_reload_conf()")
        env = _env(work, SHEETQ_DATABASE_URL=str(server.new_database()))
    try:
        with _serve(env, work) as url:
            asyncio.run(_load(url, 50, concurrency=concurrency, start=10**6))  # warm up
            _say(f"{backend}: {requests} webhooks, {concurrency} at once")
            wall, lat = asyncio.run(_load(url, requests, concurrency=concurrency))
    finally:
        if server is not None:
            server.stop()
    section = f"ingress {backend}"
    return [
        Measure(section, "serve: requests/s", round(requests / wall, 1), "req/s",
                f"{requests} webhooks, {concurrency} at once, each 202 after its write"),
        Measure(section, "serve: p50 latency", round(_pct(lat, 0.5) * 1000, 1), "ms", ""),
        Measure(section, "serve: p99 latency", round(_pct(lat, 0.99) * 1000, 1), "ms", ""),
    ]  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else "")
    parser.add_argument("--requests", type=int, default=2000, help="webhooks per throughput run")
    parser.add_argument("--concurrency", type=int, default=32, help="webhooks in flight")
    parser.add_argument("--burst", type=int, default=200, help="webhooks sent to serve on Google")
    parser.add_argument("--one-by-one", type=int, default=20, help="`sheetq enqueue` processes")
    parser.add_argument("--skip-google", action="store_true")
    parser.add_argument("--skip-postgres", action="store_true")
    parser.add_argument("--markdown", action="store_true")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    rows: list[Measure] = []
    with tempfile.TemporaryDirectory(prefix="sheetq-bench-ingress-") as name:
        tmp = Path(name)
        if not args.skip_google:
            rows += google(tmp, args.burst, args.one_by_one)
        rows += throughput(tmp, "local", args.requests, args.concurrency)
        if not args.skip_postgres:
            rows += throughput(tmp, "postgres", args.requests, args.concurrency)
    title = f"sheetq serve and enqueue ({time.strftime('%Y-%m-%d')}, {os.cpu_count()} cores)"
    render = render_json if args.json else render_markdown if args.markdown else render_text
    print(render(rows, title))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
