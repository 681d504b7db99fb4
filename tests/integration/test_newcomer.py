"""The CLI as a newcomer meets it: honest exit codes, honest numbers, clean
terminals, and the input a real setup produces."""

from __future__ import annotations

import json
import sqlite3
import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from tests.conftest import Book, handler_script, run_cli, run_proc, write_config

NOW = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
OK = "import sys\nsys.stdin.read()\nprint('ok')\n"
RAW = "\x00\x1b\x07\x9b\x7f"  # what must never reach a terminal or a cell raw


def _at(monkeypatch: pytest.MonkeyPatch, when: datetime) -> None:
    monkeypatch.setenv("SHEETQ_NOW", when.strftime("%Y-%m-%dT%H:%M:%SZ"))


def _job(tmp_path: Path, body: str = OK, extra: str = "") -> None:
    write_config(f"[types.job]\ncommand = {handler_script(tmp_path, 'h', body)}\n{extra}")


def _enqueue(payload: dict[str, object], task_type: str = "job") -> str:
    r = run_cli(["enqueue", task_type, json.dumps(payload), "--json"])
    assert r.code == 0, r.stderr
    return str(r.json()["task_id"])


# --- numbers on screen are the real ones ------------------------------------------------


def test_status_table_total_counts_unrecognised_rows(book: Book, tmp_path: Path) -> None:
    """A manager-typed status sheetq does not know is in the table's total, as in --json."""
    _job(tmp_path)
    ids = [_enqueue({"n": i}) for i in range(3)]
    book.set_cell("Queue", int(book.row_of(ids[1])["_row"]), "status", "на паузі")
    doc = run_cli(["status", "--json"]).json()
    assert doc["total"] == 3 and doc["unrecognised"] == 1
    assert sum(doc["counts"].values()) + doc["unrecognised"] == doc["total"]
    assert sum(doc["by_type"]["job"].values()) == 3
    lines = run_cli(["status"]).stdout.splitlines()
    header = next(line.split() for line in lines if line.startswith("type"))
    assert header[-2:] == ["unrecognised", "total"]
    for name in ("job", "all"):
        cells = next(line.split() for line in lines if line.startswith(name + " "))
        assert cells[-1] == "3" and cells[-2] == "1", cells


