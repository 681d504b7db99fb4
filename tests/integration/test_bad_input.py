"""Bad input of every kind: one clear line on stderr, the documented exit code, nothing written."""

from __future__ import annotations

import asyncio
import os
import sqlite3
from pathlib import Path

import pytest

from tests.conftest import Book, run_cli, write_config
from tests.sheet_only import sheet_only

ON_POSTGRES = True  # the behavioural suite: also runs on PostgreSQL (docs/design.md §10)


def _one_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, stderr
    return lines[0]


@pytest.mark.parametrize(
    ("args", "stdin", "fragment"),
    [
        (["enqueue", "lead", "{not json"], None, "invalid JSON at column 2"),
        (["enqueue", "lead", "[1, 2, 3]"], None, "expected a JSON object, got an array"),
        (["enqueue", "lead", '"text"'], None, "got a string"),
        (["enqueue", "lead", "-"], "", "empty"),
        (["enqueue", "lead", "--file", "/no/such/file.json"], None, "no such file"),
        (["enqueue", "lead", "{}", "--file", "x.json"], None, "not both"),
        (["enqueue", "lead", "--jsonl", "--key", "k"], "{}\n", "--key cannot be used"),
        (["enqueue", "bad type!", "{}"], None, "TYPE 'bad type!'"),
        (["enqueue", "lead", "{}", "--key", "   "], None, "--key: empty"),
        (["enqueue", "lead", "{}", "--delay", "soon"], None, "expected a duration"),
        (["enqueue", "lead", "{}", "--at", "next week"], None, "--at"),
        (["enqueue", "lead", "{}", "--tpye", "x"], None, "No such option: --tpye"),
        (["enqueue"], None, "Missing argument 'TYPE'"),
        (["process", "--batch-size", "0"], None, "--batch-size"),
        (["process", "--type", "nosuch"], None, "--type 'nosuch': no handler is configured"),
        (["enqueue", "lead", '{"a": 1e999}'], None, "a number too large for a double"),
        (["process", "--max-batches", "2", "--until-empty"], None, "not both"),
        (["process", "--max-runtime", "fast"], None, "--max-runtime"),
        (["list", "--status", "nope"], None, "--status 'nope'"),
        (["requeue", "--error-class", "bogus"], None, "--error-class 'bogus'"),
        (["frobnicate"], None, "No such command 'frobnicate'"),
        (["enqueue", "lead", "-"], '{"a":' * 600 + "1" + "}" * 600, "more than 100 levels"),
        (["enqueue", "lead", "-"], '{"n": ' + "9" * 5000 + "}", "more than 4,300 digits"),
        (["enqueue", "lead", "{}", "--key", "a\udcffb"], None, "not valid UTF-8: byte 0xFF"),
        (["enqueue", "lead", "-"], '{"name": "Jos\udce9"}', "stdin: not UTF-8 text (byte 13)"),
        (["enqueue", "lead", "--jsonl"], '{"a": 1}\n\udcff\n', "stdin: not UTF-8 text (byte 9)"),
    ],
)
def test_usage_errors_exit_2_and_write_nothing(
    book: Book, args: list[str], stdin: str | None, fragment: str
) -> None:
    """Each mistake is named in one line, exit 2, and the sheet is unchanged."""
    r = run_cli(args, input=stdin)
    assert r.code == 2, (r.stdout, r.stderr)
    assert fragment in _one_line(r.stderr)
    assert book.records() == [] and book.log() == []


def test_jsonl_reports_every_bad_line_with_its_number(book: Book) -> None:
    """`enqueue --jsonl`: a number too large for a double and an unpaired surrogate are
    named with their line, like invalid JSON, and all bad lines are in the one report;
    exit 2, nothing written."""
    too_large = "a number too large for a double"
    r = run_cli(["enqueue", "a", "--jsonl"], input='{"id": 20}\n{"id": 1e999}\n')
    assert r.code == 2
    assert _one_line(r.stderr).startswith(f"sheetq: error: stdin line 2: {too_large}")
    text = '{"id": 1000}\nnot json\n{"id": 1e999}\n{"a": "\\ud800"}\n{"id": 1}\n'
    r = run_cli(["enqueue", "a", "--jsonl"], input=text)
    assert r.code == 2
    line = _one_line(r.stderr)
    assert "stdin line 2: invalid JSON at column 1" in line
    assert f"stdin line 3: {too_large}" in line
    assert "stdin line 4: invalid Unicode at character 6: an unpaired surrogate" in line
    assert "line 1:" not in line and "line 5" not in line and "payload:" not in line
    assert line.endswith(" — nothing was enqueued")
    assert book.records() == [] and book.log() == []


