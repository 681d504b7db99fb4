"""The embedded backend against huey's SQLite consumer, side by side in one run.

    python benchmarks/local.py                 # 2,000 tasks, 3 rounds
    python benchmarks/local.py --tasks 5000 --rounds 5

Each round, on fresh files in a temporary folder:

- **sheetq**: ``sheetq enqueue --jsonl`` of N tasks into a ``local:`` workbook, then one
  ``sheetq process --until-empty --batch-size B`` child process with a Python no-op handler
  (``benchmarks/_handlers.py:ok``); tasks/s = N ÷ the wall time of that process.
- **huey**: N tasks enqueued into ``SqliteHuey`` (huey's own SQLite storage, its default
  durability), then one child process that drains them the way huey's consumer worker does
  (``dequeue`` → ``execute``, which stores the result), with the same no-op; tasks/s = N ÷
  its wall time. Both children pay their interpreter start-up.

The table gives the median of the rounds and each round's ratio sheetq ÷ huey (the design
target: at least 0.5). Needs ``huey`` (``pip install huey``).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks._report import Measure, render_markdown, render_text  # noqa: E402

HUEY_DRAIN = textwrap.dedent(
    """
    import sys
    from huey import SqliteHuey
    huey = SqliteHuey(filename=sys.argv[1])

    @huey.task()
    def ok(n):
        return n

    if sys.argv[2] == "enqueue":
        for n in range(int(sys.argv[3])):
            ok(n)
    else:
        while (task := huey.dequeue()) is not None:
            huey.execute(task)
    """
)


def _env(db: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SHEETQ_", "TELEGRAM_"))}
    env.update(SHEETQ_SPREADSHEET=f"local:{db}", PYTHONPATH=str(ROOT))
    return env


def sheetq_round(work: Path, tasks: int, batch: int) -> float:
    """Tasks/s of one ``sheetq process --until-empty`` over ``tasks`` due no-op tasks."""
    db = work / "queue.db"
    config = work / "sheetq.toml"
    config.write_text('[types.noop]\npython = "benchmarks._handlers:ok"\n')
    env = _env(db) | {"SHEETQ_CONFIG": str(config)}
    sheetq = [sys.executable, "-m", "sheetq"]
    subprocess.run([*sheetq, "init"], env=env, cwd=ROOT, check=True, capture_output=True)
    lines = "".join(f'{{"n": {n}}}\n' for n in range(tasks))
    subprocess.run(
        [*sheetq, "enqueue", "noop", "--jsonl"],
        input=lines.encode(),
        env=env,
        cwd=ROOT,
        check=True,
        capture_output=True,
    )
    started = time.perf_counter()
    subprocess.run(
        [*sheetq, "process", "--until-empty", "--batch-size", str(batch), "--max-runtime", "10m"],
        env=env,
        cwd=ROOT,
        check=True,
        capture_output=True,
    )
    return tasks / (time.perf_counter() - started)


def huey_round(work: Path, tasks: int) -> float:
    """Tasks/s of one child draining ``tasks`` no-op tasks from huey's SQLite storage."""
    script = work / "huey_drain.py"
    script.write_text(HUEY_DRAIN)
    db = str(work / "huey.db")
    subprocess.run([sys.executable, str(script), db, "enqueue", str(tasks)], check=True)
    started = time.perf_counter()
    subprocess.run([sys.executable, str(script), db, "drain"], check=True)
    return tasks / (time.perf_counter() - started)


def main(argv: list[str] | None = None) -> int:
    """Run the rounds and print the table (progress on stderr)."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--tasks", type=int, default=2000, help="Tasks per round.")
    parser.add_argument("--rounds", type=int, default=3, help="Rounds (sheetq, then huey).")
    parser.add_argument(
        "--batch-size", type=int, nargs="+", default=[10, 100], help="sheetq's --batch-size(s)."
    )
    parser.add_argument("--markdown", action="store_true", help="Print a Markdown table.")
    args = parser.parse_args(argv)
    ours: dict[int, list[float]] = {b: [] for b in args.batch_size}
    theirs: list[float] = []
    for n in range(args.rounds):
        for batch in args.batch_size:
            with tempfile.TemporaryDirectory(prefix="sheetq-bench-") as folder:
                ours[batch].append(sheetq_round(Path(folder), args.tasks, batch))
        with tempfile.TemporaryDirectory(prefix="sheetq-bench-") as folder:
            theirs.append(huey_round(Path(folder), args.tasks))
        done = ", ".join(f"batch {b}: {v[-1]:,.0f}/s" for b, v in ours.items())
        sys.stderr.write(f"round {n + 1}: sheetq {done}; huey {theirs[-1]:,.0f}/s\n")
    note = f"{args.tasks:,} tasks, median of {args.rounds} rounds"
    rows = [Measure("local", "huey SqliteHuey drain", statistics.median(theirs), "tasks/s", note)]
    for batch, speeds in ours.items():
        ratios = [a / b for a, b in zip(speeds, theirs, strict=True)]
        rows += [
            Measure(
                "local",
                f"sheetq process, batch {batch}",
                statistics.median(speeds),
                "tasks/s",
                note,
            ),
            Measure(
                "local",
                f"ratio sheetq (batch {batch}) ÷ huey",
                statistics.median(ratios),
                "×",
                "rounds: " + ", ".join(f"{r:.2f}" for r in ratios) + " (target ≥ 0.5)",
            ),
        ]
    title = "sheetq local workbook vs huey SQLite"
    print(render_markdown(rows, title) if args.markdown else render_text(rows, title))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
