"""Docs kept honest: every command, exit code, error class and variable is documented where a
reader looks for it (README.md, docs/*.md), every link leads somewhere, and the repository
points at nothing outside itself."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from sheetq.errors import EXIT_CONFLICT, EXIT_FAILURE, EXIT_OK, EXIT_USAGE
from sheetq.model import ErrorClass, Event, Status

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
README = (ROOT / "README.md").read_text(encoding="utf-8")


def _doc(name: str) -> str:
    return (DOCS / name).read_text(encoding="utf-8")


def _pages() -> list[Path]:
    return [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]


def _commands() -> list[str]:
    from sheetq.cli.app import app

    return [c.name or c.callback.__name__ for c in app.registered_commands if c.callback]


def _code_block(text: str, heading: str, lang: str = "sh") -> str:
    """The first ```lang block after the Markdown heading ``heading``."""
    at = text.index(f"\n{heading}\n")
    start = text.index(f"```{lang}\n", at) + len(f"```{lang}\n")
    return text[start : text.index("\n```\n", start)]


def test_every_command_is_in_the_readme_table() -> None:
    """Each CLI command appears as a row of the README's command table."""
    for name in _commands():
        assert re.search(rf"^\| `{name}\b", README, re.M), name


def test_every_command_is_in_the_commands_page() -> None:
    """Each CLI command has a row, with its options, in docs/commands.md."""
    page = _doc("commands.md")
    for name in _commands():
        assert re.search(rf"^\| `{name}\b", page, re.M), name


def test_every_exit_code_is_documented() -> None:
    """docs/operating.md's exit-code table lists 0, 1, 2 and 3."""
    page = _doc("operating.md")
    for code in (EXIT_OK, EXIT_FAILURE, EXIT_USAGE, EXIT_CONFLICT):
        assert re.search(rf"^\| {code} \|", page, re.M), code


def test_words_of_the_sheet_are_documented() -> None:
    """Every status, error class and the key events appear in docs/commands.md."""
    page = _doc("commands.md")
    for word in [*Status, *ErrorClass, Event.REQUEUED, Event.ALERTED, Event.ARCHIVED]:
        assert f"`{word}`" in page or f"`error_class={word}`" in page, word


def _variables() -> set[str]:
    source = "\n".join(p.read_text(encoding="utf-8") for p in (ROOT / "sheetq").rglob("*.py"))
    names = set(re.findall(r"\b((?:SHEETQ|TELEGRAM)_[A-Z_]+)\b", source))
    names -= {"SHEETQ_TASK_ID", "SHEETQ_TASK_TYPE", "SHEETQ_IDEMPOTENCY_KEY", "SHEETQ_ATTEMPT"}
    names.add("GOOGLE_APPLICATION_CREDENTIALS")
    return names


def test_every_variable_is_in_env_example() -> None:
    """Each environment variable sheetq reads is listed in .env.example."""
    example = (ROOT / ".env.example").read_text(encoding="utf-8")
    missing = sorted(n for n in _variables() if n not in example)
    assert not missing, missing


def test_every_variable_is_in_the_configuration_page() -> None:
    """Each environment variable sheetq reads is explained in docs/configuration.md."""
    page = _doc("configuration.md")
    missing = sorted(n for n in _variables() if f"`{n}" not in page and f" {n}`" not in page)
    assert not missing, missing


def test_the_docs_name_no_variable_sheetq_does_not_read() -> None:
    """Every SHEETQ_/TELEGRAM_ variable README.md, docs/ and .env.example name is one sheetq
    reads (or the test suite's SHEETQ_TEST_DATABASE_URL): no advice about a removed one."""
    pages = [*_pages(), ROOT / ".env.example"]
    text = "\n".join(p.read_text(encoding="utf-8") for p in pages)
    named = set(re.findall(r"\b((?:SHEETQ|TELEGRAM)_[A-Z_]+)\b", text))
    handler_env = {"SHEETQ_TASK_ID", "SHEETQ_TASK_TYPE", "SHEETQ_IDEMPOTENCY_KEY", "SHEETQ_ATTEMPT"}
    stale = sorted(named - _variables() - handler_env - {"SHEETQ_TEST_DATABASE_URL"})
    assert not stale, stale


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


