"""The ``.env`` files sheetq reads: the working directory's, then the one beside
``sheetq.toml`` (cron starts jobs in ``$HOME``, far from the project).

A variable already set in the environment is never overridden, so the order of precedence
is: the environment, then ``./.env``, then the ``.env`` beside the configuration file.
"""

from __future__ import annotations

from pathlib import Path

ENV_FILES: list[Path] = []  # the files read, in order (``sheetq doctor`` names them)


def load_env_file(path: Path) -> bool:
    """Read ``path`` into ``os.environ`` without overriding variables already set, and
    remember it. False if there is no such file."""
    from dotenv import load_dotenv

    path = path.expanduser().absolute()
    if path in ENV_FILES:
        return True
    if not path.is_file():
        return False
    load_dotenv(path, override=False)
    ENV_FILES.append(path)
    return True


def load_beside_config(config: str | None) -> bool:
    """Read the ``.env`` in the directory of ``config`` (``--config``/``SHEETQ_CONFIG``, else
    ``./sheetq.toml``)."""
    target = Path(config).expanduser() if config else Path("sheetq.toml")
    return load_env_file(target.absolute().parent / ".env")
