"""sheetq's benchmarks: one table of Sheets API requests per task, CPU time, bytes read,
start-up time and peak memory. See benchmarks/README.md for what each number means.

    python benchmarks/run.py            # everything (a few minutes)
    python benchmarks/run.py --quick    # 1k and 10k rows only
    python benchmarks/run.py --markdown # or --json
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks._report import Measure, render_json, render_markdown, render_text  # noqa: E402

FULL_SIZES = (1_000, 10_000, 50_000)
QUICK_SIZES = (1_000, 10_000)


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else "")
    parser.add_argument("--quick", action="store_true", help="Queue sizes 1k and 10k only.")
    parser.add_argument("--sizes", type=int, nargs="+", help="Queue sizes (rows) to measure.")
    parser.add_argument("--tasks", type=int, default=300, help="Tasks per request-count run.")
    parser.add_argument("--repeat", type=int, default=3, help="Runs per CPU measurement.")
    parser.add_argument("--startup-runs", type=int, default=15, help="Runs per start-up time.")
    parser.add_argument("--skip-google", action="store_true", help="No emulator sections.")
    parser.add_argument("--json", action="store_true", help="Print the table as JSON.")
    parser.add_argument("--markdown", action="store_true", help="Print a Markdown table.")
    parser.add_argument("-q", "--quiet", action="store_true", help="No progress on stderr.")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Run every section and print the table on stdout (progress goes to stderr)."""
    args = _arguments(argv)
    sizes = tuple(args.sizes or (QUICK_SIZES if args.quick else FULL_SIZES))
    started = time.perf_counter()

    def progress(text: str) -> None:
        if not args.quiet:
            elapsed = time.perf_counter() - started
            sys.stderr.write(f"[{elapsed:6.1f}s] {text}\n")
            sys.stderr.flush()

    for name in list(os.environ):
        if name.startswith(("SHEETQ_", "TELEGRAM_")) or name == "GOOGLE_APPLICATION_CREDENTIALS":
            del os.environ[name]
    rows: list[Measure] = []
    memory: list[Measure] = []
    if not args.skip_google:
        import stamina

        from benchmarks._google import CountingEmulator, end_to_end, request_costs

        stamina.set_active(False)  # the emulator never fails; no waiting on a retry
        emu = CountingEmulator()
        emu.start()
        try:
            progress(f"Sheets API requests per task ({args.tasks} tasks per run)")
            rows += request_costs(emu, args.tasks, (1, 10, 100, 1000))
            rows += end_to_end(emu, (1_000, 10_000) if not args.quick else (1_000,))
        finally:
            emu.stop()
            stamina.set_active(True)
    from benchmarks._local import cpu_and_memory

    cpu_rows, memory = cpu_and_memory(sizes, args.repeat, progress)
    rows += cpu_rows
    if not args.skip_google:
        from benchmarks._google import CountingEmulator, bytes_read

        emu = CountingEmulator()
        emu.start()
        try:
            progress("bytes read from the emulator")
            rows += bytes_read(emu, sizes)
        finally:
            emu.stop()
    if not args.skip_google:
        from benchmarks._mirror import mirror_costs

        progress(f"the spreadsheet mirror of a PostgreSQL queue ({sizes[-1]:,} open tasks)")
        rows += mirror_costs(sizes[-1])
    from benchmarks._startup import startup

    progress(f"start-up time ({args.startup_runs} runs each)")
    rows += startup(args.startup_runs)
    rows += memory
    title = (
        f"sheetq benchmarks — Python {platform.python_version()}, {os.cpu_count()} CPUs, "
        f"{platform.system()} {platform.machine()}; {time.perf_counter() - started:.0f} s"
    )
    render = render_json if args.json else render_markdown if args.markdown else render_text
    sys.stdout.write(render(rows, title) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
