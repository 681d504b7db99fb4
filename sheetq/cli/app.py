"""The ``sheetq`` command: options shared by every command, and the one error boundary.

Exit codes (docs/design.md §4): 0 success (including an identical duplicate),
1 runtime failure, 2 usage / input / configuration error, 3 idempotency conflict.
"""

from __future__ import annotations

import logging
import re
import sys
from typing import Annotated

import typer

from sheetq import __version__
from sheetq.cli import inspect, manage
from sheetq.cli._context import Context
from sheetq.cli.enqueue import enqueue
from sheetq.cli.process import process
from sheetq.errors import EXIT_FAILURE, EXIT_USAGE, Interrupted, SheetqError

app = typer.Typer(
    name="sheetq",
    help="A job queue in a spreadsheet: idempotent enqueue, retries with backoff, leases, an "
    "audit log, and Telegram alerts when tasks fail.\n\n"
    "Set SHEETQ_SPREADSHEET to a Google Sheets URL or key, or to local:PATH for the embedded "
    "SQLite workbook; or SHEETQ_DATABASE_URL to a postgresql:// URL for PostgreSQL. Try "
    "`sheetq demo`.",
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    pretty_exceptions_show_locals=False,
    context_settings={"help_option_names": ["-h", "--help"]},
    rich_markup_mode=None,
)
state = Context()


def _version(value: bool) -> None:
    if value:
        sys.stdout.write(f"sheetq {__version__}\n")
        raise typer.Exit()


@app.callback()
def _options(
    ctx: typer.Context,
    spreadsheet: Annotated[
        str | None,
        typer.Option(
            "--spreadsheet",
            "-S",
            envvar="SHEETQ_SPREADSHEET",
            show_envvar=True,
            help="Google Sheets URL or key, or local:PATH. May also follow the command.",
        ),
    ] = None,
    database_url: Annotated[
        str | None,
        typer.Option(
            "--database-url",
            envvar="SHEETQ_DATABASE_URL",
            show_envvar=True,
            show_default=False,
            help="postgresql://… : the queue lives in PostgreSQL; a spreadsheet, if also set, "
            "is its mirror. May also follow the command.",
        ),
    ] = None,
    config: Annotated[
        str | None,
        typer.Option(
            "--config",
            "-c",
            envvar="SHEETQ_CONFIG",
            show_envvar=True,
            help="Configuration file (default ./sheetq.toml). May also follow the command.",
        ),
    ] = None,
    verbose: Annotated[
        int,
        typer.Option(
            "--verbose",
            "-v",
            count=True,
            help="More detail on stderr: -v what a run does (batches, claims, timings), "
            "-vv also every Sheets API request. May also follow the command.",
        ),
    ] = 0,
    quiet: Annotated[
        bool,
        typer.Option("--quiet", "-q", help="Only errors on stderr. May also follow the command."),
    ] = False,
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version.")
    ] = False,
) -> None:
    from sheetq.envfiles import load_beside_config, raise_problem

    if load_beside_config(config):  # cron: the project's .env, though run from $HOME
        import os

        spreadsheet = spreadsheet or os.environ.get("SHEETQ_SPREADSHEET")
        database_url = database_url or os.environ.get("SHEETQ_DATABASE_URL")
    if ctx.invoked_subcommand != "doctor":  # doctor lists a broken .env among its checks
        raise_problem()
    state.spreadsheet = spreadsheet
    state.database_url = database_url
    state.config = config
    state.verbose = verbose
    state.quiet = quiet
    _logging(-1 if quiet else verbose)


def _logging(verbose: int) -> None:
    from sheetq.logs import configure

    configure(verbose)


app.command()(enqueue)
app.command()(process)
app.command()(inspect.status)
app.command(name="list")(inspect.list_rows)
app.command()(inspect.show)
app.command()(manage.requeue)
app.command()(manage.skip)
app.command()(manage.init)


def _register_lazy() -> None:
    from sheetq.cli import alert, archive, demo, doctor, migrate, mirror, serve, stats, worker
    from sheetq.cli.connector import connector_app

    app.command()(archive.archive)
    app.command()(stats.stats)
    app.command()(alert.alert)
    app.command()(doctor.doctor)
    app.command()(demo.demo)
    app.command()(worker.worker)
    app.command()(migrate.migrate)
    app.command()(mirror.mirror)
    app.add_typer(connector_app)
    app.command()(serve.serve)


