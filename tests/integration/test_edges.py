"""Edges a newcomer hits: a broken `.env`, a proxy's error page instead of Telegram, a
local path that is a folder or in no folder, an ambiguous payload, Google unreachable from
the mirror — each one clear line on stderr and the documented exit code."""

from __future__ import annotations

import os
import re
import sqlite3
from pathlib import Path

import pytest

from tests.conftest import Book, Result, handler_script, run_cli, run_proc, write_config

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


# --- Telegram behind a proxy ----------------------------------------------------------------


@pytest.mark.parametrize("empty_book", ["local"], indirect=True)
@pytest.mark.parametrize("status", [502, 200])
@pytest.mark.parametrize("quiet", [[], ["-q"]], ids=["plain", "quiet"])
def test_proxy_error_page_instead_of_telegram_is_one_line(
    book: Book, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, quiet: list[str], status: int
) -> None:
    """A proxy answers Telegram's sendMessage with its 502 HTML page, or a login page with
    200 (not JSON): `process` (also with -q, as cron runs it) says so in one stderr line,
    no library traceback; the alert stays owed."""
    from tests.fakes.telegram_fake import FORUM_CHAT_ID, FakeBotAPI

    fail = handler_script(tmp_path, "fail", "import sys\nsys.exit(65)\n")
    write_config(f"[types.x]\ncommand = {fail}\n")
    assert run_cli(["enqueue", "x", "{}"]).code == 0
    with FakeBotAPI() as fake:
        monkeypatch.setenv("SHEETQ_TELEGRAM_API_URL", fake.base_url)
        monkeypatch.setenv("TELEGRAM_BOT_TOKEN", fake.token)
        monkeypatch.setenv("TELEGRAM_CHAT_ID", str(FORUM_CHAT_ID))
        fake.server_error_next(status)
        r = run_cli(["process", "--json", *quiet])
    assert r.code == 0 and r.json()["alerts_owed"] == 1
    assert "Traceback" not in r.stderr and "<html" not in r.stderr.lower()
    lines = r.stderr.splitlines()
    said = {
        502: "Telegram unreachable or failing (Bad Gateway (502))",
        200: "answered with something that is not the Bot API (not JSON",
    }[status]
    assert len(lines) == 1 and said in lines[0], lines


# --- local:PATH -----------------------------------------------------------------------------


def _doctor_line(r: Result) -> str:
    return next(x for x in r.stdout.splitlines() if "local workbook" in x)


def _doctor_answer(r: Result) -> str:
    """The `local workbook` problem of `doctor` as `init` words it: "DETAIL; FIX"."""
    line = _doctor_line(r)
    assert line.startswith("problem local workbook  "), line
    return line.removeprefix("problem local workbook  ").replace("  → ", "; ")


def test_local_file_in_a_missing_folder_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`local:/no/such/dir/q.db`: `init` creates nothing (no folder, no file) and says which
    folder is missing (exit 2); `status` and `doctor` say the same."""
    folder = tmp_path / "typo" / "dir"
    monkeypatch.setenv("SHEETQ_SPREADSHEET", f"local:{folder / 'q.db'}")
    why = f"{folder / 'q.db'}: no such folder {folder}"
    for command in ("init", "status"):
        r = run_cli([command])
        assert r.code == 2 and r.stderr.startswith(f"sheetq: error: {why}; "), r.stderr
        assert len(r.stderr.splitlines()) == 1
    assert not (tmp_path / "typo").exists()
    r = run_cli(["doctor"])
    assert r.code == 1 and _doctor_answer(r).startswith(why)


def test_local_folder_is_refused_naming_a_file_in_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`local:<a folder>`: init, status and doctor all say it is a folder and name a file
    in it; nothing is created in the folder."""
    folder = tmp_path / "data"
    folder.mkdir()
    monkeypatch.setenv("SHEETQ_SPREADSHEET", f"local:{folder}")
    line = f"{folder}: a folder, not a file; name a file in it (local:{folder}/sheetq.db)"
    for command in ("init", "status"):
        r = run_cli([command])
        assert (r.code, r.stderr) == (2, f"sheetq: error: {line}\n"), command
    r = run_cli(["doctor"])
    assert r.code == 1 and _doctor_answer(r) == line
    assert list(folder.iterdir()) == []