def _slugs(text: str) -> set[str]:
    """The anchors GitHub gives a page's headings: lower case, punctuation dropped, spaces
    to hyphens, a repeated heading numbered."""
    seen: dict[str, int] = {}
    out: set[str] = set()
    in_code = False
    for line in text.splitlines():
        if line.startswith("```"):
            in_code = not in_code
        if in_code or not re.match(r"#{1,6} ", line):
            continue
        slug = re.sub(r"[^\w\- ]", "", line.lstrip("#").strip().lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        out.add(slug if n == 0 else f"{slug}-{n}")
    return out


def _links(text: str) -> Iterator[str]:
    """Targets of the Markdown links ``[text](target)`` outside code blocks and spans."""
    text = re.sub(r"^```.*?^```", "", text, flags=re.M | re.S)
    text = re.sub(r"`[^`\n]*`(?!\])", "", text)
    yield from re.findall(r"\]\(([^)\s]+)\)", text)


def test_every_relative_link_leads_to_a_file_and_heading() -> None:
    """Each relative link in README.md and docs/*.md names a file that exists (and, with
    `#anchor`, a heading of that page)."""
    broken = []
    for page in _pages():
        text = page.read_text(encoding="utf-8")
        for target in _links(text):
            if re.match(r"[a-z]+:", target):  # https:, mailto:
                continue
            path, _, anchor = target.partition("#")
            dest = (page.parent / path).resolve() if path else page
            if not dest.exists():
                broken.append(f"{page.relative_to(ROOT)}: {target}")
            elif (
                anchor
                and dest.suffix == ".md"
                and anchor not in _slugs(dest.read_text(encoding="utf-8"))
            ):
                broken.append(f"{page.relative_to(ROOT)}: {target} (no such heading)")
    assert not broken, broken


def test_nothing_points_outside_the_repository() -> None:
    """No file in sheetq/, tests/, docs/ or README.md refers to a design file or a directory
    that does not ship with the repository, and README.md and docs/ cite no issue numbers."""
    outside = ("DESIGN" + ".md", ".." + "/shared")
    files = [ROOT / "README.md"]
    for folder in ("sheetq", "tests", "docs"):
        files += [
            p for p in (ROOT / folder).rglob("*") if p.is_file() and "__pycache__" not in p.parts
        ]
    found = []
    for path in files:
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        found += [f"{path.relative_to(ROOT)}: {word}" for word in outside if word in text]
    for page in _pages():  # a reader has no tracker to look an issue up in
        text = page.read_text(encoding="utf-8")
        found += [f"{page.relative_to(ROOT)}: {m}" for m in re.findall(r"\b[Ii]ssue \d+", text)]
    assert not found, found


def test_design_page_has_the_sections_the_code_cites() -> None:
    """docs/design.md has sections §1–§15 in order, and every `docs/design.md §N` cited in
    the code and tests is one of them."""
    numbers = [int(n) for n in re.findall(r"^## (\d+)\. ", _doc("design.md"), re.M)]
    assert numbers == list(range(1, 16)), numbers
    cited = set()
    for folder in ("sheetq", "tests", "benchmarks"):
        for path in (ROOT / folder).rglob("*.py"):
            text = path.read_text(encoding="utf-8")
            cited |= {int(n) for n in re.findall(r"docs/design\.md\s+§(\d+)", text)}
    assert cited and cited <= set(numbers), sorted(cited - set(numbers))


def test_readme_test_command_is_what_ci_runs() -> None:
    """The README's second command runs the suite exactly as .ci/run does."""
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    blocks = re.findall(r"```sh\n(.*?)\n```", README.split("\n## Try it\n")[1], re.S)
    demo, tests = blocks[0], blocks[1]
    assert demo.endswith(".venv/bin/sheetq demo")
    command = tests.rsplit("&& ", 1)[1]
    assert command == ".venv/bin/python -m pytest -q", command
    assert command in ci, ci


@pytest.mark.slow
def test_readme_tour_runs_as_written(tmp_path: Path) -> None:
    """The README's five-minute tour, run line by line in an empty folder, does what the text
    after it says: a duplicate, a conflict (exit 3), one task done and one failed, a requeue."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    shim = bin_dir / "sheetq"
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m sheetq "$@"\n', encoding="utf-8")
    shim.chmod(0o755)
    work = tmp_path / "tour"
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SHEETQ_", "TELEGRAM_"))}
    env.update(PATH=f"{bin_dir}{os.pathsep}{env.get('PATH', '')}", PYTHONPATH=str(ROOT))
    env["SHEETQ_LOCK_DIR"] = str(tmp_path / "locks")
    script = _code_block(README, "## A five-minute tour")
    r = subprocess.run(
        ["bash", "-c", script], cwd=work, env=env, capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 0, r.stderr
    said = r.stdout + r.stderr
    for fragment in (
        "(key lead:lead_id=L-1)",
        "duplicate: already task",
        "conflict: key 'lead:lead_id=L-1'",
        "2 claimed in 1 batch",
        "1 done, 0 retry, 1 failed, 1 alert owed",
        "exit 65 (EX_DATAERR): VAT number missing",
        "requeued: 1",
        "alerts are off",
    ):
        assert fragment in said, (fragment, said)
    assert (
        "crm-id-42"
        in subprocess.run(
            ["sheetq", "list", "--status", "done", "--json"],
            cwd=work,
            env={**env, "SHEETQ_SPREADSHEET": "local:tour.db"},
            capture_output=True,
            text=True,
            timeout=60,
        ).stdout
    )


@pytest.mark.slow
def test_postgres_silent_host_line_is_documented_as_printed() -> None:
    """A PostgreSQL host that takes the connection and never answers: the line sheetq prints
    is the one docs/operating.md's failures table quotes (with the wait it was given)."""
    row = next(line for line in _doc("operating.md").splitlines() if "never answers" in line)
    documented = re.search(r"`(cannot connect: no answer within 10s[^`]*)`", row)
    assert documented, row
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        port = silent.getsockname()[1]
        env = {k: v for k, v in os.environ.items() if not k.startswith(("SHEETQ_", "PG"))}
        env.update(
            SHEETQ_DATABASE_URL=f"postgresql://bob@127.0.0.1:{port}/jobs",
            PGCONNECT_TIMEOUT="2",
            PYTHONPATH=str(ROOT),
        )
        began = time.monotonic()
        r = subprocess.run(
            [sys.executable, "-m", "sheetq", "status"],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert time.monotonic() - began < 10
    assert r.returncode == EXIT_FAILURE
    expected = documented[1].replace("within 10s", "within 2s")
    assert r.stderr.strip().endswith(expected), (r.stderr, expected)
