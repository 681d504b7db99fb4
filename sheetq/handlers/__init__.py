"""Running a task: ``command``, ``http`` and ``python`` handlers (docs/design.md §7).

``run_task`` turns whatever happened into an ``Outcome``; it never raises for
a handler's failure. ``run_reconcile`` asks a type's reconcile check whether a
task whose outcome was lost did happen.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sheetq.config import HandlerSpec, TypeConfig, expand
from sheetq.errors import ConfigError
from sheetq.model import ErrorClass, Task
from sheetq.retry import Outcome

if TYPE_CHECKING:
    from sheetq.handlers.python import Watch

# sheetq's own secrets never reach a handler's environment (docs/design.md §7: a handler
# sees no secret it was not given): the bot token and the queue's database URL and
# password. What a handler returns or says is then stored as it wrote it: a password such
# as `postgres` is also a word of its result, never rewritten. A handler that enqueues a
# follow-up task is given the URL in its type's `env` (SHEETQ_DATABASE_URL =
# "${SHEETQ_DATABASE_URL}"); a Google or local queue's location (SHEETQ_SPREADSHEET) is
# no secret and stays.
PRIVATE_ENV = ("TELEGRAM_BOT_TOKEN", "SHEETQ_DATABASE_URL", "PGPASSWORD")


@dataclass(frozen=True)
class ReconcileAnswer:
    """``found`` True/False, or ``None`` when the check cannot tell."""

    found: bool | None
    result: str = ""
    message: str = ""


def task_env(task: Task, extra: Mapping[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in PRIVATE_ENV}
    env.update(extra)
    env.update(
        {
            "SHEETQ_TASK_ID": task.task_id,
            "SHEETQ_TASK_TYPE": task.type,
            "SHEETQ_IDEMPOTENCY_KEY": task.idempotency_key,
            "SHEETQ_ATTEMPT": str(task.attempt),
        }
    )
    return env


def _expanded_env(config: TypeConfig) -> dict[str, str]:
    return {k: expand(v, where=f"[types.{config.name}].env.{k}") for k, v in config.env.items()}


def run_task(
    config: TypeConfig, task: Task, payload_json: str, *, watch: Watch | None = None
) -> Outcome:
    """Run ``task`` with its type's handler and classify the outcome. ``watch``: a Python
    handler runs on this thread, its timeout enforced by the watch's owner
    (``sheetq.handlers.python``)."""
    spec = config.handler
    if spec is None:
        return Outcome.failed(f"no handler for type {task.type!r}", ErrorClass.CONFIG)
    try:
        return _dispatch(spec, config, task, payload_json, watch)
    except ConfigError as exc:
        return Outcome.failed(exc.message, ErrorClass.CONFIG)


def _dispatch(
    spec: HandlerSpec, config: TypeConfig, task: Task, payload_json: str, watch: Watch | None
) -> Outcome:
    timeout = config.policy.timeout
    where = f"[types.{config.name}]"
    if spec.kind == "command":
        from sheetq.handlers.command import run_command

        argv = [expand(a, where=f"{where}.command") for a in spec.command]
        return run_command(
            argv,
            payload_json,
            task_env(task, _expanded_env(config)),
            timeout=timeout,
            cwd=config.cwd,
        )
    if spec.kind == "http":
        from sheetq.handlers.http import post_task

        url = expand(spec.url, where=f"{where}.http.url")
        headers = {k: expand(v, where=f"{where}.http.headers.{k}") for k, v in spec.headers.items()}
        return post_task(url, spec.method, headers, task, payload_json, timeout=timeout)
    from sheetq.handlers.python import call_function

    return call_function(spec.target, task, timeout=timeout, cwd=config.cwd, watch=watch)


def run_reconcile(config: TypeConfig, task: Task, payload_json: str) -> ReconcileAnswer:
    """Ask the type's reconcile check about a lost outcome (docs/design.md §5 step 2)."""
    spec = config.reconcile
    if spec is None:
        return ReconcileAnswer(None, message="no reconcile check configured")
    try:
        if spec.kind == "command":
            from sheetq.handlers.command import reconcile_command

            argv = [expand(a, where=f"[types.{config.name}].reconcile") for a in spec.command]
            return reconcile_command(
                argv,
                payload_json,
                task_env(task, _expanded_env(config)),
                timeout=config.policy.timeout,
                cwd=config.cwd,
            )
        from sheetq.handlers.python import reconcile_function

        return reconcile_function(spec.target, task, timeout=config.policy.timeout, cwd=config.cwd)
    except ConfigError as exc:
        return ReconcileAnswer(None, message=exc.message)


def result_text(value: object) -> str:
    """A handler's return value as the ``result`` cell."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)
    except (TypeError, ValueError):
        return str(value)
