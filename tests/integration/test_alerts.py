"""Telegram failure alerts end to end: the CLI, a workbook and the loopback fake Bot API."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import ROOT, Book, handler_script, run_cli, write_config
from tests.fakes.telegram_fake import FakeBotAPI, bot_for_sheetq, parse_entities
from tests.sheet_only import on_postgres, sheet_only

ON_POSTGRES = True  # the behavioural suite: also runs on PostgreSQL (docs/design.md §10)

WRONG_TOKEN = "654321:WRONG-token_abcdefghijklmnopqrstuvwxyz9876"
NEW_CHAT_ID = -1009876543210


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeBotAPI]:
    """A running fake Bot API that sheetq is configured to use (tiny timeouts)."""
    with bot_for_sheetq(monkeypatch, timeout="0.5") as server:
        yield server
    assert server.server_errors == []


def configure(tmp_path: Path, error: str = "bad data: field missing", *, extra: str = "") -> None:
    """Type ``x`` fails permanently (exit 65) with ``error`` on stderr; ``crm`` fails on auth."""
    fail = handler_script(
        tmp_path, "fail", f"import sys\nsys.stderr.write({error!r})\nsys.exit(65)\n"
    )
    auth = handler_script(
        tmp_path, "auth", "import sys\nsys.stderr.write('401 from CRM')\nsys.exit(77)\n"
    )
    write_config(f"[types.x]\ncommand = {fail}\n\n[types.crm]\ncommand = {auth}\n{extra}")


def enqueue(n: int, task_type: str = "x", start: int = 0) -> list[str]:
    ids = []
    for i in range(start, start + n):
        r = run_cli(["enqueue", task_type, json.dumps({"n": i}), "--json"])
        assert r.code == 0, r.stderr
        ids.append(r.json()["task_id"])
    return ids


def process(*args: str) -> dict[str, object]:
    r = run_cli(["process", "--json", *args])
    assert r.code == 0, r.stderr
    doc: dict[str, object] = r.json()
    doc["_stderr"] = r.stderr
    return doc


@contextlib.contextmanager
def monkeypatch_env(**values: str | None) -> Iterator[None]:
    with pytest.MonkeyPatch.context() as m:
        for name, value in values.items():
            if value is None:
                m.delenv(name, raising=False)
            else:
                m.setenv(name, value)
        yield


def alerted(book: Book, task_id: str) -> int:
    return sum(1 for e in book.log(task_id) if e["event"] == "alerted")


def assert_owed(book: Book, ids: list[str]) -> None:
    for task_id in ids:
        row = book.row_of(task_id)
        assert row["status"] == "failed" and row["alerted_at"] == ""
        assert alerted(book, task_id) == 0


def assert_marked(book: Book, ids: list[str], times: int = 1) -> None:
    for task_id in ids:
        assert book.row_of(task_id)["alerted_at"] != ""
        assert alerted(book, task_id) == times


# --- 1. one message per run ------------------------------------------------------------


def test_three_failures_one_message_then_nothing(
    book: Book, fake: FakeBotAPI, tmp_path: Path
) -> None:
    """Three failures in one run: one sendMessage listing all three, rows marked once."""
    configure(tmp_path)
    ids = enqueue(3)
    doc = process()
    assert doc["failed"] == 3 and doc["alerts_sent"] == 3
    assert len(fake.calls("sendmessage")) == 1 and fake.calls("getme") == []
    message = fake.messages[0]
    assert message["parse_mode"] == "HTML"
    for task_id in ids:
        assert task_id in message["plain_text"]
    assert "3 tasks failed" in message["plain_text"]
    assert_marked(book, ids)
    doc = process()
    assert doc["alerts_sent"] == 0 and len(fake.calls("sendmessage")) == 1
    assert_marked(book, ids)


def test_footer_says_how_to_requeue_where_the_queue_is(
    book: Book, fake: FakeBotAPI, tmp_path: Path
) -> None:
    """The footer offers the status cell only where a person has one (a sheet, or a
    mirror); a PostgreSQL queue without a mirror is told `sheetq requeue`."""
    configure(tmp_path)
    enqueue(1)
    assert process()["alerts_sent"] == 1
    text = fake.messages[0]["plain_text"]
    assert "run: sheetq requeue --task ID" in text
    on_postgres = bool(os.environ.get("SHEETQ_DATABASE_URL"))
    assert ("status cell" in text) is not on_postgres


def test_auth_failures_come_first(book: Book, fake: FakeBotAPI, tmp_path: Path) -> None:
    """Auth failures are listed first and the message says credentials need a person."""
    configure(tmp_path)
    permanent = enqueue(2)
    auth = enqueue(1, "crm", start=10)
    process()
    text = fake.messages[0]["plain_text"]
    assert "a person must fix them" in text and "crm" in text
    positions = [text.index(t) for t in [*auth, *permanent]]
    assert positions[0] < min(positions[1:])


# --- 2. Telegram unavailable: alerts stay owed ------------------------------------------


@pytest.mark.parametrize("fault", ["down", "502", "500", "slow", "drop"])
def test_unavailable_telegram_keeps_alerts_owed(
    book: Book, fake: FakeBotAPI, tmp_path: Path, fault: str
) -> None:
    """Down, 5xx, a dropped or too slow reply: exit 0, alerts owed, next run sends them once."""
    configure(tmp_path)
    ids = enqueue(3)
    if fault == "down":
        fake.down()
    elif fault == "slow":
        fake.slow_next(1.5)
    elif fault == "drop":
        fake.drop_next()
    else:
        fake.server_error_next(int(fault))
    doc = process()
    assert doc["failed"] == 3 and doc["alerts_sent"] == 0 and doc["alerts_owed"] == 3
    assert "stay owed" in str(doc["_stderr"])
    assert_owed(book, ids)
    fake.up()
    before = len(fake.messages)  # a slow reply may still have been delivered
    doc = process()
    assert doc["alerts_sent"] == 3
    assert len(fake.messages) == before + 1
    assert all(t in fake.messages[-1]["plain_text"] for t in ids)
    assert_marked(book, ids)


def test_nothing_listens(
    book: Book, fake: FakeBotAPI, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No server at the API URL (connection refused): exit 0, the alert stays owed."""
    configure(tmp_path)
    ids = enqueue(1)
    monkeypatch.setenv("SHEETQ_TELEGRAM_API_URL", "http://127.0.0.1:9")
    doc = process()
    assert doc["alerts_sent"] == 0 and "Telegram unreachable or failing" in str(doc["_stderr"])
    assert_owed(book, ids)


