"""A connector's Telegram alerts through `sheetq process` (docs/design.md §13): one message
when it opens, one when it has been open for `escalate_after`, one when it closes; each
owed until Telegram took it, so a run after an outage sends it once. On every backend."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from tests.cli_helpers import enqueue_task, set_now
from tests.conftest import Book, handler_script, run_cli, write_config
from tests.fakes.telegram_fake import FakeBotAPI, bot_for_sheetq
from tests.sheet_only import on_postgres, sheet_only

ON_POSTGRES = True  # the behavioural suite: also runs on PostgreSQL

NOW = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
EXITS = "import os, sys\nsys.stdin.read()\nsys.exit(int(os.environ.get('EXIT', '0')))\n"


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeBotAPI]:
    with bot_for_sheetq(monkeypatch, timeout="0.5") as server:
        yield server


def _setup(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """crm opens on one transient failure, tries a probe after 1h, escalates after 15m
    (the default); three lead tasks wait for it."""
    handler = handler_script(tmp_path, "h", EXITS)
    write_config(
        '[connectors.crm]\nbreaker_threshold = 1\nbreaker_cooldown = "1h"\n'
        f'[types.lead]\ncommand = {handler}\nconnector = "crm"\nbackoff = ["1m"]\njitter = 0\n'
    )
    assert run_cli(["init", "--no-format"]).code == 0
    set_now(monkeypatch, NOW)
    for i in range(3):
        enqueue_task({"n": i}, "lead")


def _run(monkeypatch: pytest.MonkeyPatch, hour: int, minute: int) -> int:
    """`process --until-empty` at HH:MM; the requests it made (a sheet's store)."""
    set_now(monkeypatch, datetime(2026, 1, 5, hour, minute, tzinfo=UTC))
    r = run_cli(["process", "--until-empty", "--json"])
    assert r.code == 0, r.stderr
    return int(r.json().get("requests") or 0)


def _texts(fake: FakeBotAPI) -> list[str]:
    return [str(m["plain_text"]) for m in fake.messages]


def _alerted(book: Book) -> str:
    if on_postgres(book):
        return ""
    (row,) = [r for r in book.records("Connectors") if r["name"] == "crm"]
    return str(row["alerted"])


def test_open_escalated_closed_one_message_each(
    book: Book, fake: FakeBotAPI, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Opened at 9:00 (one message), still open at 9:10 (none), at 9:16 one "still open
    since 9:00" message, at 9:30 none; the probe at 10:01 succeeds: one "closed again"."""
    _setup(tmp_path, monkeypatch)
    monkeypatch.setenv("EXIT", "75")
    _run(monkeypatch, 9, 0)
    assert len(_texts(fake)) == 1 and "connector crm opened" in _texts(fake)[0]
    assert "task(s) wait for it" in _texts(fake)[0]
    quiet = _run(monkeypatch, 9, 10)
    assert len(_texts(fake)) == 1
    escalating = _run(monkeypatch, 9, 16)
    # on a sheet its `alerted` cell is the run's one write (locate + write on Google), as any
    # change of a connector's row in a run that claims nothing
    assert escalating <= quiet + 2
    assert len(_texts(fake)) == 2
    assert "connector crm still open since 2026-01-05T09:00:00Z" in _texts(fake)[1]
    assert _alerted(book) in ("", "escalated")
    _run(monkeypatch, 9, 30)
    assert len(_texts(fake)) == 2
    monkeypatch.setenv("EXIT", "0")
    _run(monkeypatch, 10, 1)
    assert len(_texts(fake)) == 3 and "connector crm closed again" in _texts(fake)[2]
    _run(monkeypatch, 10, 5)
    assert len(_texts(fake)) == 3


def test_alerts_telegram_missed_are_sent_by_the_next_run(
    book: Book, fake: FakeBotAPI, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Telegram down when crm opens: no message, owed; the next run sends it once. Down
    again when it closes: the run after sends "closed again" once."""
    _setup(tmp_path, monkeypatch)
    monkeypatch.setenv("EXIT", "75")
    fake.down()
    _run(monkeypatch, 9, 0)
    fake.up()
    assert _texts(fake) == [] and _alerted(book) == ""
    _run(monkeypatch, 9, 5)
    assert len(_texts(fake)) == 1 and "connector crm opened" in _texts(fake)[0]
    assert _alerted(book) in ("", "opened")
    _run(monkeypatch, 9, 6)
    assert len(_texts(fake)) == 1
    monkeypatch.setenv("EXIT", "0")
    fake.down()
    _run(monkeypatch, 10, 1)
    fake.up()
    assert len(_texts(fake)) == 1
    _run(monkeypatch, 10, 2)
    assert len(_texts(fake)) == 2 and "connector crm closed again" in _texts(fake)[1]
    _run(monkeypatch, 10, 3)
    assert len(_texts(fake)) == 2


def test_a_failed_probe_sends_no_second_opened_and_an_untold_opening_no_closed(
    book: Book, fake: FakeBotAPI, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One outage, one "opened": the probe that fails at 10:01 re-opens the breaker without
    a message (escalation set to a day, so none is due); the probe at 11:02 succeeds: one
    "closed again". An opening Telegram never took ends with the outage: no "closed"."""
    _setup(tmp_path, monkeypatch)
    config = Path("sheetq.toml").read_text(encoding="utf-8")
    write_config(
        config.replace(
            'breaker_cooldown = "1h"\n', 'breaker_cooldown = "1h"\nescalate_after = "1d"\n'
        )
    )
    monkeypatch.setenv("EXIT", "75")
    _run(monkeypatch, 9, 0)
    assert len(_texts(fake)) == 1 and "connector crm opened" in _texts(fake)[0]
    _run(monkeypatch, 10, 1)  # the probe fails: open again, the same outage
    assert len(_texts(fake)) == 1, _texts(fake)
    monkeypatch.setenv("EXIT", "0")
    _run(monkeypatch, 11, 2)
    assert len(_texts(fake)) == 2 and "connector crm closed again" in _texts(fake)[1]
    # a second outage that Telegram never hears of: no "closed again" for it either
    monkeypatch.setenv("EXIT", "75")
    enqueue_task({"n": 9}, "lead")
    fake.down()
    _run(monkeypatch, 11, 3)
    fake.up()
    monkeypatch.setenv("EXIT", "0")
    fake.down()
    _run(monkeypatch, 12, 4)  # its probe succeeds while Telegram is still down
    fake.up()
    _run(monkeypatch, 12, 5)
    assert len(_texts(fake)) == 2, _texts(fake)


def test_sheetq_alert_sends_a_connectors_owed_alert_once(
    book: Book, fake: FakeBotAPI, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Telegram down when crm opens; `sheetq alert` while still down: exit 1, still owed;
    once up, `sheetq alert` sends the opening (one message), and neither a second `alert`
    nor the next run sends it again."""
    _setup(tmp_path, monkeypatch)
    monkeypatch.setenv("EXIT", "75")
    fake.down()
    _run(monkeypatch, 9, 0)
    r = run_cli(["alert"])
    assert r.code == 1 and "connector alert(s) NOT sent" in r.stderr
    fake.up()
    assert _texts(fake) == []
    r = run_cli(["alert"])
    assert r.code == 0, r.stderr
    assert "1 connector alert(s) sent" in r.stderr
    assert len(_texts(fake)) == 1 and "connector crm opened" in _texts(fake)[0]
    assert _alerted(book) in ("", "opened")
    assert run_cli(["alert"]).code == 0
    _run(monkeypatch, 9, 5)
    assert len(_texts(fake)) == 1


def test_a_connectors_worksheet_without_the_alert_columns_sends_nothing_until_init(
    book: Book, fake: FakeBotAPI, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Connectors worksheet made before `opened_at` and `alerted` (their headers cleared):
    what was told could not be recorded, so no run sends (every run would send it again);
    the note says to run `sheetq init`. After `init`, one message, then none."""
    sheet_only(book, "the Connectors worksheet's columns; PostgreSQL keeps a table")
    _setup(tmp_path, monkeypatch)
    book.set_cell("Connectors", 1, "alerted", "")
    book.set_cell("Connectors", 1, "opened_at", "")
    monkeypatch.setenv("EXIT", "75")
    set_now(monkeypatch, NOW)
    r = run_cli(["process", "--json"])
    assert r.code == 0, r.stderr
    assert any("lacks column(s) opened_at, alerted" in n for n in r.json()["notes"])
    _run(monkeypatch, 9, 1)
    assert _texts(fake) == []
    assert run_cli(["init", "--no-format"]).code == 0
    _run(monkeypatch, 9, 2)
    _run(monkeypatch, 9, 3)
    assert len(_texts(fake)) == 1 and "connector crm opened" in _texts(fake)[0]
