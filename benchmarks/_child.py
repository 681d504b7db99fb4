"""Run one sheetq command in this (fresh) process and print what it cost, as JSON.

``python benchmarks/_child.py process --json`` (environment and working directory set by
the caller). The modules a command needs are imported first, so ``cpu_s`` is the
command's own CPU time; ``peak_rss_mb`` is the whole process's high-water mark and
``result`` the command's ``--json`` document.
"""

from __future__ import annotations

import contextlib
import io
import json
import resource
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def peak_rss_mb() -> float:
    """This process's peak resident set size in MB: ``VmHWM`` on Linux (``ru_maxrss`` there
    also counts the parent's pages before ``exec``), else ``ru_maxrss``."""
    status = Path("/proc/self/status")
    if status.exists():
        for line in status.read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    scale = 1024 * 1024 if sys.platform == "darwin" else 1024  # bytes on macOS, KB elsewhere
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / scale


def main() -> None:
    import sheetq.cli.app as app
    import sheetq.cli.inspect
    import sheetq.cli.process
    import sheetq.handlers.python
    import sheetq.sheet.plan
    import sheetq.sheet.runner
    import sheetq.sheet.sqlite

    with contextlib.suppress(ImportError):
        import sheetq.stats  # noqa: F401 - may not exist yet
    base = peak_rss_mb()
    cpu, wall = time.process_time(), time.perf_counter()
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        code = app.main(sys.argv[1:])
    doc = {
        "code": code,
        "cpu_s": time.process_time() - cpu,
        "wall_s": time.perf_counter() - wall,
        "peak_rss_mb": peak_rss_mb(),
        "rss_after_imports_mb": base,
    }
    with contextlib.suppress(ValueError):
        doc["result"] = json.loads(out.getvalue())
    sys.stdout.write(json.dumps(doc) + "\n")


if __name__ == "__main__":
    main()