@pytest.mark.slow  # a 2.5 s handler against a 2 s --max-runtime: real time is the point
def test_sheetq_now_fixes_the_time_but_not_the_stopwatch(
    book: Book, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With SHEETQ_NOW set, --max-runtime, `seconds` and duration_ms measure real time."""
    _at(monkeypatch, NOW)
    # The first handler must start before the limit and end after it, however slow the
    # machine is at opening the sheet and claiming: a 2 s limit, a 2.5 s handler.
    _job(tmp_path, "import sys, time\nsys.stdin.read()\ntime.sleep(2.5)\nprint('ok')\n")
    ids = [_enqueue({"n": i}) for i in range(3)]
    doc = run_cli(["process", "--batch-size", "3", "--max-runtime", "2s", "--json"]).json()
    assert (doc["done"], doc["released"]) == (1, 2), doc
    assert doc["seconds"] >= 2.5
    done = [e for e in book.log(ids[0]) if e["event"] == "done"]
    assert int(done[0]["duration_ms"]) >= 2500
    assert done[0]["ts"] == "2026-01-05T09:00:00Z"  # decisions still use the fixed time


def test_expiry_message_gives_hours_and_minutes(
    book: Book, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A task due for 70 minutes with max_age 1h says "due for 1h10m", not a rounded hour."""
    _job(tmp_path, extra="max_age = '1h'\n")
    _at(monkeypatch, NOW)
    task = _enqueue({"n": 1})
    _at(monkeypatch, NOW + timedelta(minutes=70))
    assert run_cli(["process"]).code == 0
    assert book.row_of(task)["last_error"] == (
        "expired: due for 1h10m without running, max_age is 1h"
    )


# --- a terminal is never corrupted by data ------------------------------------------------


def test_control_characters_from_handlers_are_stored_and_shown_escaped(
    book: Book, tmp_path: Path
) -> None:
    """A handler's result and error with NUL, ESC, BEL, C1 and DEL are stored as printable
    escapes, and `show`/`list` (human and --json) never print those characters raw."""
    noisy = "nul\x00here\x1b[31m bel\x07 csi\x9b del\x7f"
    write_config(
        "[types.ok]\ncommand = "
        + handler_script(tmp_path, "ok", f"import sys\nsys.stdin.read()\nprint({noisy!r})\n")
        + "\n[types.bad]\ncommand = "
        + handler_script(
            tmp_path,
            "bad",
            f"import sys\nsys.stdin.read()\nsys.stderr.write({noisy!r})\nsys.exit(65)\n",
        )
        + "\n"
    )
    good, bad = _enqueue({"n": 1}, "ok"), _enqueue({"n": 2}, "bad")
    assert run_cli(["process"]).code == 0
    escaped = "nul\\x00here\\x1b[31m bel\\x07 csi\\x9b del\\x7f"
    assert book.row_of(good)["result"] == escaped
    assert escaped in book.row_of(bad)["last_error"]
    for record in book.records() + book.log():
        assert not any(c in value for value in record.values() for c in RAW), record
    book.set_cell("Queue", int(book.row_of(good)["_row"]), "owner", "x\x1b]0;owned\x07")
    for args in (
        ["show", good],
        ["show", bad],
        ["list"],
        ["show", good, "--json"],
        ["list", "--json"],
    ):
        r = run_cli(args)
        assert r.code == 0, r.stderr
        assert not any(c in r.stdout for c in RAW), args
    assert "\\x1b]0;owned" in run_cli(["show", good]).stdout


def test_long_result_is_cut_marked_and_said_once(book: Book, tmp_path: Path) -> None:
    """A result over 1,000 characters is cut with "…", each cut is in QueueLog, and the run
    says so once on stderr."""
    _job(tmp_path, "import sys\nsys.stdin.read()\nprint('x' * 1500)\n")
    ids = [_enqueue({"n": i}) for i in range(2)]
    r = run_cli(["process", "--batch-size", "2"])
    assert r.code == 0, r.stderr
    for task in ids:
        result = book.row_of(task)["result"]
        assert len(result) == 1000 and result.endswith("…")
        done = [e for e in book.log(task) if e["event"] == "done"]
        assert "result cut to 1,000 of 1,500 characters" in done[0]["message"]
    assert r.stderr.count("cut") == 1, r.stderr


# --- a refusal is never exit 0 ----------------------------------------------------------


def test_skip_and_requeue_of_named_tasks_they_cannot_change_exit_2(
    book: Book, tmp_path: Path
) -> None:
    """skip of a done task, requeue of a processing one: exit 2, and each task says why;
    a command that acts on some of the named tasks exits 0 and names the others."""
    _job(tmp_path)
    done = _enqueue({"n": 1})
    assert run_cli(["process"]).code == 0
    r = run_cli(["skip", "--task", done])
    assert r.code == 2 and f"{done}: not skipped: it is already done" in r.stderr
    busy = _enqueue({"n": 2})
    row = int(book.row_of(busy)["_row"])
    book.set_cell("Queue", row, "status", "processing")
    book.set_cell("Queue", row, "lease_until", "2999-01-01T00:00:00Z")
    r = run_cli(["requeue", "--status", "processing", "--task", busy, "--json"])
    assert r.code == 2 and r.json()["requeued"] == 0
    assert f"{busy}: not requeued: a run is working on it" in r.stderr
    r = run_cli(["requeue", "--task", done])
    assert r.code == 2 and "add --status done" in r.stderr
    waiting = _enqueue({"n": 3})
    r = run_cli(["skip", "--task", waiting, "--task", done, "--reason", "-q"])
    assert r.code == 0 and f"{done}: not skipped" in r.stderr
    assert book.log(waiting)[-1]["message"].endswith(": -q")  # an option's value stays put
    assert book.row_of(done)["status"] == "done"


def test_process_type_without_a_handler_warns_or_exits_2(book: Book, tmp_path: Path) -> None:
    """`process --type typo`: exit 2 naming the type (with a suggestion) when no given type
    has a handler; a warning when only some are unknown."""
    _job(tmp_path)
    _enqueue({"n": 1})
    r = run_cli(["process", "--type", "jbo"])
    assert r.code == 2
    assert "--type 'jbo': no handler is configured" in r.stderr and "'job'" in r.stderr
    r = run_cli(["process", "--type", "job", "--type", "typo", "--json"])
    assert r.code == 0 and r.json()["done"] == 1
    assert "--type 'typo'" in r.stderr


def test_verbose_and_quiet_follow_the_subcommand(book: Book, tmp_path: Path) -> None:
    """`process -v` works and says batches, claims and timings; -q is accepted after any
    command; -vv adds the Sheets API requests (Google)."""
    _job(tmp_path)
    _enqueue({"n": 1})
    r = run_cli(["process", "-v"])
    assert r.code == 0, r.stderr
    assert "batch 1: claimed 1 task(s)" in r.stderr
    assert " job: handler ran " in r.stderr and "s, done" in r.stderr and "request(s)" in r.stderr
    assert run_cli(["status", "-q"]).code == 0
    assert run_cli(["list", "--verbose"]).code == 0
    r = run_cli(["status", "-vv"])
    assert r.code == 0
    if not book.spreadsheet.startswith("local:"):
        assert "/v4/spreadsheets/" in r.stderr


# --- input a real setup produces ----------------------------------------------------------


def test_config_that_is_not_utf8_exits_2(empty_book: Book) -> None:
    """A sheetq.toml in another encoding: exit 2 with a clear line; a BOM is accepted."""
    Path("sheetq.toml").write_bytes("[types.лід]\nowner = 'продажі'\n".encode("cp1251"))
    r = run_cli(["status"])
    assert r.code == 2 and "not UTF-8" in r.stderr and "Traceback" not in r.stderr
    Path("sheetq.toml").write_bytes("\ufeff[queue]\nbatch_size = 5\n".encode())
    assert run_cli(["init"]).code == 0


@pytest.mark.parametrize("how", ["inline", "stdin", "jsonl"])
def test_utf8_bom_is_accepted_everywhere(book: Book, how: str) -> None:
    """A UTF-8 BOM before the JSON (Windows tools, webhook relays) is accepted."""
    bom = "\ufeff"
    if how == "inline":
        r = run_cli(["enqueue", "job", bom + '{"a": 1}', "--json"])
    elif how == "stdin":
        r = run_cli(["enqueue", "job", "-", "--json"], input=bom + '{"a": 1}')
    else:
        r = run_cli(
            ["enqueue", "job", "--jsonl", "-", "--json"], input=bom + '{"a": 1}\n{"a": 2}\n'
        )
    assert r.code == 0, r.stderr
    assert len(book.records()) == (2 if how == "jsonl" else 1)


def test_queue_sheet_with_stray_spaces_is_trimmed_with_a_warning(
    book: Book, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SHEETQ_QUEUE_SHEET="  Queue  " uses the Queue worksheet (no second one) and says so."""
    monkeypatch.setenv("SHEETQ_QUEUE_SHEET", "  Queue  ")
    r = run_cli(["init"])
    assert r.code == 0 and "spaces around it; using 'Queue'" in r.stderr
    assert run_cli(["enqueue", "job", "{}"]).code == 0
    assert len(book.records("Queue")) == 1


def test_type_with_colon_is_refused_by_the_config(empty_book: Book) -> None:
    """[types."a:b"] is refused by every command with the CLI's own message about ':'."""
    write_config('[types."a:b"]\ncommand = "true"\n')
    r = run_cli(["status"])
    assert r.code == 2 and "'a:b'" in r.stderr and "no ':'" in r.stderr
    cli = run_cli(["enqueue", "a:b", "{}"])
    assert cli.code == 2 and "no ':'" in cli.stderr
    doctor = run_cli(["doctor"])
    assert doctor.code == 1 and "no ':'" in doctor.stdout


def test_at_far_future_is_refused_and_a_later_task_says_when_it_expires(
    book: Book, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--at 9999-12-31 would never run: exit 2; a task delayed with --at says when it
    expires unrun (max_age counts from its not-before time)."""
    _at(monkeypatch, NOW)
    _job(tmp_path, extra="max_age = '1h'\n")
    r = run_cli(["enqueue", "job", "{}", "--at", "9999-12-31T23:59:59Z"])
    assert r.code == 2 and "100 years" in r.stderr and not book.records()
    r = run_cli(["enqueue", "job", "{}", "--at", "2026-01-07T09:00:00Z"])
    assert r.code == 0
    assert "expires unrun after 2026-01-07T10:00:00Z" in r.stdout


def test_dotenv_beside_the_config_is_read_and_doctor_names_it(tmp_path: Path) -> None:
    """Cron in $HOME with --config: the .env beside sheetq.toml is read; doctor says which."""
    project = tmp_path / "project"
    project.mkdir()
    (project / "sheetq.toml").write_text("[queue]\n", encoding="utf-8")
    (project / ".env").write_text(
        f"SHEETQ_SPREADSHEET=local:{project / 'q.db'}\n", encoding="utf-8"
    )
    config = str(project / "sheetq.toml")
    assert run_proc(["--config", config, "init"]).code == 0
    assert (project / "q.db").exists()
    r = run_proc(["-c", config, "doctor"])
    assert str(project / ".env") in r.stdout, r.stdout


def test_foreign_sqlite_file_gets_one_answer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another program's SQLite file: `status` and `init` both say to choose another path."""
    path = tmp_path / "crm.db"
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE customers (id INTEGER)")
    monkeypatch.setenv("SHEETQ_SPREADSHEET", f"local:{path}")
    for command in ("status", "init"):
        r = run_cli([command])
        assert r.code == 2 and "choose another path" in r.stderr, (command, r.stderr)
        assert "sheetq init" not in r.stderr


def test_raw_tab_in_json_string_names_line_and_column(book: Book) -> None:
    """A raw tab inside a JSON string: exit 2 with line, column and how to write it."""
    r = run_cli(["enqueue", "job", '{"a": 1,\n "note": "x\ty"}'])
    assert r.code == 2
    assert "line 2, column 12" in r.stderr and "write it as \\t" in r.stderr


# --- set-up and upkeep ----------------------------------------------------------------------


def test_demo_removes_its_temporary_folder_and_says_where_it_ran(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`sheetq demo` without --dir leaves no sheetq-demo-* folder behind and prints where it ran."""
    temp = tmp_path / "tmp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    r = run_cli(["demo"])
    assert r.code == 0, r.stderr
    assert "ran in " + str(temp) in r.stdout and "now removed" in r.stdout
    assert list(temp.iterdir()) == []


def test_pyproject_license_is_an_spdx_string() -> None:
    """pyproject's license is an SPDX expression (no setuptools deprecation warning), and the
    build requires a setuptools that understands it (77 or later)."""
    import re
    import tomllib

    doc = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text("utf-8"))
    assert doc["project"]["license"] == "MIT"
    (floor,) = [r for r in doc["build-system"]["requires"] if r.startswith("setuptools")]
    match = re.fullmatch(r"setuptools>=(\d+)", floor)
    assert match and int(match.group(1)) >= 77