# --- 3. escaping and length -------------------------------------------------------------


def test_hostile_error_text_is_escaped_and_short(
    book: Book, fake: FakeBotAPI, tmp_path: Path
) -> None:
    """An error with <b>, &, _*[] and 5,000 chars gives a valid HTML message ≤ 4,096 chars."""
    error = "<b> & _*[] </i> &amp; " + "y" * 5000
    body = f"import json\nprint(json.dumps({{'status': 'failed', 'error': {error!r}}}))\n"
    write_config(f"[types.x]\ncommand = {handler_script(tmp_path, 'hostile', body)}\n")
    ids = enqueue(3)
    process()
    assert len(fake.calls("sendmessage")) == 1
    message = fake.messages[0]
    assert message["parse_mode"] == "HTML"
    assert len(message["text"]) <= 4096
    plain, _ = parse_entities(message["text"], "HTML")
    assert plain == message["plain_text"]
    assert plain.count("<b> & _*[] </i> &amp; yyy") == 3
    assert_marked(book, ids)


def test_many_failures_one_message_all_marked(book: Book, fake: FakeBotAPI, tmp_path: Path) -> None:
    """300 failures: one message ≤ 4,096 chars ending in "and N more"; all 300 marked."""
    module = tmp_path / "work" / "sheetq_alert_fail.py"
    module.write_text(
        "import sheetq\n\ndef fail(task):\n    raise sheetq.FailTask('bad row ' + 'z' * 300)\n",
        encoding="utf-8",
    )
    write_config('[types.bulk]\npython = "sheetq_alert_fail:fail"\n')
    lines = "\n".join(json.dumps({"n": i}) for i in range(300))
    r = run_cli(["enqueue", "bulk", "-", "--jsonl", "--json"], input=lines)
    assert r.code == 0, r.stderr
    doc = process("--batch-size", "300")
    assert doc["failed"] == 300 and doc["alerts_sent"] == 300
    assert len(fake.messages) == 1
    text = fake.messages[0]["plain_text"]
    assert len(fake.messages[0]["text"]) <= 4096
    assert "300 tasks failed" in text and "more" in text
    records = book.records()
    assert len(records) == 300 and all(r["alerted_at"] for r in records)
    assert sum(1 for e in book.log() if e["event"] == "alerted") == 300


