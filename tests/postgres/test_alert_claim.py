"""The alert digest on PostgreSQL holds no transaction while Telegram answers (docs/design.md
§9, §11 "No transaction stays open across a call outside the database"): a committed claim
("sending until T"), the send, the mark in a new transaction. Through the CLI on a real
server with the fake Bot API: a server that cuts idle transactions after 2 s, a Telegram
that answers after 4 s or says "retry after 3", and `sheetq alert` racing a worker — one
message per failure every time."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pytest

from tests.conftest import handler_script, run_cli, write_config
from tests.fakes.telegram_fake import FakeBotAPI, bot_for_sheetq

pytestmark = pytest.mark.postgres

TASK_ID = re.compile(r"t_[0-9A-Z]{26}")


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeBotAPI]:
    """The fake Bot API, with a read timeout long enough for its slow answers."""
    with bot_for_sheetq(monkeypatch, timeout="10") as server:
        yield server
    assert server.server_errors == []


@pytest.fixture
def failing(tmp_path: Path) -> None:
    """Type ``x`` fails permanently (exit 65)."""
    fail = handler_script(tmp_path, "fail", "import sys\nsys.stderr.write('bad')\nsys.exit(65)\n")
    write_config(f"[types.x]\ncommand = {fail}\n")


def _cut_idle_transactions(url: str) -> None:
    """The server ends any session idle in a transaction for 2 s (new sessions)."""
    with psycopg.connect(url, autocommit=True) as conn:
        name = conn.execute("SELECT current_database()").fetchone()[0]  # type: ignore[index]
        conn.execute(f"ALTER DATABASE \"{name}\" SET idle_in_transaction_session_timeout = '2s'")


def _enqueue(n: int, start: int = 0) -> list[str]:
    ids = []
    for i in range(start, start + n):
        r = run_cli(["enqueue", "x", json.dumps({"n": i}), "--json"])
        assert r.code == 0, r.stderr
        ids.append(r.json()["task_id"])
    return ids


def _fail_without_alerts(monkeypatch: pytest.MonkeyPatch, n: int) -> list[str]:
    """``n`` failed tasks whose alerts are owed (processed with Telegram off)."""
    ids = _enqueue(n)
    with monkeypatch.context() as m:
        m.delenv("TELEGRAM_BOT_TOKEN")
        r = run_cli(["process", "--json"])
    assert r.code == 0 and r.json()["failed"] == n, r.stderr
    return ids


def _announced(fake: FakeBotAPI) -> dict[str, int]:
    """Task id → how many delivered messages named it."""
    out: dict[str, int] = {}
    for message in fake.messages:
        for task_id in set(TASK_ID.findall(str(message.get("text", "")))):
            out[task_id] = out.get(task_id, 0) + 1
    return out


def _alerted_rows(url: str) -> dict[str, int]:
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT task_id, count(*) FROM sheetq_log WHERE event = 'alerted' GROUP BY task_id"
        ).fetchall()
    return {str(t): int(n) for t, n in rows}


@pytest.mark.slow
@pytest.mark.parametrize("command", ["alert", "process"])
def test_slow_telegram_and_a_server_that_cuts_idle_transactions_send_once(
    pg_url: str,
    fake: FakeBotAPI,
    failing: None,
    monkeypatch: pytest.MonkeyPatch,
    command: str,
) -> None:
    """idle_in_transaction_session_timeout = 2s and Telegram answers after 4 s: the message
    goes out once, the tasks are marked, and the next run has nothing to send."""
    _cut_idle_transactions(pg_url)
    ids = _fail_without_alerts(monkeypatch, 2) if command == "alert" else _enqueue(2)
    fake.slow_next(4)
    r = run_cli([command, "--json"])
    assert r.code == 0, r.stdout + r.stderr
    assert (r.json()["alerted"] if command == "alert" else r.json()["alerts_sent"]) == 2
    again = run_cli(["alert", "--json"])
    assert again.code == 0 and again.json()["owed"] == 0, again.stdout + again.stderr
    assert len(fake.messages) == 1
    assert _announced(fake) == {i: 1 for i in ids}
    assert _alerted_rows(pg_url) == {i: 1 for i in ids}


@pytest.mark.slow
def test_retry_after_three_seconds_sends_once(
    pg_url: str, fake: FakeBotAPI, failing: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A 429 with retry_after 3 is waited (no transaction open meanwhile): one message,
    marked, even where the server cuts transactions idle for 2 s."""
    _cut_idle_transactions(pg_url)
    ids = _fail_without_alerts(monkeypatch, 3)
    fake.retry_after_next(3)
    started = time.monotonic()
    r = run_cli(["alert", "--json"])
    assert r.code == 0, r.stdout + r.stderr
    assert time.monotonic() - started >= 3.0
    assert r.json()["alerted"] == 3
    assert run_cli(["alert", "--json"]).json()["owed"] == 0
    assert len(fake.messages) == 1 and _announced(fake) == {i: 1 for i in ids}


