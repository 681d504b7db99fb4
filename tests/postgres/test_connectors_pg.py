"""Connectors on PostgreSQL (docs/design.md §13), through the CLI with several real
`sheetq worker` processes on one server: a connector's concurrency and rate limit hold
across every worker (measured from the handlers' own start and end times), its breaker is
shared (opened by failures anywhere, one probe at a time across all workers), and a person
pauses and resumes it in one command, each change a QueueLog row."""

from __future__ import annotations

import itertools
import json
import signal
import subprocess
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.conftest import run_cli, write_config

pytestmark = [pytest.mark.postgres]

# Notes "task_id type start end pid" when a task ends (one O_APPEND write per line), after
# sleeping the payload's "sleep"; raises a transient failure while the FAIL file exists.
HANDLER = """
import os, time
import sheetq
def run(task):
    start = time.time()
    time.sleep(float(task.payload.get("sleep", 0)))
    failing = os.path.exists(os.environ["FAIL"])
    end = time.time()
    fd = os.open(os.environ["STARTS"], os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        os.write(fd, f"{task.task_id} {task.type} {start:.6f} {end:.6f} {os.getpid()}\\n".encode())
    finally:
        os.close(fd)
    if failing:
        raise sheetq.RetryTask("CRM answered 503")
    return "ok"
"""


