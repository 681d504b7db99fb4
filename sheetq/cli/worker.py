"""``sheetq worker``: run handlers continuously on a PostgreSQL queue (docs/design.md §11)."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Annotated

import typer

from sheetq.cli._flags import duration_flag
from sheetq.cli._output import echo, stdout_kept_for_sheetq, warn
from sheetq.errors import UsageError


def worker(
    concurrency: Annotated[
        int,
        typer.Option(
            "--concurrency",
            "-c",
            min=1,
            max=256,
            help="Handlers run at once (threads; the worker holds two database connections "
            "whatever N is: one writes, one listens).",
        ),
    ] = 1,
    types: Annotated[
        list[str] | None,
        typer.Option("--type", "-t", metavar="TYPE", help="Only these task types (repeatable)."),
    ] = None,
    poll: Annotated[
        str,
        typer.Option(
            "--poll",
            help="How often to look for due retries and expired leases when no "
            "notification comes (e.g. 1s, 0.5s; at least 0.1s).",
        ),
    ] = "1s",
    quiet: Annotated[
        bool, typer.Option("--quiet", "-q", help="Print nothing unless the worker breaks.")
    ] = False,
) -> None:
    """Run tasks as they arrive, until SIGTERM or Ctrl-C (PostgreSQL only).

    Woken by LISTEN/NOTIFY when a task is enqueued (it starts within a second), polls every
    second for due retries and expired leases. Claims only as many tasks as it has free
    handler slots. SIGTERM/SIGINT: claim nothing more, let running handlers finish within
    their timeout, release unstarted tasks, exit 0 (a second signal stops at once; the
    running tasks are then recovered per on_unknown when their leases end). Any number of
    workers and `sheetq process` runs, on any number of hosts, can share one queue.

    Examples:

      sheetq worker --concurrency 4

      sheetq -v worker --type lead --type order
    """
    from sheetq.cli.app import state
    from sheetq.cli.process import _check_types

    every = duration_flag(poll, "--poll")
    if every < 0.1:
        raise UsageError(f"--poll: {poll!r} is shorter than 0.1s")
    settings = state.settings()
    queue = state.queue()
    quiet = quiet or state.quiet
    _check_types(types or (), settings)
    notifier = None
    alerts_off = ""
    if settings.telegram.enabled:
        from sheetq.alerts import make_notifier

        notifier = make_notifier(settings, verbose=state.verbose)
    elif not quiet:
        missing = "TELEGRAM_BOT_TOKEN" if not settings.telegram.token else "TELEGRAM_CHAT_ID"
        alerts_off = f"alerts are off: {missing} is not set; failed tasks stay owed"
    from sheetq.summary import summary_line

    mirror = None
    if settings.spreadsheet:  # the mirror of a PostgreSQL queue (docs/design.md §12)
        from functools import partial

        from sheetq.mirror_run import mirror_pass

        mirror = partial(mirror_pass, settings)

    runner = queue.worker(
        clock=state.clock(),
        mirror=mirror,
        rng=state.rng(),
        notifier=notifier,
        concurrency=concurrency,
        types=tuple(types or ()),
        poll=every,
    )
    with _signals(runner.stop, runner.abandon), stdout_kept_for_sheetq():
        # said once the database answered: a worker that cannot start says one line, why
        summary = runner.run(on_ready=(lambda: warn(alerts_off)) if alerts_off else None)
    if not quiet or (notifier is not None and summary.alerts_owed):
        for note in summary.notes:
            warn(note)
    if not quiet:
        line = summary_line(summary).replace("sheetq: ", f"sheetq worker: {runner.stopped}: ", 1)
        echo(line)


@contextmanager
def _signals(stop: Callable[[str], None], abandon: Callable[[], str]) -> Iterator[None]:
    """SIGTERM and SIGINT call ``stop(name)``; a second one exits at once (code 128 + the
    signal, like a kill), after ``abandon()`` ended the running handlers' process groups;
    one line on stderr says which tasks stay ``processing`` and when they are recovered.
    The previous handlers come back on exit."""
    import signal

    seen: list[int] = []

    def handle(signum: int, _frame: object) -> None:
        if seen:
            name = signal.Signals(signum).name
            left = abandon() or "no task was running"
            with contextlib.suppress(OSError, ValueError):
                sys.stderr.write(f"sheetq worker: stopped at once by a second {name}: {left}\n")
                sys.stderr.flush()
            os._exit(128 + signum)
        seen.append(signum)
        stop(signal.Signals(signum).name)

    old = {sig: signal.signal(sig, handle) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for sig, previous in old.items():
            signal.signal(sig, previous)
