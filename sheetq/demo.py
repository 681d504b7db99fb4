"""``sheetq demo``: a tour on a fresh local workbook, in seconds, with no network.

The demo runs the real library (enqueue, the runner, the alert message) on a
SQLite workbook with a fake clock, so a retry's backoff passes without waiting.
Its three task types use the Python handlers below:

* ``welcome`` — sends a welcome e-mail: succeeds;
* ``invoice`` — the ERP times out on the first attempt, succeeds on the second;
* ``sms`` — the phone number is invalid: fails at once (bad data), and is alerted.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sheetq.clock import FakeClock
from sheetq.config import HandlerSpec, Settings, TypeConfig
from sheetq.errors import FailTask, RetryTask
from sheetq.model import Task
from sheetq.retry import RetryPolicy

if TYPE_CHECKING:
    from sheetq.port import QueuePort

MARKER = ".sheetq-demo"  # a directory holding this may be reused by the next demo
DEMO_CONFIG = """\
# sheetq demo configuration: the handlers live in the sheetq package (sheetq.demo).
[types.welcome]
python = "sheetq.demo:welcome"
owner = "sales"

[types.invoice]
python = "sheetq.demo:invoice"
idempotent = true
owner = "accounting"

[types.sms]
python = "sheetq.demo:sms"
owner = "ops"
"""

SAMPLES: list[tuple[str, dict[str, Any]]] = [
    ("welcome", {"lead_id": "L-1001", "name": "Юлія Шевчук", "email": "yulia@example.com"}),
    ("invoice", {"order_id": "O-77", "amount": "1250.00", "currency": "UAH"}),
    ("sms", {"lead_id": "L-1002", "phone": "+38050123", "text": "Дякуємо за замовлення!"}),
    ("welcome", {"lead_id": "L-1003", "name": "Andrii Melnyk", "email": "andrii@example.com"}),
]
DUPLICATE = SAMPLES[0]
CONFLICT: tuple[str, dict[str, Any]] = (
    "welcome",
    {"lead_id": "L-1001", "name": "Юлія Шевчук", "email": "other@example.com"},
)


def welcome(task: Task) -> str:
    """Demo handler: always succeeds, returns a fake CRM id."""
    return f"CRM-{4000 + int(str(task.payload['lead_id'])[-2:])}"


def invoice(task: Task) -> str:
    """Demo handler: the ERP times out on the first attempt."""
    if task.attempt == 1:
        raise RetryTask("ERP did not answer within 30s (HTTP 504)")
    return "INV-2026-0077"


def sms(task: Task) -> str:
    """Demo handler: the phone number is too short — bad data, fails at once."""
    raise FailTask(f"phone number {task.payload['phone']} is not a valid Ukrainian number")


def demo_settings(path: Path, lock_dir: Path) -> Settings:
    """Settings of the demo: three types with the handlers above, short backoff."""
    policy = RetryPolicy(backoff=(120.0, 240.0))

    def kind(name: str, owner: str, idempotent: bool = False) -> TypeConfig:
        return TypeConfig(
            name=name,
            handler=HandlerSpec("python", target=f"sheetq.demo:{name}"),
            policy=policy,
            idempotent=idempotent,
            owner=owner,
            on_unknown="retry" if idempotent else "fail",
        )

    return Settings(
        spreadsheet=f"local:{path}",
        lock_dir=lock_dir,
        types={
            "welcome": kind("welcome", "sales"),
            "invoice": kind("invoice", "accounting", True),
            "sms": kind("sms", "ops"),
        },
    )


def run_demo(
    directory: Path,
    say: Callable[[str], None],
    show_table: Callable[[str, list[str], list[list[object]]], None],
    *,
    keep: bool = True,
) -> int:
    """Run the tour in ``directory``; returns 0. ``say`` prints a line, ``show_table`` a table.
    ``keep`` false: the directory is removed afterwards, so the closing hints say how to keep
    one instead of where to look."""
    from sheetq.accept import prepare
    from sheetq.backends import open_queue
    from sheetq.summary import RunOptions, summary_line

    directory.mkdir(parents=True, exist_ok=True)
    (directory / MARKER).write_text("made by `sheetq demo`; safe to delete\n", encoding="utf-8")
    path = directory / "demo.db"
    if path.exists():
        path.unlink()
    (directory / "sheetq.toml").write_text(DEMO_CONFIG, encoding="utf-8")
    settings = demo_settings(path, directory / "locks")
    clock = FakeClock(datetime(2026, 1, 5, 9, 0, tzinfo=UTC))
    queue = open_queue(settings, create=True)
    try:
        queue.init(fmt=False, dashboard=False, clock=clock, say=lambda _line: None)
        say(f"1. A fresh local workbook: {path}")
        say("   (worksheets Queue, QueueLog, QueueArchive, QueueLogArchive — as on Google Sheets)")
        say("")
        say("2. Enqueue four tasks, then a repeated webhook and a conflicting one:")
        for task_type, payload in [*SAMPLES, DUPLICATE, CONFLICT]:
            tasks = prepare(task_type, [(None, payload)], settings)
            (result,) = queue.enqueue(tasks, clock=clock, not_before=lambda _zone: None)
            what = {
                "enqueued": "enqueued",
                "duplicate": "duplicate → nothing added",
                "conflict": "CONFLICT (exit 3) → nothing added",
            }[result.outcome]
            say(f"   $ sheetq enqueue {task_type} '{_short(payload)}'")
            say(f"     {what}: {result.task_id}  key {result.key}")
        say("")
        rng = random.Random(7)
        say("3. `sheetq process` at 09:00 (cron):")
        options = RunOptions(batch_size=10)
        summary = queue.run(options, clock=clock, rng=rng, notifier=None, on_progress=None)
        say("   " + summary_line(summary))
        clock.advance(300)
        say("4. `sheetq process` five minutes later: the invoice's backoff has passed:")
        summary = queue.run(options, clock=clock, rng=rng, notifier=None, on_progress=None)
        say("   " + summary_line(summary))
        say("")
        rows = queue.list_rows(statuses=set(), types=(), limit=0)
        pick = ["task_id", "type", "status", "retry_count", "error_class", "result", "last_error"]
        show_table(
            "5. The Queue worksheet", pick, [[_cell(r.values.get(c)) for c in pick] for r in rows]
        )
        logged = sum(len(queue.show(r.text("task_id")).history) for r in rows)
        say(f"   QueueLog holds {logged} audit rows (one per change).")
        say("")
        say("6. The Telegram alert that `process` sends for the failed row")
        say("   (set TELEGRAM_BOT_TOKEN and TELEGRAM_CHAT_ID to receive it):")
        for line in _alert_text(queue, settings, clock).splitlines():
            say("   │ " + line)
        say("")
        if keep:
            say("Next: look around with")
            say(f"   cd {directory} && export SHEETQ_SPREADSHEET=local:demo.db")
            say("   sheetq status; sheetq list --status failed; sheetq show <task_id>")
            say("   sheetq requeue --type sms   # the dead-letter redrive")
        else:
            say("Next: keep a demo workbook to look around in, with")
            say("   sheetq demo --dir ./sheetq-demo")
    finally:
        queue.close()
    return 0


def _alert_text(queue: QueuePort, settings: Settings, clock: FakeClock) -> str:
    """The message ``process`` would send for the owed alerts, built and not sent (nothing
    is marked: the alerts stay owed in the demo workbook)."""
    from sheetq.alerts.message import build_message
    from sheetq.port import AlertItem, AlertReport, Delivery

    text: list[str] = []

    def show(items: list[AlertItem], title: str) -> tuple[AlertReport, Delivery]:
        text.append(build_message(items, queue=settings.queue_sheet, spreadsheet=title).plain)
        return AlertReport(), Delivery(sent=False, problem="demo")

    queue.send_alerts(show, clock=clock)
    return "".join(text)


def _short(payload: dict[str, Any]) -> str:
    import json

    text = json.dumps(payload, ensure_ascii=False)
    return text if len(text) <= 60 else text[:59] + "…"


def _cell(value: object) -> str:
    text = "" if value is None else str(value)
    return text if len(text) <= 48 else text[:47] + "…"


__all__ = ["demo_settings", "invoice", "replace", "run_demo", "sms", "welcome"]