def test_local_device_or_pipe_is_refused_the_same_by_init_status_and_doctor(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`local:/dev/null` or a named pipe: one answer from init, status and doctor (not "run
    `sheetq init`", which could never fill it)."""
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    for path in (Path("/dev/null"), fifo):
        monkeypatch.setenv("SHEETQ_SPREADSHEET", f"local:{path}")
        line = (
            f"{path}: not a regular file (a device, pipe or socket); name a file for the "
            "workbook, such as local:./sheetq.db"
        )
        for command in ("init", "status"):
            r = run_cli([command])
            assert (r.code, r.stderr) == (2, f"sheetq: error: {line}\n"), command
        r = run_cli(["doctor"])
        assert r.code == 1 and _doctor_answer(r) == line


@pytest.mark.parametrize("kind", ["tables", "text"])
def test_foreign_file_gets_one_answer_from_doctor_init_and_status(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    """Another program's SQLite file, or a text file: `doctor` gives the answer `init` and
    `status` give (choose another path), never "run `sheetq init`"; the file is unchanged."""
    path = tmp_path / "crm.db"
    if kind == "tables":
        with sqlite3.connect(path) as db:
            db.execute("CREATE TABLE customers (id INTEGER)")
        db.close()
    else:
        path.write_text("name,phone\n")
    before = path.read_bytes()
    monkeypatch.setenv("SHEETQ_SPREADSHEET", f"local:{path}")
    answers = []
    for command in ("init", "status"):
        r = run_cli([command])
        assert r.code == 2, r.stderr
        answers.append(r.stderr.removeprefix("sheetq: error: ").strip())
    r = run_cli(["doctor"])
    assert r.code == 1
    answers.append(_doctor_answer(r))
    assert answers[0] == answers[1] == answers[2] and "choose another path" in answers[0]
    assert "sheetq init" not in r.stdout
    assert path.read_bytes() == before


# --- ambiguous payloads -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ('{"a": 1, "a": 2}', 'key "a" appears twice at the top level'),
        (
            '{"lead": {"tags": [{"id": 1, "id": 1}]}, "b": 0}',
            'key "id" appears twice in lead.tags[0]',
        ),
    ],
    ids=["top", "nested"],
)
@pytest.mark.parametrize("source", ["argument", "file", "stdin", "jsonl"])
def test_ambiguous_payload_is_refused_naming_the_key(
    book: Book, tmp_path: Path, source: str, text: str, said: str
) -> None:
    """A payload naming one key twice (at any depth; JSON parsers disagree on which value
    wins): exit 2, one line naming the key and its object (and the --jsonl line), nothing
    written — given inline, with --file, on stdin or as a --jsonl line."""
    stdin = None
    if source == "argument":
        args, where = [text], "payload"
    elif source == "file":
        (tmp_path / "p.json").write_text(text, encoding="utf-8")
        args, where = ["--file", str(tmp_path / "p.json")], str(tmp_path / "p.json")
    elif source == "stdin":
        args, where, stdin = ["-"], "stdin", text
    else:
        args, where, stdin = ["--jsonl", "-"], "stdin line 2", '{"ok": 1}\n' + text + "\n"
    r = run_cli(["enqueue", "job", *args], input=stdin)
    assert r.code == 2, r.stderr
    assert r.stderr.startswith(f"sheetq: error: {where}: {said}; which value is meant is ")
    assert len(r.stderr.splitlines()) == 1
    assert book.records() == [] and book.log() == []


def test_jsonl_error_says_its_line_once(book: Book) -> None:
    """A bad --jsonl line is named by its line in the input and the column in it, not
    "line 2: … at line 1, column 16"."""
    r = run_cli(["enqueue", "job", "--jsonl", "-"], input='{"a": 1}\n{"a": 1, "b": }\n')
    assert r.code == 2
    assert r.stderr.startswith("sheetq: error: stdin line 2: invalid JSON at column 15: ")
    assert "line 1" not in r.stderr


# --- smaller ------------------------------------------------------------------------------


def test_verbose_line_says_the_handler_time_and_when_it_retries(
    book: Book, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`process -v` says how long the handler ran and, for a retry, when the next attempt
    is — not "retry in 0.15s", which reads as a schedule."""
    monkeypatch.setenv("SHEETQ_NOW", "2026-03-02T12:00:00Z")
    again = handler_script(tmp_path, "again", "import sys\nsys.exit(75)\n")
    write_config(f'[defaults]\nbackoff = ["2m"]\njitter = 0\n\n[types.job]\ncommand = {again}\n')
    task_id = run_cli(["enqueue", "job", "{}", "--json"]).json()["task_id"]
    r = run_cli(["process", "-v"])
    assert r.code == 0, r.stderr
    line = next(x for x in r.stderr.splitlines() if f"{task_id} job:" in x)
    assert re.search(r"handler ran \d+\.\d\ds, retry at 2026-03-02T12:02:00Z$", line), line
    assert "retry in" not in r.stderr


def test_enqueue_help_says_how_jsonl_is_written() -> None:
    """`enqueue --help` does not promise "one write, or none" for --jsonl: Google takes a
    batch over ~9 MB in several writes, and running the command again completes it."""
    r = run_cli(["enqueue", "--help"])
    text = " ".join(r.stdout.split())
    assert r.code == 0 and "one write, or none" not in text
    assert "~9 MB" in text and "running the command again completes the batch" in text


def test_stats_since_a_future_time_is_refused(book: Book, monkeypatch: pytest.MonkeyPatch) -> None:
    """`stats --since` a time after now: exit 2 with one line saying so, never a window of
    negative seconds; now itself is an empty window."""
    monkeypatch.setenv("SHEETQ_NOW", "2026-03-02T12:00:00Z")
    for args in (["stats", "--since", "2027-03-02"], ["stats", "--since", "2027-03-02", "--json"]):
        r = run_cli(args)
        assert (r.code, r.stdout) == (2, ""), r.stdout
        assert r.stderr == (
            "sheetq: error: --since 2027-03-02: in the future (now is 2026-03-02T12:00:00Z); "
            "give an earlier time or a duration like '24h'\n"
        )
    r = run_cli(["stats", "--since", "2026-03-02T12:00:00Z", "--json"])
    assert r.code == 0 and r.json()["window_seconds"] == 0


@pytest.mark.parametrize("key", ["token", "bot_token"])
def test_telegram_token_in_the_config_points_at_the_variable(book: Book, key: str) -> None:
    """`[telegram] token = "…"` in sheetq.toml: exit 2, and the line says to set
    TELEGRAM_BOT_TOKEN (a secret, kept out of the file) instead."""
    write_config(f'[telegram]\n{key} = "123456:ABC"\nchat_id = "-100"\n')
    r = run_cli(["status"])
    assert r.code == 2 and len(r.stderr.splitlines()) == 1
    assert f"[telegram]: unknown key '{key}'" in r.stderr
    assert "set TELEGRAM_BOT_TOKEN in the environment or in .env" in r.stderr
    assert "123456:ABC" not in r.stderr


def test_license_is_the_declared_mit() -> None:
    """The repository ships the licence pyproject.toml declares: MIT, the sheetq authors."""
    import tomllib

    from tests.conftest import ROOT

    declared = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    text = (ROOT / "LICENSE").read_text(encoding="utf-8")
    assert declared["project"]["license"] == "MIT"
    assert text.startswith("MIT License\n") and "Copyright (c) 2026 the sheetq authors" in text


def test_a_missing_working_folder_is_named_not_the_command(book: Book, tmp_path: Path) -> None:
    """A command handler whose `cwd` does not exist: the task's error names the folder,
    not the (existing) command."""
    missing = tmp_path / "no-such-folder"
    write_config(f'[types.lead]\ncommand = ["true"]\ncwd = "{missing}"\n')
    task = run_cli(["enqueue", "lead", '{"n": 1}', "--json"]).json()["task_id"]
    r = run_cli(["process"])
    assert r.code == 0, r.stderr
    error = book.row_of(task)["last_error"]
    assert "working folder not found" in error and str(missing) in error, error
    assert "command not found" not in error, error
