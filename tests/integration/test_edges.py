"""Edges a newcomer hits: a broken `.env`, a proxy's error page instead of Telegram, a
local path that is a folder or in no folder, an ambiguous payload, Google unreachable from
the mirror — each one clear line on stderr and the documented exit code."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.conftest import Book, run_cli, run_proc

NOT_UTF8 = b"SHEETQ_BATCH=1\nGREETING=caf\xe9\n"  # Latin-1 "café": byte 27 on line 2


# --- .env ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("content", "where"),
    [
        (NOT_UTF8, "not UTF-8 text (line 2, byte 27: 0xe9)"),
        (b"EDGES_FIRST=1\nEDGES BROKEN=2\n", "line 2: cannot parse it"),
    ],
    ids=["not-utf8", "malformed"],
)
def test_broken_dotenv_is_one_line_and_exit_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, content: bytes, where: str
) -> None:
    """A `.env` that is not UTF-8, or has a line python-dotenv cannot parse: every command
    exits 2 with one line naming the file and the line (and byte); none of the file is
    loaded; `doctor` lists it as a problem beside its other checks (exit 1, no traceback)."""
    monkeypatch.setenv("SHEETQ_SPREADSHEET", f"local:{tmp_path / 'q.db'}")
    monkeypatch.delenv("EDGES_FIRST", raising=False)
    env = Path.cwd() / ".env"
    env.write_bytes(content)
    for args in (["init"], ["status"], ["enqueue", "job", "{}"]):
        r = run_cli(args)
        assert r.code == 2, (args, r.stderr)
        assert r.stderr == f"sheetq: error: {env}: {where}" + r.stderr.split(where, 1)[1]
        assert len(r.stderr.splitlines()) == 1, r.stderr
    assert "EDGES_FIRST" not in os.environ
    assert not (tmp_path / "q.db").exists()
    r = run_cli(["doctor"])
    assert r.code == 1 and "Traceback" not in r.stderr + r.stdout
    line = next(x for x in r.stdout.splitlines() if " .env " in x)
    assert line.startswith("problem") and f"{env}: {where}" in line


def test_broken_dotenv_beside_the_config_is_named(tmp_path: Path) -> None:
    """Cron in $HOME with --config: the `.env` beside sheetq.toml, not UTF-8, is named with
    its line and byte (a subprocess: the installed command, no traceback)."""
    project = tmp_path / "project"
    project.mkdir()
    (project / "sheetq.toml").write_text("[queue]\n", encoding="utf-8")
    (project / ".env").write_bytes(NOT_UTF8)
    r = run_proc(["--config", str(project / "sheetq.toml"), "status"])
    assert r.code == 2, r.stderr
    assert r.stderr == (
        f"sheetq: error: {project / '.env'}: not UTF-8 text (line 2, byte 27: 0xe9); "
        "save it as UTF-8\n"
    )
