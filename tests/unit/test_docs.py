"""Docs kept honest: every command, exit code, error class and variable is documented."""

from __future__ import annotations

import re
from pathlib import Path

from sheetq.errors import EXIT_CONFLICT, EXIT_FAILURE, EXIT_OK, EXIT_USAGE
from sheetq.model import ErrorClass, Event, Status

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text(encoding="utf-8")


def _commands() -> list[str]:
    from sheetq.cli.app import app

    return [c.name or c.callback.__name__ for c in app.registered_commands if c.callback]


def test_every_command_is_in_the_readme_table() -> None:
    """Each CLI command appears as a row of the README's command table."""
    for name in _commands():
        assert re.search(rf"^\| `{name}\b", README, re.M), name


def test_every_exit_code_is_documented() -> None:
    """The README's exit-code table lists 0, 1, 2 and 3."""
    for code in (EXIT_OK, EXIT_FAILURE, EXIT_USAGE, EXIT_CONFLICT):
        assert re.search(rf"^\| {code} \|", README, re.M), code


def test_words_of_the_sheet_are_documented() -> None:
    """Every status, error class and the key events appear in the README."""
    for word in [*Status, *ErrorClass, Event.REQUEUED, Event.ALERTED, Event.ARCHIVED]:
        assert f"`{word}`" in README or f"`error_class={word}`" in README, word


def test_every_variable_is_in_env_example() -> None:
    """Each environment variable sheetq reads is listed in .env.example."""
    example = (ROOT / ".env.example").read_text(encoding="utf-8")
    source = "\n".join(p.read_text(encoding="utf-8") for p in (ROOT / "sheetq").rglob("*.py"))
    names = set(re.findall(r"\b((?:SHEETQ|TELEGRAM)_[A-Z_]+)\b", source))
    names -= {"SHEETQ_TASK_ID", "SHEETQ_TASK_TYPE", "SHEETQ_IDEMPOTENCY_KEY", "SHEETQ_ATTEMPT"}
    names.add("GOOGLE_APPLICATION_CREDENTIALS")
    missing = sorted(n for n in names if n not in example)
    assert not missing, missing


def test_template_config_is_valid(tmp_path: Path) -> None:
    """templates/sheetq.toml, the commented example, loads without errors."""
    from sheetq.config import load_settings

    settings = load_settings(
        config=str(ROOT / "templates" / "sheetq.toml"), env={"SHEETQ_SPREADSHEET": "local:x"}
    )
    assert {"lead", "order", "report"} <= set(settings.types)


def test_readme_sends_the_reader_to_no_missing_file() -> None:
    """Every Markdown file the README names (docs/design.md was one) is in the repository."""
    named = set(re.findall(r"[\w./-]*\w\.md\b", README))
    missing = sorted(n for n in named if not (ROOT / n).exists())
    assert not missing, missing