@pytest.fixture
def runs(
    handler_module: Callable[[str, str], Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Path:
    monkeypatch.setenv("FAIL", str(tmp_path / "fail"))
    return handler_module("cn", HANDLER)


def _runs(path: Path) -> list[tuple[str, str, float, float, int]]:
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        task, kind, start, end, pid = line.split()
        out.append((task, kind, float(start), float(end), int(pid)))
    return out


def _wait_for(check: Callable[[], bool], seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(0.05)


def _enqueue(n: int, task_type: str, sleep: float) -> list[str]:
    text = "\n".join(json.dumps({"n": i, "sleep": sleep}) for i in range(n))
    r = run_cli(["enqueue", task_type, "--jsonl", "-", "--json"], input=text)
    assert r.code == 0, r.stderr
    return [x["task_id"] for x in r.json()["results"]]


def _statuses(url: str, task_type: str) -> Counter[str]:
    with psycopg.connect(url) as conn:
        return Counter(
            dict(
                conn.execute(
                    "SELECT status, count(*) FROM sheetq_tasks WHERE type = %s GROUP BY 1",
                    (task_type,),
                ).fetchall()
            )
        )


def _connector_log(url: str, name: str) -> list[tuple[str, str]]:
    with psycopg.connect(url) as conn:
        return [
            (e, m)
            for e, m in conn.execute(
                "SELECT event, message FROM sheetq_log WHERE task_id = '' AND type = %s"
                " ORDER BY id",
                (name,),
            ).fetchall()
        ]


def _max_overlap(spans: list[tuple[float, float]]) -> int:
    edges = sorted([(s, 1) for s, _ in spans] + [(e, -1) for _, e in spans])
    most = now = 0
    for _, step in edges:  # an end before a start at the same instant
        now += step
        most = max(most, now)
    return most


def _most_in_window(starts: list[float], window: float) -> int:
    starts = sorted(starts)
    return max(
        (sum(1 for s in starts if first <= s < first + window) for first in starts), default=0
    )


@pytest.mark.slow
def test_four_workers_never_exceed_the_connectors_concurrency_or_rate(
    pg_url: str, runs: Path, sheetq_proc: Callable[..., subprocess.Popen[str]]
) -> None:
    """[connectors.crm] concurrency = 2, rate_limit = "5/s", two types calling it, and 4
    workers with 3 handler slots each: from the handlers' own start/end times, never more
    than 2 crm handlers at once and never more than 5 starts in any second (measured over
    0.9 s windows: a start's time is taken a few ms after its claim); a type without a
    connector limit runs alongside at full speed; every task runs once."""
    write_config(
        '[connectors.crm]\nconcurrency = 2\nrate_limit = "5/s"\n'
        '[types.lead]\npython = "cn:run"\nconnector = "crm"\n'
        '[types.deal]\npython = "cn:run"\nconnector = "crm"\n'
        '[types.free]\npython = "cn:run"\n'
    )
    limited = _enqueue(12, "lead", 0.3) + _enqueue(12, "deal", 0.3)
    free = _enqueue(24, "free", 0.3)
    began = time.time()
    workers = [
        sheetq_proc("worker", "--concurrency", "3", "--poll", "0.1s", log=f"err-{i}.txt")
        for i in range(4)
    ]
    _wait_for(lambda: len(_runs(runs)) == 48, seconds=120)
    for proc in workers:
        proc.send_signal(signal.SIGTERM)
    for proc in workers:
        proc.communicate(timeout=60)
        assert proc.returncode == 0
    ran = _runs(runs)
    assert Counter(t for t, *_ in ran) == Counter(limited + free)  # each once
    crm = [(s, e) for _, kind, s, e, _ in ran if kind in ("lead", "deal")]
    assert _max_overlap(crm) <= 2, sorted(crm)
    assert _most_in_window([s for s, _ in crm], 0.9) <= 5, sorted(s for s, _ in crm)
    assert len({pid for _, kind, *_, pid in ran if kind != "free"}) >= 2  # shared, not one's
    # 24 tasks at 5/s take at least 24/5 - 1 s; the free type is not held back behind them
    crm_span = max(e for _, e in crm) - began
    free_done = max(e for _, kind, _, e, _ in ran if kind == "free") - began
    assert crm_span >= 3.8
    assert free_done < crm_span
    assert _max_overlap([(s, e) for _, kind, s, e, _ in ran if kind == "free"]) > 2


@pytest.mark.slow
def test_the_breaker_is_shared_by_every_worker_and_probes_one_task_at_a_time(
    pg_url: str,
    runs: Path,
    tmp_path: Path,
    sheetq_proc: Callable[..., subprocess.Popen[str]],
) -> None:
    """Three workers and a CRM answering 503: after 3 transient failures in a row, wherever
    they happened, the breaker opens for every worker (logged once, `connector list` says
    open until when and why; the other tasks keep their status and attempts); after the
    cooldown exactly one task is let through at a time; when the CRM is back, the probe
    closes it (logged) and the rest run."""
    write_config(
        '[connectors.crm]\nbreaker_threshold = 3\nbreaker_cooldown = "2s"\n'
        '[types.lead]\npython = "cn:run"\nconnector = "crm"\nmax_attempts = 50\n'
        'backoff = ["1s"]\njitter = 0\n'
    )
    (tmp_path / "fail").touch()
    ids = _enqueue(20, "lead", 0.05)
    workers = [
        sheetq_proc("worker", "--concurrency", "2", "--poll", "0.1s", log=f"err-{i}.txt")
        for i in range(3)
    ]
    _wait_for(lambda: any(e == "breaker_opened" for e, _ in _connector_log(pg_url, "crm")))
    opened_at = time.time()
    time.sleep(1.0)  # within the cooldown: nothing more starts
    first = _runs(runs)
    assert 3 <= len(first) <= 3 + 5, first  # the threshold, plus what was already running
    doc = run_cli(["connector", "list", "--json"]).json()
    (crm,) = doc["connectors"]
    assert crm["state"] == "open" and crm["until"] and "3 consecutive" in crm["reason"]
    assert crm["types"] == ["lead"] and crm["waiting"] >= 10
    assert _statuses(pg_url, "lead")["processing"] == 0
    status = run_cli(["status"])
    assert "connector crm: open until" in status.stdout
    # past the cooldown: probes, one at a time across all workers, a cooldown apart
    _wait_for(lambda: len(_runs(runs)) >= len(first) + 2, seconds=30)
    probes = sorted(s for _, _, s, _, _ in _runs(runs)[len(first) :])
    assert probes[0] >= opened_at + 0.5
    assert all(b - a >= 1.5 for a, b in itertools.pairwise(probes)), probes
    with psycopg.connect(pg_url) as conn:
        (untouched,) = conn.execute(
            "SELECT count(*) FROM sheetq_tasks WHERE type = 'lead' AND retry_count = 0"
            " AND status = 'pending'"
        ).fetchone() or (0,)
    assert untouched >= 20 - len(_runs(runs))  # waiting tasks used no attempt
    (tmp_path / "fail").unlink()  # the CRM is back: the next probe closes it
    _wait_for(lambda: _statuses(pg_url, "lead") == Counter(done=20), seconds=60)
    for proc in workers:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=60)
        assert proc.returncode == 0
    events = [e for e, _ in _connector_log(pg_url, "crm")]
    assert events[0] == "breaker_opened" and events[-1] == "breaker_closed"
    assert events.count("breaker_closed") == 1
    assert set(ids) == {t for t, *_ in _runs(runs)}


def test_pause_and_resume_in_one_command_each_logged(
    pg_url: str, runs: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`connector pause crm --for 2h --reason R`: no crm task starts (they keep status and
    attempts; other types run), `status` says paused until when and why; `resume`: they
    run. Each change is one QueueLog row (task_id empty, type crm); an unknown connector is
    refused with exit 2 naming the configured ones."""
    write_config(
        "[connectors.crm]\nconcurrency = 1\n"
        '[types.lead]\npython = "cn:run"\nconnector = "crm"\n'
        '[types.mail]\npython = "cn:run"\n'
    )
    lead = _enqueue(2, "lead", 0)
    mail = _enqueue(1, "mail", 0)
    r = run_cli(["connector", "pause", "crm", "--for", "2h", "--reason", "CRM maintenance"])
    assert r.code == 0, r.stderr
    assert "paused until" in r.stdout and "CRM maintenance" in r.stdout
    doc = run_cli(["process", "--until-empty", "--json"]).json()
    assert doc["done"] == 1 and doc["claimed"] == 1
    assert _statuses(pg_url, "lead") == Counter(pending=2)
    status = run_cli(["status", "--json"]).json()
    (crm,) = status["connectors"]
    assert crm["state"] == "paused" and crm["reason"] == "CRM maintenance" and crm["until"]
    assert crm["waiting"] == 2
    bad = run_cli(["connector", "pause", "crmm"])
    assert bad.code == 2 and "'crmm' is not configured" in bad.stderr and "crm" in bad.stderr
    r = run_cli(["connector", "resume", "crm", "--json"])
    assert r.code == 0 and r.json()["state"] == "closed"
    doc = run_cli(["process", "--until-empty", "--json"]).json()
    assert doc["done"] == 2
    assert [e for e, _ in _connector_log(pg_url, "crm")] == ["paused", "resumed"]
    assert {t for t, *_ in _runs(runs)} == set(lead + mail)
    with psycopg.connect(pg_url) as conn:
        rows = conn.execute("SELECT retry_count FROM sheetq_tasks WHERE type = 'lead'").fetchall()
    assert rows == [(0,), (0,)]


def test_a_pause_ends_on_its_own_and_an_auth_failure_waits_for_a_person(
    pg_url: str, runs: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pause `--for 1h` ends an hour later (logged `resumed`); an auth failure opens the
    breaker until a person resumes it, however long after (the clock is injected)."""
    write_config(
        '[types.lead]\npython = "cn:run"\n[types.auth]\ncommand = ["sh", "-c", "exit 77"]\n'
    )
    monkeypatch.setenv("SHEETQ_NOW", "2026-12-01T09:00:00Z")
    _enqueue(1, "lead", 0)
    assert run_cli(["connector", "pause", "lead", "--for", "1h"]).code == 0
    assert run_cli(["process", "--json"]).json()["done"] == 0
    monkeypatch.setenv("SHEETQ_NOW", "2026-12-01T10:00:01Z")
    assert run_cli(["process", "--json"]).json()["done"] == 1
    assert [e for e, _ in _connector_log(pg_url, "lead")] == ["paused", "resumed"]
    _enqueue(3, "auth", 0)
    doc = run_cli(["process", "--until-empty", "--json"]).json()
    assert doc["failed"] == 1
    monkeypatch.setenv("SHEETQ_NOW", "2026-12-03T09:00:00Z")  # two days later: still open
    assert run_cli(["process", "--until-empty", "--json"]).json()["claimed"] == 0
    (view,) = [
        c
        for c in run_cli(["connector", "list", "--json"]).json()["connectors"]
        if c["name"] == "auth"
    ]
    assert view["state"] == "open" and view["until"] is None and "auth" in view["reason"]
    assert run_cli(["connector", "resume", "auth"]).code == 0
    assert run_cli(["process", "--until-empty", "--json"]).json()["failed"] == 1  # one more


def test_one_alert_when_a_connector_opens_one_when_it_stays_open_one_when_it_closes(
    pg_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Telegram hears once when the connector opens (the last error, how many tasks wait),
    once after escalate_after, once when it closes; never once per task, however many runs
    meet it open."""
    from tests.fakes.telegram_fake import bot_for_sheetq

    write_config(
        '[connectors.api]\nbreaker_threshold = 2\nbreaker_cooldown = "1h"\n'
        'escalate_after = "15m"\n'
        '[types.crm]\nconnector = "api"\n'
        'command = ["sh", "-c", "test -e $FAIL || exit 0; echo CRM answered 503 >&2; exit 75"]\n'
    )
    monkeypatch.setenv("FAIL", str(tmp_path / "fail"))
    (tmp_path / "fail").touch()
    with bot_for_sheetq(monkeypatch, timeout="2") as fake:
        monkeypatch.setenv("SHEETQ_NOW", "2026-12-01T09:00:00Z")
        _enqueue(5, "crm", 0)
        doc = run_cli(["process", "--until-empty", "--json"]).json()
        assert doc["retry"] == 2 and doc["claimed"] == 2
        assert len(fake.messages) == 1
        opened = fake.messages[0]["plain_text"]
        assert "connector api opened" in opened and "CRM answered 503" in opened
        assert "5 task(s) wait" in opened
        for minute in ("05", "10"):
            monkeypatch.setenv("SHEETQ_NOW", f"2026-12-01T09:{minute}:00Z")
            assert run_cli(["process", "--until-empty", "--json"]).json()["claimed"] == 0
        assert len(fake.messages) == 1
        monkeypatch.setenv("SHEETQ_NOW", "2026-12-01T09:16:00Z")
        run_cli(["process", "--json"])
        run_cli(["process", "--json"])
        assert len(fake.messages) == 2
        assert (
            "connector api still open since 2026-12-01T09:00:00Z" in fake.messages[1]["plain_text"]
        )
        (tmp_path / "fail").unlink()  # the CRM is back
        assert run_cli(["connector", "resume", "api"]).code == 0
        assert run_cli(["process", "--until-empty", "--json"]).json()["done"] == 5
        assert len(fake.messages) == 3
        assert "connector api closed again" in fake.messages[2]["plain_text"]


def test_a_worker_runs_a_connectors_tasks_again_once_its_breaker_closes(
    pg_url: str,
    runs: Path,
    tmp_path: Path,
    sheetq_proc: Callable[..., subprocess.Popen[str]],
) -> None:
    """One long-lived worker: the breaker it opened closes after the cooldown's probe, and
    the same worker then runs the rest (the database's breaker decides, not a circuit that
    lasts the worker's life)."""
    write_config(
        '[connectors.crm]\nbreaker_threshold = 2\nbreaker_cooldown = "1s"\n'
        '[types.lead]\npython = "cn:run"\nconnector = "crm"\nbackoff = ["1s"]\njitter = 0\n'
    )
    (tmp_path / "fail").touch()
    _enqueue(6, "lead", 0)
    worker = sheetq_proc("worker", "--poll", "0.1s", log="err.txt")
    _wait_for(lambda: any(e == "breaker_opened" for e, _ in _connector_log(pg_url, "crm")))
    (tmp_path / "fail").unlink()
    _wait_for(lambda: _statuses(pg_url, "lead") == Counter(done=6), seconds=30)
    worker.send_signal(signal.SIGTERM)
    worker.communicate(timeout=60)
    assert worker.returncode == 0
    assert [e for e, _ in _connector_log(pg_url, "crm")] == ["breaker_opened", "breaker_closed"]


@pytest.mark.google
def test_the_mirror_shows_connectors_and_takes_a_managers_paused_and_closed(
    pg_url: str, sheets_emulator: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With a mirror, the Connectors worksheet shows PostgreSQL's connectors (in the pass's
    one read and one write); a manager typing `paused` there pauses the connector in
    PostgreSQL (logged `paused`), typing `closed` resumes it (logged `resumed`)."""
    from tests.conftest import make_google

    book = make_google(sheets_emulator, monkeypatch)
    write_config(
        '[connectors.crm]\nconcurrency = 2\n[types.lead]\ncommand = "true"\nconnector = "crm"\n'
    )
    monkeypatch.setenv("SHEETQ_NOW", "2026-12-01T09:00:00Z")
    assert run_cli(["connector", "pause", "crm", "--reason", "maintenance"]).code == 0
    doc = run_cli(["mirror", "--json"]).json()
    rows = {r["name"]: r for r in book.records("Connectors")}
    assert rows["crm"]["state"] == "paused" and rows["crm"]["reason"] == "paused: maintenance"
    sheets_emulator.reset_counts()
    run_cli(["mirror", "--json"])  # nothing changed: one read
    assert sheets_emulator.count() == 1, [r.op for r in sheets_emulator.requests]
    number = 2 + [r["name"] for r in book.records("Connectors")].index("crm")
    book.set_cell("Connectors", number, "state", "closed")
    doc = run_cli(["mirror", "--json"]).json()
    assert doc is not None
    assert run_cli(["connector", "list", "--json"]).json()["connectors"][0]["state"] == "closed"
    assert [e for e, _ in _connector_log(pg_url, "crm")] == ["paused", "resumed"]
    book.set_cell("Connectors", number, "state", "paused")
    run_cli(["mirror", "--json"])
    (crm,) = [c for c in run_cli(["connector", "list", "--json"]).json()["connectors"]]
    assert crm["state"] == "paused" and crm["until"] is None
    assert [e for e, _ in _connector_log(pg_url, "crm")] == ["paused", "resumed", "paused"]
    rows = {r["name"]: r for r in book.records("Connectors")}
    assert rows["crm"]["reason"] == "paused: typed in the mirror"


@pytest.mark.slow
def test_a_killed_workers_slot_is_free_again_when_its_tasks_lease_ends(
    pg_url: str,
    runs: Path,
    monkeypatch: pytest.MonkeyPatch,
    sheetq_proc: Callable[..., subprocess.Popen[str]],
) -> None:
    """concurrency = 1 and a worker killed (SIGKILL) while its task runs: the slot is held
    while the lease lasts (nothing else of the connector starts), and is free once the
    lease has ended: the next run recovers the lost task and runs the waiting one."""
    write_config(
        "[connectors.crm]\nconcurrency = 1\n"
        '[types.lead]\npython = "cn:run"\nconnector = "crm"\nlease = "1m"\ntimeout = "1m"\n'
    )
    first = _enqueue(1, "lead", 30)
    second = _enqueue(1, "lead", 0)
    worker = sheetq_proc("worker", "--poll", "0.1s", log="err.txt")

    def running() -> bool:
        return _statuses(pg_url, "lead")["processing"] == 1

    _wait_for(running)
    time.sleep(0.5)  # the handler is in its sleep
    worker.kill()
    worker.communicate(timeout=30)
    doc = run_cli(["process", "--json"]).json()  # the lease (2 min) holds the slot
    assert doc["claimed"] == 0 and _statuses(pg_url, "lead")["pending"] == 1
    later = time.time() + 3 * 60
    monkeypatch.setenv("SHEETQ_NOW", time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(later)))
    doc = run_cli(["process", "--until-empty", "--json"]).json()
    assert doc["recovered"] == 1 and doc["done"] == 1, doc
    assert {t for t, *_ in _runs(runs)} == set(second)
    assert _statuses(pg_url, "lead") == Counter(failed=1, done=1)
    assert first[0] != second[0]