_register_lazy()


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``sheetq`` console script; returns (and exits with) the exit code."""
    from pathlib import Path

    from sheetq.envfiles import load_env_file, reset

    reset()
    load_env_file(Path(".env"))  # before the options are parsed: they read its variables
    _stop_on_sigterm()
    code = 0
    try:
        args = hoist_global_flags(list(sys.argv[1:] if argv is None else argv))
        result = app(args=args, prog_name="sheetq", standalone_mode=False)
        code = result if isinstance(result, int) else 0
    except typer.Exit as exc:
        code = exc.exit_code
    except Interrupted as exc:
        sys.stderr.write(
            f"sheetq: interrupted: {exc.message}\n" if exc.message else "sheetq: interrupted\n"
        )
        code = exc.exit_code
    except typer.Abort as exc:
        interrupted = isinstance(exc.__cause__, KeyboardInterrupt)
        sys.stderr.write("sheetq: interrupted\n" if interrupted else "sheetq: aborted\n")
        code = 130 if interrupted else EXIT_FAILURE
    except SheetqError as exc:
        sys.stderr.write(f"sheetq: error: {exc.message}\n")
        code = exc.exit_code
    except KeyboardInterrupt:
        sys.stderr.write("sheetq: interrupted\n")
        code = 130
    except Exception as exc:  # the one boundary: Click usage errors and unexpected failures
        code = _unexpected(exc)
    finally:
        state.close()
    if argv is None:
        sys.exit(code)
    return code


_GLOBAL_WITH_VALUE = {"--spreadsheet", "-S", "--database-url", "--config", "-c"}
_GLOBAL_FLAG = re.compile(r"-v+|--verbose|-q|--quiet")


def hoist_global_flags(args: list[str]) -> list[str]:
    """``sheetq process -v`` means ``sheetq -v process``: the global options after the
    command move before it — ``-v``/``-vv``/``--verbose``, ``-q``/``--quiet``, and
    ``--spreadsheet``/``-S``, ``--database-url``, ``--config``/``-c`` with their value
    (``--opt VALUE`` or ``--opt=VALUE``) — unless the command has an option of that name
    itself (``process -q``, ``worker -c``) or the word is the value of one of its options.
    A global option with no value after it is a usage error (exit 2)."""
    i = 0
    while i < len(args) and args[i].startswith("-") and args[i] != "--":
        i += 2 if args[i] in _GLOBAL_WITH_VALUE else 1
    if i >= len(args):
        return args
    import typer.main

    command = getattr(typer.main.get_command(app), "commands", {}).get(args[i])
    if command is None:
        return args
    own = {name: p for p in command.params for name in (*p.opts, *p.secondary_opts)}
    moved: list[str] = []
    rest: list[str] = []
    tail = args[i + 1 :]
    k = 0
    while k < len(tail):
        word = tail[k]
        if word == "--":
            rest += tail[k:]
            break
        name = word.split("=", 1)[0] if word.startswith("--") else word
        param = own.get(name)
        if param is not None:
            rest.append(word)
            takes_value = not (getattr(param, "is_flag", False) or getattr(param, "count", False))
            if takes_value and "=" not in word and k + 1 < len(tail):
                rest.append(tail[k + 1])
                k += 1
        elif _GLOBAL_FLAG.fullmatch(word):
            moved.append(word)
        elif name in _GLOBAL_WITH_VALUE:
            if "=" in word and word.startswith("--"):
                moved.append(word)
            elif k + 1 < len(tail):
                moved += [word, tail[k + 1]]
                k += 1
            else:
                from sheetq.errors import UsageError

                raise UsageError(f"{word} needs a value (see `sheetq --help`)")
        else:
            rest.append(word)
        k += 1
    return args[:i] + moved + [args[i]] + rest


def _stop_on_sigterm() -> None:
    """SIGTERM (systemd, `timeout`, `kill`) stops sheetq like Ctrl-C does: a running handler
    is killed, unstarted tasks are given back, and the exit code is 143."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        return

    def stop(signum: int, _frame: object) -> None:
        raise Interrupted("stopped by SIGTERM", 128 + signum)

    signal.signal(signal.SIGTERM, stop)


def _unexpected(exc: Exception) -> int:
    ctx = getattr(exc, "ctx", None)
    if type(exc).__name__ == "NoArgsIsHelpError" and ctx is not None:
        sys.stdout.write(ctx.get_help() + "\n")  # `sheetq` alone: the help, not an error
        return 0
    usage = getattr(exc, "format_message", None)
    if usage is not None and hasattr(exc, "exit_code"):
        ctx = getattr(exc, "ctx", None)
        where = ctx.command_path if ctx is not None else "sheetq"
        sys.stderr.write(f"{where}: error: {usage()} (see `{where} --help`)\n")
        return int(getattr(exc, "exit_code", EXIT_USAGE))
    from sheetq.redact import redact

    logging.getLogger("sheetq").debug("unexpected error", exc_info=exc)
    text = redact(f"{type(exc).__name__}: {exc}", secrets=_secrets())
    sys.stderr.write(f"sheetq: unexpected error: {text}\n")
    if state.verbose:
        import traceback

        sys.stderr.write(redact("".join(traceback.format_exception(exc)), secrets=_secrets()))
    return EXIT_FAILURE


def _secrets() -> list[str]:
    from sheetq.redact import own_secrets

    return own_secrets()


if __name__ == "__main__":  # pragma: no cover
    main()
