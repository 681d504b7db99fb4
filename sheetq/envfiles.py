"""The ``.env`` files sheetq reads: the working directory's, then the one beside
``sheetq.toml`` (cron starts jobs in ``$HOME``, far from the project).

A variable already set in the environment is never overridden, so the order of precedence
is: the environment, then ``./.env``, then the ``.env`` beside the configuration file.

A file is read like ``sheetq.toml`` (``sheetq.textfile``): UTF-8, else a problem naming
the file, line and byte; a line python-dotenv cannot parse is a problem naming the file
and line (never its text: it may hold a secret). A file with a problem is not loaded at
all. Problems are collected in ``ENV_PROBLEMS``: every command but ``doctor`` stops on the
first (``raise_problem``, exit 2); ``doctor`` lists them with its other checks.
"""

from __future__ import annotations

import io
from pathlib import Path

from sheetq.errors import ConfigError
from sheetq.textfile import read_utf8

ENV_FILES: list[Path] = []  # the files read, in order (``sheetq doctor`` names them)
ENV_PROBLEMS: list[str] = []  # one line per file that could not be read


def reset() -> None:
    """Forget the files read and their problems (start of a command)."""
    ENV_FILES.clear()
    ENV_PROBLEMS.clear()


def load_env_file(path: Path) -> bool:
    """Read ``path`` into ``os.environ`` without overriding variables already set, and
    remember it. False if there is no such file, or if it has a problem (then recorded in
    ``ENV_PROBLEMS`` and nothing of it is loaded)."""
    from dotenv import load_dotenv
    from dotenv.parser import parse_stream

    path = path.expanduser().absolute()
    if path in ENV_FILES:
        return True
    if not path.is_file():
        return False
    try:
        text = read_utf8(path)
    except ConfigError as exc:
        return _problem(exc.message)
    for binding in parse_stream(io.StringIO(text)):
        if binding.error:
            return _problem(
                f"{path}: line {binding.original.line}: cannot parse it; expected NAME=value, "
                'NAME="value" or a # comment'
            )
    load_dotenv(stream=io.StringIO(text), override=False)
    ENV_FILES.append(path)
    return True


def _problem(message: str) -> bool:
    if message not in ENV_PROBLEMS:
        ENV_PROBLEMS.append(message)
    return False


def load_beside_config(config: str | None) -> bool:
    """Read the ``.env`` in the directory of ``config`` (``--config``/``SHEETQ_CONFIG``, else
    ``./sheetq.toml``)."""
    target = Path(config).expanduser() if config else Path("sheetq.toml")
    return load_env_file(target.absolute().parent / ".env")


def raise_problem() -> None:
    """Raise the first ``.env`` problem as a ``ConfigError`` (exit 2); nothing without one."""
    if ENV_PROBLEMS:
        raise ConfigError(ENV_PROBLEMS[0])