# --- 4. flood control --------------------------------------------------------------------


@pytest.mark.slow
def test_retry_after_short_is_waited(book: Book, fake: FakeBotAPI, tmp_path: Path) -> None:
    """429 retry_after 1: sheetq waits about a second and sends in the same run."""
    configure(tmp_path)
    ids = enqueue(2)
    fake.retry_after_next(1)
    started = time.monotonic()
    doc = process()
    assert time.monotonic() - started >= 1.0
    assert doc["alerts_sent"] == 2
    assert len(fake.calls("sendmessage")) == 2 and len(fake.messages) == 1
    assert_marked(book, ids)


@pytest.mark.parametrize("ptb_timedelta", ["true", "false", None])
def test_retry_after_long_leaves_alerts_owed(
    book: Book,
    fake: FakeBotAPI,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    ptb_timedelta: str | None,
) -> None:
    """429 retry_after 60 (over the 30 s budget): not sent, owed, the note says so.

    Whatever PTB_TIMEDELTA says (retry_after as int or timedelta).
    """
    if ptb_timedelta is None:
        monkeypatch.delenv("PTB_TIMEDELTA")
    else:
        monkeypatch.setenv("PTB_TIMEDELTA", ptb_timedelta)
    configure(tmp_path)
    ids = enqueue(2)
    fake.retry_after_next(60)
    started = time.monotonic()
    doc = process()
    assert time.monotonic() - started < 10
    assert doc["alerts_sent"] == 0 and fake.messages == []
    assert "retry after 60s" in str(doc["_stderr"]) and "stay owed" in str(doc["_stderr"])
    assert_owed(book, ids)


# --- 5. refused markup -------------------------------------------------------------------


def test_parse_error_resent_as_plain_text(book: Book, fake: FakeBotAPI, tmp_path: Path) -> None:
    """A refused HTML message is re-sent at once as plain text; rows marked; reason once."""
    configure(tmp_path)
    ids = enqueue(2)
    fake.force_parse_error_next()
    doc = process()
    assert doc["alerts_sent"] == 2
    calls = fake.calls("sendmessage")
    assert [c["status"] for c in calls] == [400, 200]
    assert "parse_mode" not in fake.messages[0]
    assert all(t in fake.messages[0]["text"] for t in ids)
    assert str(doc["_stderr"]).lower().count("can't parse entities") == 1
    assert "plain text" in str(doc["_stderr"])
    assert_marked(book, ids)


def test_rejected_twice_stays_owed(book: Book, fake: FakeBotAPI, tmp_path: Path) -> None:
    """A 400 for the HTML and for the plain text too: alerts owed, the reason is shown."""
    configure(tmp_path)
    ids = enqueue(1)
    fake.fail_next(400, "Bad Request: chat not found", times=2)
    doc = process()
    assert doc["alerts_sent"] == 0 and len(fake.calls("sendmessage")) == 2
    assert "chat not found" in str(doc["_stderr"]).lower()
    assert_owed(book, ids)