def test_a_claim_whose_mark_was_lost_is_sent_again_only_after_its_lease(
    pg_url: str, fake: FakeBotAPI, failing: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A sender's claim holds ("sending until T"): while it holds, `sheetq alert` sends
    nothing and says who sends; once T has passed (the sender never marked), the alerts go
    out again, once."""
    ids = _fail_without_alerts(monkeypatch, 2)
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO sheetq_alert_claims (queue, owner, claimed_at, until)"
            " VALUES ('Queue', 'worker_gone', clock_timestamp(),"
            " clock_timestamp() + interval '1 hour')"
        )
    held = run_cli(["alert", "--json"])
    assert held.code == 0, held.stderr
    assert held.json()["owed"] is None and held.json()["locked"] is True
    assert "worker_gone" in run_cli(["alert"]).stdout
    assert fake.messages == []
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("UPDATE sheetq_alert_claims SET until = clock_timestamp()")
    r = run_cli(["alert", "--json"])
    assert r.code == 0 and r.json()["alerted"] == 2, r.stdout + r.stderr
    assert _announced(fake) == {i: 1 for i in ids}
    with psycopg.connect(pg_url) as conn:  # the claim is let go after the mark
        assert conn.execute("SELECT count(*) FROM sheetq_alert_claims").fetchone() == (0,)


@pytest.mark.slow
def test_sheetq_alert_racing_a_worker_announces_each_failure_once(
    pg_url: str,
    fake: FakeBotAPI,
    failing: None,
    sheetq_proc: Callable[..., subprocess.Popen[str]],
) -> None:
    """A worker fails tasks and sends its digests while `sheetq alert` runs again and again
    beside it (Telegram slow, so the sends overlap): every failure is in exactly one
    message and has one `alerted` log row."""
    for _ in range(6):
        fake.slow_next(0.7)
    worker = sheetq_proc("worker", "--concurrency", "2", log="worker.log")
    ids: list[str] = []
    alerts: list[subprocess.Popen[str]] = []
    for round_ in range(4):
        ids += _enqueue(3, start=len(ids))
        alerts += [sheetq_proc("alert", "--json") for _ in range(2)]
        time.sleep(0.4 if round_ < 3 else 0)
    for proc in alerts:
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, out + err
    deadline = time.monotonic() + 30
    while _failed(pg_url) < len(ids):
        assert time.monotonic() < deadline, (worker.poll(), _statuses(pg_url))
        time.sleep(0.1)
    worker.send_signal(signal.SIGTERM)
    worker.communicate(timeout=60)
    r = run_cli(["alert", "--json"])  # whatever is still owed
    assert r.code == 0, r.stdout + r.stderr
    assert _announced(fake) == {i: 1 for i in ids}
    assert _alerted_rows(pg_url) == {i: 1 for i in ids}


def _statuses(url: str) -> list[tuple[str, int]]:
    with psycopg.connect(url) as conn:
        return conn.execute("SELECT status, count(*) FROM sheetq_tasks GROUP BY status").fetchall()  # type: ignore[return-value]


def _failed(url: str) -> int:
    with psycopg.connect(url) as conn:
        row = conn.execute("SELECT count(*) FROM sheetq_tasks WHERE status = 'failed'").fetchone()
    return int(row[0]) if row else 0


def test_a_send_whose_mark_failed_is_not_sent_again_while_its_claim_holds(
    pg_url: str, fake: FakeBotAPI, failing: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The message goes out but the server refuses the mark (its `alerted` log rows):
    exit 1 saying so; a second `sheetq alert` at once sends nothing (the claim holds,
    "sending until T"); after T the alerts go out again, and this time are marked."""
    ids = _fail_without_alerts(monkeypatch, 2)
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(
            "CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN"
            " IF NEW.event = 'alerted' THEN RAISE EXCEPTION 'simulated crash'; END IF;"
            " RETURN NEW; END $$"
        )
        conn.execute(
            "CREATE TRIGGER refuse BEFORE INSERT ON sheetq_log FOR EACH ROW"
            " EXECUTE FUNCTION refuse()"
        )
    first = run_cli(["alert", "--json"])
    assert first.code == 1, first.stdout + first.stderr
    assert first.json()["sent"] is True and first.json()["alerted"] == 0
    assert "alerted_at not written" in first.stderr and "simulated crash" in first.stderr
    assert len(fake.messages) == 1
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("DROP TRIGGER refuse ON sheetq_log")
    held = run_cli(["alert", "--json"])
    assert held.code == 0 and held.json()["locked"] is True, held.stdout + held.stderr
    assert len(fake.messages) == 1
    with psycopg.connect(pg_url, autocommit=True) as conn:  # T has come
        conn.execute("UPDATE sheetq_alert_claims SET until = clock_timestamp()")
    again = run_cli(["alert", "--json"])
    assert again.code == 0 and again.json()["alerted"] == 2, again.stdout + again.stderr
    assert len(fake.messages) == 2 and _announced(fake) == {i: 2 for i in ids}
    assert _alerted_rows(pg_url) == {i: 1 for i in ids}
