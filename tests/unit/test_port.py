"""The queue port: one protocol, two implementations, picked in one place."""

from __future__ import annotations

import inspect
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest

from sheetq.accept import prepare
from sheetq.backends import open_queue
from sheetq.clock import FixedClock
from sheetq.config import load_settings
from sheetq.errors import StoreUnavailable
from sheetq.port import QueuePort
from sheetq.sheet.engine import SheetQueue

NOW = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)
UNREACHABLE = "postgresql://sheetq@127.0.0.1:1/nowhere"  # port 1: refused at once


def _port_methods() -> list[str]:
    return [
        name
        for name, value in vars(QueuePort).items()
        if not name.startswith("_") and callable(value)
    ]


def test_open_queue_picks_the_sheet_engine_for_a_local_workbook(tmp_path: Path) -> None:
    """local: gives a SheetQueue satisfying QueuePort, and opening it creates nothing yet."""
    path = tmp_path / "q.db"
    queue = open_queue(load_settings(spreadsheet=f"local:{path}", env={}), create=True)
    assert isinstance(queue, SheetQueue)
    assert isinstance(queue, QueuePort)
    assert not path.exists()
    assert queue.positions is True


def test_open_queue_picks_postgres_for_a_database_url_and_connects_lazily() -> None:
    """A postgresql:// URL gives a PgQueue satisfying QueuePort; it connects on first use."""
    from sheetq.postgres.engine import PgQueue

    settings = load_settings(database_url=UNREACHABLE, env={})
    queue = open_queue(settings)
    assert isinstance(queue, PgQueue)
    assert isinstance(queue, QueuePort)
    assert queue.positions is False
    with pytest.raises(StoreUnavailable):
        queue.show("t_x")


@pytest.mark.parametrize(
    "module, name", [("sheetq.sheet.engine", "SheetQueue"), ("sheetq.postgres.engine", "PgQueue")]
)
def test_both_queues_have_every_port_method_with_its_parameters(module: str, name: str) -> None:
    """Each implementation defines every QueuePort method with the protocol's parameters."""
    import importlib

    cls = getattr(importlib.import_module(module), name)
    methods = _port_methods()
    assert {"enqueue", "run", "requeue", "skip", "archive", "status", "stats"} <= set(methods)
    for method in methods:
        want, got = getattr(QueuePort, method), getattr(cls, method)
        assert list(inspect.signature(got).parameters) == list(
            inspect.signature(want).parameters
        ), method


def test_cli_start_up_imports_no_backend_library() -> None:
    """Importing the CLI (and the port) loads neither psycopg nor gspread."""
    code = (
        "import sys, sheetq.cli.app, sheetq.port, sheetq.sheet.engine; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('psycopg', 'gspread')))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def test_sheet_queue_enqueues_once_and_reports_through_the_port(tmp_path: Path) -> None:
    """Through SheetQueue on a local workbook: init, enqueue twice (enqueued, duplicate),
    status counts one pending, show finds it."""
    settings = load_settings(spreadsheet=f"local:{tmp_path / 'q.db'}", env={})
    queue = open_queue(settings, create=True)
    clock = FixedClock(NOW)
    lines: list[str] = []
    queue.init(fmt=False, dashboard=False, clock=clock, say=lines.append)
    assert lines[-1] == "q: Queue, QueueLog, QueueArchive and QueueLogArchive are ready"
    results = []
    for _ in range(2):
        tasks = prepare("lead", [(None, {"lead_id": "L-1"})], settings)
        results += queue.enqueue(tasks, clock=clock, not_before=lambda tz: None)
    assert [r.outcome for r in results] == ["enqueued", "duplicate"]
    report = queue.status(clock=clock)
    assert report.tally.counts.get("pending") == 1 and report.gone == []
    shown = queue.show(results[0].task_id)
    assert [sheet for sheet, _ in shown.found] == [settings.queue_sheet]
    assert queue.positions is True


@pytest.mark.postgres
def test_pg_queue_enqueues_once_and_reports_through_the_port(pg_url: str) -> None:
    """Through PgQueue on a migrated database: enqueue twice (enqueued, duplicate), status
    counts one pending, show finds it, rows have no position."""
    from sheetq.postgres.engine import PgQueue

    settings = load_settings(database_url=pg_url, env={})
    queue = open_queue(settings)
    assert isinstance(queue, PgQueue)
    clock = FixedClock(NOW)
    results = []
    try:
        for _ in range(2):
            tasks = prepare("lead", [(None, {"lead_id": "L-1"})], settings)
            results += queue.enqueue(tasks, clock=clock, not_before=lambda tz: None)
        assert [r.outcome for r in results] == ["enqueued", "duplicate"]
        assert queue.status(clock=clock).tally.counts.get("pending") == 1
        shown = queue.show(results[0].task_id)
        assert [sheet for sheet, _ in shown.found] == [settings.queue_sheet]
    finally:
        queue.close()