# --- 6. migrated group --------------------------------------------------------------------


def test_migrated_group_reported_and_delivered(
    book: Book, fake: FakeBotAPI, tmp_path: Path
) -> None:
    """A group upgraded to a supergroup: the new id is reported and gets the alert."""
    configure(tmp_path)
    ids = enqueue(2)
    fake.migrate_next(NEW_CHAT_ID)
    doc = process()
    assert doc["alerts_sent"] == 2
    assert fake.messages[0]["chat_id"] == str(NEW_CHAT_ID)
    assert f"TELEGRAM_CHAT_ID={NEW_CHAT_ID}" in str(doc["_stderr"])
    assert_marked(book, ids)


def test_thread_id_is_sent(
    book: Book, fake: FakeBotAPI, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """TELEGRAM_THREAD_ID becomes message_thread_id (the forum topic)."""
    configure(tmp_path)
    enqueue(1)
    monkeypatch.setenv("TELEGRAM_THREAD_ID", "7")
    process()
    assert fake.messages[0]["message_thread_id"] == "7"


# --- 7. token and chat problems -----------------------------------------------------------


def test_wrong_token_says_what_to_fix(
    book: Book, fake: FakeBotAPI, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """401: one clear line naming TELEGRAM_BOT_TOKEN, alerts owed, exit 0, token not shown."""
    configure(tmp_path)
    ids = enqueue(2)
    monkeypatch.setenv("TELEGRAM_BOT_TOKEN", WRONG_TOKEN)
    r = run_cli(["process"])
    assert r.code == 0
    lines = [ln for ln in r.stderr.splitlines() if "TELEGRAM_BOT_TOKEN" in ln]
    assert len(lines) == 1 and "rejected the bot token" in lines[0]
    assert WRONG_TOKEN not in r.stdout + r.stderr
    assert_owed(book, ids)


def test_blocked_bot_says_what_to_fix(book: Book, fake: FakeBotAPI, tmp_path: Path) -> None:
    """403: one clear line saying to add/unblock the bot, alerts owed, exit 0."""
    configure(tmp_path)
    ids = enqueue(2)
    fake.block_next()
    r = run_cli(["process"])
    assert r.code == 0
    lines = [ln for ln in r.stderr.splitlines() if "blocked" in ln]
    assert len(lines) == 1 and "add the bot to the chat" in lines[0]
    assert_owed(book, ids)


# --- 8. the token never shows -------------------------------------------------------------


@pytest.mark.slow
def test_token_never_in_output_or_logs(
    book: Book,
    fake: FakeBotAPI,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Every command at -v/-vv, success and failure paths: the token is in no output or log."""
    caplog.set_level(logging.DEBUG)
    configure(tmp_path, "leaked " + fake.token + " in the error")
    outputs: list[str] = []

    def run(*args: str) -> int:
        r = run_cli(list(args))
        outputs.append(r.stdout + r.stderr)
        return r.code

    for flag in ("-v", "-vv"):
        assert run(flag, "init") == 0
        (task_id,) = enqueue(1, start=len(outputs))
        assert run(flag, "enqueue", "x", json.dumps({"n": flag})) == 0
        fake.force_parse_error_next()
        assert run(flag, "process") == 0
        assert run(flag, "status") == 0
        assert run(flag, "list") == 0
        assert run(flag, "show", task_id) == 0
        assert run(flag, "requeue", "--task", task_id) == 0
        fake.down()
        assert run(flag, "process") == 0
        assert run(flag, "alert") == 1
        assert run(flag, "alert", "--test") == 1
        fake.up()
        fake.fail_next(400, "Bad Request: message is too long", times=2)
        assert run(flag, "alert") == 1
        assert run(flag, "alert") == 0
        assert run(flag, "alert", "--test") == 0
        with monkeypatch.context() as m:
            m.setenv("TELEGRAM_BOT_TOKEN", WRONG_TOKEN)
            assert run(flag, "alert", "--test") == 1
            assert run(flag, "requeue", "--status", "failed") == 0
            assert run(flag, "process") == 0
            text = "\n".join(outputs)
            assert WRONG_TOKEN not in text
    text = "\n".join(outputs)
    assert "rejected the bot token" in text and "re-sent as plain text" in text
    assert fake.token not in text
    assert any(r.name.startswith("sheetq") for r in caplog.records)
    for record in caplog.records:
        assert fake.token not in record.getMessage()
        assert WRONG_TOKEN not in record.getMessage()
    for message in fake.messages:
        assert fake.token not in message["text"]


def test_token_masked_even_if_http_loggers_are_loud(
    book: Book,
    fake: FakeBotAPI,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """With httpx/PTB loggers at DEBUG (URLs carry the token), every record is masked."""
    import sheetq.logs

    monkeypatch.setattr(sheetq.logs, "_QUIET", ())
    for name in ("httpx", "httpcore", "telegram"):
        caplog.set_level(logging.DEBUG, logger=name)
    caplog.set_level(logging.DEBUG)
    configure(tmp_path)
    enqueue(1)
    assert run_cli(["-vv", "process"]).code == 0
    messages = [r.getMessage() for r in caplog.records]
    assert any("sendMessage" in m for m in messages)  # the httpx request line was logged
    assert all(fake.token not in m for m in messages)


# --- 9. requeued rows alert again -----------------------------------------------------------


@pytest.mark.parametrize("how", ["command", "person"])
def test_requeued_row_failing_again_alerts_again(
    book: Book, fake: FakeBotAPI, tmp_path: Path, how: str
) -> None:
    """A failed row requeued (command or typed status) that fails again is alerted again."""
    configure(tmp_path)
    (task_id,) = enqueue(1)
    process()
    assert_marked(book, [task_id])
    if how == "command":
        assert run_cli(["requeue", "--task", task_id]).code == 0
    else:
        book.set_cell("Queue", int(book.row_of(task_id)["_row"]), "status", "pending")
    doc = process()
    assert doc["failed"] == 1 and doc["alerts_sent"] == 1
    assert len(fake.messages) == 2 and task_id in fake.messages[1]["plain_text"]
    assert_marked(book, [task_id], times=2)


# --- 10. telegram is imported only to send ---------------------------------------------------


def _imports_telegram(*commands: list[str]) -> list[tuple[int, bool]]:
    """Run CLI commands in order in one fresh interpreter: (exit code, telegram loaded) each."""
    code = (
        "import sys\nfrom tests.conftest import run_cli\n"
        f"for args in {list(commands)!r}:\n"
        "    r = run_cli(args)\n"
        "    print('RESULT', r.code, 'telegram' in sys.modules)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=Path.cwd(),
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    results = [line.split()[1:] for line in done.stdout.splitlines() if line.startswith("RESULT")]
    assert len(results) == len(commands), done.stderr
    return [(int(c), loaded == "True") for c, loaded in results]


@pytest.mark.slow
def test_telegram_imported_only_to_send(book: Book, fake: FakeBotAPI, tmp_path: Path) -> None:
    """--help, enqueue, status and a process run with nothing owed never import telegram."""
    configure(tmp_path)
    enqueue(1)
    assert run_cli(["process"]).code == 0 and len(fake.messages) == 1  # alerted: none owed
    assert (
        _imports_telegram(["--help"], ["enqueue", "x", '{"n": 1}'], ["status"], ["alert"])
        == [(0, False)] * 4
    )
    write_config("[types.x]\ncommand = " + handler_script(tmp_path, "ok", "print('ok')") + "\n")
    assert _imports_telegram(["process"]) == [(0, False)]  # one done, nothing owed
    configure(tmp_path)
    enqueue(1, start=5)
    assert _imports_telegram(["process"]) == [(0, True)]  # a failure to report: now it is
    assert len(fake.messages) == 2


def test_alerts_package_import_is_light() -> None:
    """Importing sheetq.alerts (and its message builder) does not import telegram."""
    code = (
        "import sys, sheetq.alerts, sheetq.alerts.message, sheetq.alerts.telegram, "
        "sheetq.cli.alert\nprint('telegram' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == "False", done.stderr


# --- 11. no token ---------------------------------------------------------------------------


def test_without_token_alerts_are_off(book: Book, tmp_path: Path) -> None:
    """No token: process works, says once on stderr that alerts are off; -q says nothing."""
    configure(tmp_path)
    ids = enqueue(2)
    r = run_cli(["process"])
    assert r.code == 0
    assert r.stderr.count("alerts are off") == 1 and "TELEGRAM_BOT_TOKEN" in r.stderr
    assert_owed(book, ids)
    enqueue(1, start=10)
    r = run_cli(["process", "-q"])
    assert r.code == 0 and r.stderr == "" and r.stdout == ""


# --- sheetq alert ---------------------------------------------------------------------------


def test_alert_command_sends_owed(
    book: Book, fake: FakeBotAPI, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`sheetq alert` sends what runs without a token left owed, in 4 Google requests (open,
    scan, the marks, their verifying read)."""
    configure(tmp_path)
    with monkeypatch.context() as m:
        m.delenv("TELEGRAM_BOT_TOKEN")
        ids = enqueue(3)
        process()
    assert_owed(book, ids)
    r = run_cli(["alert", "--json"])
    assert r.code == 0, r.stderr
    doc = r.json()
    assert doc["owed"] == 3 and doc["sent"] is True and doc["alerted"] == 3
    google = type(book).__name__ == "GoogleBook"
    # local: no verifying read; PostgreSQL: the alert claim, then the marks
    assert doc["requests"] == (4 if google else 2 if on_postgres(book) else 3)
    assert len(fake.messages) == 1 and fake.calls("getme") == []
    assert_marked(book, ids)
    r = run_cli(["alert"])
    assert r.code == 0 and "no alerts owed" in r.stdout and len(fake.messages) == 1


def test_alert_command_exit_codes(
    book: Book, fake: FakeBotAPI, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`sheetq alert`: exit 1 when Telegram is down (still owed), 2 without configuration."""
    configure(tmp_path)
    with monkeypatch.context() as m:
        m.delenv("TELEGRAM_CHAT_ID")
        ids = enqueue(1)
        process()
        r = run_cli(["alert"])
        assert r.code == 2 and "TELEGRAM_CHAT_ID" in r.stderr
        r = run_cli(["alert", "--test"])
        assert r.code == 2
    fake.down()
    r = run_cli(["alert"])
    assert r.code == 1 and "NOT sent" in r.stdout and "stay owed" in r.stderr
    assert_owed(book, ids)


def test_alert_command_defers_to_a_running_process(
    book: Book, fake: FakeBotAPI, tmp_path: Path
) -> None:
    """While a process run holds the queue on this host, `sheetq alert` sends nothing."""
    from filelock import FileLock

    sheet_only(book, "no host lock: one sender at a time is the alert claim (tests/postgres)")
    from sheetq.config import load_settings
    from sheetq.sheet.runner import lock_path

    configure(tmp_path)
    with monkeypatch_env(TELEGRAM_BOT_TOKEN=None):
        ids = enqueue(1)
        process()
    path = lock_path(load_settings())
    path.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(path)):
        r = run_cli(["alert"])
    assert r.code == 0 and "holds this queue" in r.stdout and fake.messages == []
    assert_owed(book, ids)


def test_alert_test_message(fake: FakeBotAPI) -> None:
    """`sheetq alert --test` sends one short message without any spreadsheet configured."""
    r = run_cli(["alert", "--test"])
    assert r.code == 0, r.stderr
    assert "test alert sent" in r.stdout
    assert len(fake.messages) == 1 and "sheetq test alert" in fake.messages[0]["plain_text"]


# --- templates ------------------------------------------------------------------------------


def test_repository_template_matches_packaged_one() -> None:
    """templates/alert.html (for people to copy) is the packaged default, byte for byte."""
    packaged = ROOT / "sheetq" / "templates" / "alert.html"
    assert (ROOT / "templates" / "alert.html").read_bytes() == packaged.read_bytes()


def test_custom_template_is_used(book: Book, fake: FakeBotAPI, tmp_path: Path) -> None:
    """[telegram] template points at a copy people edit; its text is what is sent."""
    custom = tmp_path / "work" / "mine.html"
    custom.write_text(
        "[header]\n<b>Упало $count</b>\n[row]\n- $task_id ($error_class)\n[more]\nещё $more\n",
        encoding="utf-8",
    )
    configure(tmp_path, extra='\n[telegram]\ntemplate = "mine.html"\n')
    (task_id,) = enqueue(1)
    process()
    assert fake.messages[0]["plain_text"] == f"Упало 1\n- {task_id} (permanent)"


def test_broken_template_falls_back_to_default(
    book: Book, fake: FakeBotAPI, tmp_path: Path
) -> None:
    """An invalid template is reported and the default one is used: the alert still goes."""
    (tmp_path / "work" / "bad.html").write_text(
        "[header]\n$nope\n[row]\n$task_id\n", encoding="utf-8"
    )
    configure(tmp_path, extra='\n[telegram]\ntemplate = "bad.html"\n')
    ids = enqueue(1)
    doc = process()
    assert "$nope" in str(doc["_stderr"]) and doc["alerts_sent"] == 1
    assert "1 task failed" in fake.messages[0]["plain_text"]
    assert_marked(book, ids)


def test_missing_topic_falls_back_to_the_chat(
    book: Book, fake: FakeBotAPI, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ "message thread not found": re-sent without the topic, with a note to check it."""
    configure(tmp_path)
    ids = enqueue(1)
    monkeypatch.setenv("TELEGRAM_THREAD_ID", "77")
    fake.fail_next(400, "Bad Request: message thread not found")
    doc = process()
    assert doc["alerts_sent"] == 1 and "message_thread_id" not in fake.messages[0]
    assert "TELEGRAM_THREAD_ID" in str(doc["_stderr"])
    assert_marked(book, ids)


# --- sheetq doctor's Telegram lines -----------------------------------------------------------


def _doctor_lines() -> list[tuple[bool, str, str]]:
    from sheetq.alerts import check_telegram
    from sheetq.config import load_settings

    return check_telegram(load_settings(require_spreadsheet=False))


def test_check_telegram(fake: FakeBotAPI, monkeypatch: pytest.MonkeyPatch) -> None:
    """Doctor lines: ok for a good setup; a clear fix for a wrong token or an unknown chat."""
    lines = _doctor_lines()
    assert [ok for ok, _, _ in lines] == [True, True]
    assert "@sheetq_test_bot" in lines[0][1] and "Ops" in lines[1][1]
    assert fake.calls("sendmessage") == []
    monkeypatch.setenv("TELEGRAM_CHAT_ID", "-100555")
    ((ok, what, fix), (ok2, what2, fix2)) = _doctor_lines()
    assert ok and not ok2 and "chat not found" in what2.lower() and "add the bot" in fix2
    monkeypatch.setenv("TELEGRAM_BOT_TOKEN", WRONG_TOKEN)
    ((ok, what, fix),) = _doctor_lines()
    assert not ok and "TELEGRAM_BOT_TOKEN" in what and WRONG_TOKEN not in what + fix
    monkeypatch.setenv("TELEGRAM_BOT_TOKEN", "not a token")
    assert any("does not look like a bot token" in w for _, w, _ in _doctor_lines())
    monkeypatch.delenv("TELEGRAM_BOT_TOKEN")
    ((ok, what, fix),) = _doctor_lines()
    assert not ok and "TELEGRAM_BOT_TOKEN is not set" in what