@pytest.mark.slow
def test_a_local_workbook_locked_past_the_enqueue_timeout_is_unavailable(
    book: Book, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another writer holds the local workbook's write lock longer than
    SHEETQ_ENQUEUE_TIMEOUT: `enqueue` exits 1 (an unreachable store) with one line saying
    the workbook stayed locked and naming the variable; `sheetq.enqueue` and
    `enqueue_async(None, …)` raise `StoreUnavailable` saying the same; nothing is written."""
    import sheetq

    if not book.spreadsheet.startswith("local:"):
        pytest.skip("a lock of the local workbook's SQLite file")
    path = Path(book.spreadsheet.removeprefix("local:"))
    monkeypatch.setenv("SHEETQ_ENQUEUE_TIMEOUT", "1s")
    said = (
        f"{path}: cannot write: the workbook stayed locked by another writer for 1s "
        "(SHEETQ_ENQUEUE_TIMEOUT); try again when it is done"
    )
    holder = sqlite3.connect(path, isolation_level=None)
    try:
        holder.execute("BEGIN IMMEDIATE")
        r = run_cli(["enqueue", "lead", '{"n": 1}'])
        assert r.code == 1
        assert _one_line(r.stderr) == f"sheetq: error: {said}"
        with pytest.raises(sheetq.StoreUnavailable) as raised:
            sheetq.enqueue("lead", {"n": 2})
        assert str(raised.value) == said
        with pytest.raises(sheetq.StoreUnavailable):
            asyncio.run(sheetq.enqueue_async(None, "lead", {"n": 3}))
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert book.records() == [] and book.log() == []


def test_missing_spreadsheet_names_both_forms(monkeypatch: pytest.MonkeyPatch) -> None:
    """No SHEETQ_SPREADSHEET and no --spreadsheet: exit 2 naming both forms; no local fallback."""
    monkeypatch.delenv("SHEETQ_SPREADSHEET", raising=False)
    for args in (["enqueue", "lead", "{}"], ["process"], ["status"]):
        r = run_cli(args)
        assert r.code == 2
        line = _one_line(r.stderr)
        assert "SHEETQ_SPREADSHEET" in line and "local:PATH" in line and "Google" in line
    assert not list(Path.cwd().glob("*.db"))


def test_database_url_in_the_spreadsheet_variable_is_named_not_echoed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A PostgreSQL URL in SHEETQ_SPREADSHEET: one line naming SHEETQ_DATABASE_URL, exit 2,
    and the password in the URL is not printed."""
    monkeypatch.delenv("SHEETQ_DATABASE_URL", raising=False)
    monkeypatch.setenv("SHEETQ_SPREADSHEET", "postgresql://app:s3cret@db.example/shop")
    r = run_cli(["status"])
    assert r.code == 2
    line = _one_line(r.stderr)
    assert "SHEETQ_DATABASE_URL" in line and "s3cret" not in r.stdout + r.stderr


def test_workbook_not_initialised(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A local workbook that does not exist yet: exit 2 telling to run `sheetq init`."""
    monkeypatch.setenv("SHEETQ_SPREADSHEET", f"local:{tmp_path / 'none.db'}")
    r = run_cli(["enqueue", "lead", "{}"])
    assert r.code == 2 and "sheetq init" in _one_line(r.stderr)
    assert not (tmp_path / "none.db").exists()
    (tmp_path / "junk.db").write_text("this is not sqlite")
    monkeypatch.setenv("SHEETQ_SPREADSHEET", f"local:{tmp_path / 'junk.db'}")
    r = run_cli(["status"])
    assert r.code == 2 and "not a sheetq workbook" in _one_line(r.stderr)


@pytest.mark.parametrize(
    ("config", "fragment"),
    [
        ("[types.lead\ncommand = 'x'\n", "not valid TOML"),
        ("[types.lead]\ncomand = 'x'\n", "did you mean 'command'"),
        ("[defaults]\nmax_attempts = 0\n", "max_attempts"),
        ("[types.lead]\nhttp = { headers = {} }\n", "http.url: required"),
    ],
)
def test_bad_config_exit_2(book: Book, config: str, fragment: str) -> None:
    """An invalid sheetq.toml: one line naming the problem, exit 2, for every command."""
    write_config(config)
    for args in (["process"], ["enqueue", "lead", "{}"], ["status"]):
        r = run_cli(args)
        assert r.code == 2, r.stderr
        assert fragment in _one_line(r.stderr)
        assert "sheetq.toml" in r.stderr  # which file says it
    assert book.records() == []


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ("[queue]\nlock_dir = 5\n", "[queue].lock_dir: expected a folder path (text), got 5"),
        ('[queue]\nlock_dir = "  "\n', "[queue].lock_dir: expected a folder path, got an empty"),
        ("[queue]\nspreadsheet = 5\n", "[queue].spreadsheet: expected a Google Sheets"),
        ("[queue]\nqueue_sheet = 5\n", "[queue].queue_sheet: expected a worksheet title (text)"),
        ('[queue]\nlog_sheet = ""\n', "[queue].log_sheet: an empty worksheet title; remove"),
        ('[queue]\narchive_sheet = "  "\n', "[queue].archive_sheet: an empty worksheet title"),
        ("[defaults]\nowner = 5\n", "[defaults].owner: expected an owner's name (text), got 5"),
        ("[defaults]\ntimeout = []\n", "[defaults].timeout: expected a duration like '10m'"),
        ("[defaults]\nbackoff = [[1]]\n", "[defaults].backoff: expected a duration"),
        ("[types.a]\ncommand = ['true']\ncwd = 5\n", "[types.a].cwd: expected a folder path"),
        ("[types.a]\ncommand = ['true']\nmax_age = false\n", "[types.a].max_age: expected a"),
        ("[types.a]\ncommand = ['true']\non_unknown = 5\n", "on_unknown: expected one of"),
        (
            "[types.a]\nhttp = { url = 'http://x', method = 5 }\n",
            "[types.a].http.method: expected an HTTP method",
        ),
        ("[telegram]\ntemplate = 5\n", "[telegram].template: expected a file path (text), got 5"),
        ("[telegram]\nchat_id = []\n", "[telegram].chat_id: expected a chat id"),
        ("[telegram]\nthread_id = 1.5\n", "[telegram].thread_id: expected a topic's id"),
        ("[telegram]\napi_url = 5\n", "[telegram].api_url: expected a URL (text), got 5"),
        ("[mirror]\ninterval = []\n", "[mirror].interval: expected a duration"),
        ("[connectors.c]\nbreaker_cooldown = []\n", "[connectors.c].breaker_cooldown: expected"),
        ("typo = 1\n", "unknown key 'typo'"),
        ("types = 5\n", "[types]: expected a table"),
        ("ingress = 5\n", "[ingress]: expected a table"),
    ],
)
def test_a_config_value_of_the_wrong_type_names_the_file_and_key(
    book: Book, tmp_path: Path, config: str, message: str
) -> None:
    """A value of the wrong type in a --config file: exit 2, one line starting with the
    file's full path and naming the key, for every command (doctor: a problem of its own,
    exit 1); nothing written. The
    SHEETQ_SPREADSHEET variable overriding [queue].spreadsheet does not hide its mistake."""
    path = write_config(config, tmp_path / "bad.toml")
    for args in (["status"], ["enqueue", "a", "{}"]):
        r = run_cli(["--config", str(path), *args])
        assert r.code == 2, (args, r.stdout, r.stderr)
        line = _one_line(r.stderr)
        assert line.startswith(f"sheetq: error: {path.resolve()}: "), line
        assert message in line, line
    r = run_cli(["--config", str(path), "doctor"])  # a problem of its own, not "all fine"
    assert r.code == 1 and message in " ".join(r.stdout.split()), r.stdout
    assert book.records() == [] and book.log() == []


def test_an_unset_worksheet_title_keeps_its_default(book: Book, tmp_path: Path) -> None:
    """Only a title given empty is refused: a [queue] table without it uses the default."""
    path = write_config("[queue]\nbatch_size = 5\n", tmp_path / "ok.toml")
    assert run_cli(["--config", str(path), "enqueue", "a", "{}"]).code == 0
    assert [row["type"] for row in book.records()] == ["a"]


def test_serve_names_the_file_of_a_bad_ingress_key(book: Book, tmp_path: Path) -> None:
    """`[ingress] listen = 5`, read by serve alone: exit 2, one line with the file's path."""
    path = write_config("[ingress]\nlisten = 5\n", tmp_path / "bad.toml")
    r = run_cli(["--config", str(path), "serve"])
    assert r.code == 2
    assert _one_line(r.stderr) == (
        f"sheetq: error: {path.resolve()}: [ingress].listen: expected HOST:PORT like "
        "127.0.0.1:8080, got 5"
    )


def test_unreadable_config(book: Book, tmp_path: Path) -> None:
    """A config file that cannot be read, or a --config that does not exist: exit 2."""
    r = run_cli(["--config", str(tmp_path / "missing.toml"), "status"])
    assert r.code == 2 and "not found" in _one_line(r.stderr)
    path = write_config("[queue]\n")
    if os.geteuid() != 0:  # root reads everything
        path.chmod(0)
        r = run_cli(["status"])
        assert r.code == 2 and "cannot read" in _one_line(r.stderr)
    r = run_cli(["--config", str(tmp_path), "status"])
    assert r.code == 2 and "cannot read" in _one_line(r.stderr)


def test_missing_columns_and_duplicate_headers(book: Book) -> None:
    """A sheet missing sheetq's columns says to run init; a repeated header names its columns."""
    sheet_only(book, "header cells; a database's schema is checked by version (tests/postgres)")
    grid = book.grid("Queue")
    status_col = grid[0].index("status")
    book.set_cell("Queue", 1, "status", "state")
    r = run_cli(["status"])
    assert r.code == 2 and "lacks column(s) status" in r.stderr and "sheetq init" in r.stderr
    book.set_cell("Queue", 1, "state", "status")
    book.set_cell("Queue", 1, "owner", "type")
    r = run_cli(["process"])
    assert r.code == 2
    line = _one_line(r.stderr)
    assert "'type' appears twice" in line and "columns C and Q" in line
    assert status_col == 4


def test_bad_sheetq_now(book: Book, monkeypatch: pytest.MonkeyPatch) -> None:
    """SHEETQ_NOW that is not ISO 8601 is refused with exit 2."""
    monkeypatch.setenv("SHEETQ_NOW", "yesterday")
    r = run_cli(["process"])
    assert r.code == 2 and "SHEETQ_NOW" in _one_line(r.stderr)


def test_help_for_every_command_has_an_example() -> None:
    """Every command has help text with an example (and none crashes)."""
    from sheetq.cli.app import app

    names = [c.name or c.callback.__name__ for c in app.registered_commands if c.callback]
    assert len(names) >= 13
    for name in names:
        r = run_cli([name, "--help"])
        assert r.code == 0, (name, r.stderr)
        assert "Example" in r.stdout, name


def test_foreign_sqlite_file_is_never_changed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Pointing sheetq (even `init`) at another program's SQLite file: exit 2, file unchanged."""
    import sqlite3

    path = tmp_path / "crm.db"
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE customers (id INTEGER, name TEXT)")
    db.execute("INSERT INTO customers VALUES (1, 'Юлія')")
    db.commit()
    db.close()
    before = path.read_bytes()
    monkeypatch.setenv("SHEETQ_SPREADSHEET", f"local:{path}")
    for args in (["status"], ["init"], ["enqueue", "t", "{}"]):
        r = run_cli(args)
        assert r.code == 2 and "not a sheetq workbook" in _one_line(r.stderr), r.stderr
    assert path.read_bytes() == before
    assert not (tmp_path / "crm.db-wal").exists()


@pytest.mark.parametrize("value", ['"72"', "72", "2.5"])
def test_a_config_duration_without_a_unit_is_refused(book: Book, value: str) -> None:
    """`max_age = "72"` in sheetq.toml: 72 what? Refused with exit 2 naming the key, as on
    the command line, instead of being taken as seconds."""
    write_config(f"[types.job]\ncommand = ['true']\nmax_age = {value}\n")
    r = run_cli(["status"])
    assert r.code == 2
    line = _one_line(r.stderr)
    assert "[types.job].max_age" in line and "needs a unit" in line


@pytest.mark.parametrize("url", ["mysql://u@localhost/q", "localhost:5432/q"])
def test_database_url_that_is_not_postgresql_is_refused(
    book: Book, monkeypatch: pytest.MonkeyPatch, url: str
) -> None:
    """SHEETQ_DATABASE_URL that is not postgresql:// or postgres://: exit 2 with one line that
    says what was expected, and nothing written to the spreadsheet either."""
    monkeypatch.setenv("SHEETQ_DATABASE_URL", url)
    r = run_cli(["enqueue", "lead", "{}"])
    assert r.code == 2
    assert "expected a PostgreSQL URL" in _one_line(r.stderr)
    monkeypatch.delenv("SHEETQ_DATABASE_URL")
    assert book.records() == []
