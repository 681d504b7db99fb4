"""Start-up wall time of the installed CLI, and which heavy stacks it imports."""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from benchmarks._report import Measure

HEAVY = ("telegram", "gspread", "google.auth", "httpx")
TARGET_HELP = 0.3  # s; docs/design.md §6: "well under half a second"; we aim at 0.3


def _command() -> list[str]:
    script = Path(sys.executable).with_name("sheetq")
    return [str(script)] if script.exists() else [sys.executable, "-m", "sheetq"]


def _env(work: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SHEETQ_", "TELEGRAM_"))}
    env.update(SHEETQ_SPREADSHEET=f"local:{work / 'book.db'}", SHEETQ_LOCK_DIR=str(work / "l"))
    return env


def _wall(args: Sequence[str], env: dict[str, str], cwd: Path) -> float:
    start = time.perf_counter()
    done = subprocess.run(list(args), env=env, cwd=cwd, capture_output=True, check=False)
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(done.stderr.decode(errors="replace").strip()[-200:])
    return elapsed


def imported(args: Sequence[str], env: dict[str, str], cwd: Path) -> set[str]:
    """Top-level packages imported by ``sheetq ARGS`` (``python -X importtime``)."""
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "sheetq", *args],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        check=False,
    )
    names = set()
    for line in done.stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            name = line.rsplit("|", 1)[1].strip()
            names.add(name)
    return {h for h in HEAVY if any(n == h or n.startswith(h + ".") for n in names)}


def startup(runs: int) -> list[Measure]:
    """Median wall time of `sheetq --help` and `sheetq enqueue` (local workbook)."""
    out: list[Measure] = []
    cmd = _command()
    with tempfile.TemporaryDirectory(prefix="sheetq-bench-") as tmp:
        work = Path(tmp)
        env = _env(work)
        _wall([*cmd, "init"], env, work)
        cases = (
            ("sheetq --help", ["--help"]),
            ("sheetq enqueue (local, 1 task)", ["enqueue", "job", "{}"]),
        )
        for label, args in cases:
            samples = []
            for n in range(runs):
                call = [*cmd, *args]
                if args[0] == "enqueue":
                    call[-1] = f'{{"n": {n}}}'
                samples.append(_wall(call, env, work))
            heavy = imported(args, env, work)
            loaded = ", ".join(sorted(heavy)) if heavy else "none of " + "/".join(HEAVY)
            note = f"median of {runs}; imports {loaded}"
            if args == ["--help"]:
                verdict = "meets" if statistics.median(samples) < TARGET_HELP else "misses"
                note += f"; {verdict} the {TARGET_HELP} s target"
            out.append(
                Measure("3 startup", label, round(statistics.median(samples), 3), "s wall", note)
            )
    return out
