"""Accepting tasks, whatever the store: a payload parsed, canonicalised, size-checked and
keyed (``prepare``), and the idempotency decision for each task of a batch against the keys
the queue holds (``decide_keys``): a new task, a duplicate (same key, same payload) or a
conflict (same key, another payload). Pure; each engine writes the outcome its own way.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sheetq.config import Settings
from sheetq.errors import InputError
from sheetq.idempotency import canonical_json, check_size, derive_key, payload_hash
from sheetq.model import PRIORITY_RULE, Status, new_task_id, parse_priority
from sheetq.order import clean_group, derive_group
from sheetq.times import format_not_before


@dataclass
class NewTask:
    """A parsed, keyed task waiting to be enqueued. ``line`` is 1-based for ``--jsonl``."""

    type: str
    canonical: str
    payload_hash: str
    key: str
    line: int | None = None
    not_before: datetime | None = None
    priority: int = 0  # docs/design.md §14: higher first (the type's unless given)
    group: str = ""  # docs/design.md §14: one task of a group at a time, in enqueue order


@dataclass
class Enqueued:
    outcome: str  # enqueued | duplicate | conflict
    task_id: str
    key: str
    status: str
    line: int | None = None
    existing_hash: str = ""


@dataclass
class KnownKey:
    task_id: str
    payload_hash: str
    status: str
    archived: bool = False


@dataclass
class Decided:
    """One task of a batch, decided: ``outcome`` (``enqueued``, ``duplicate``, ``conflict``);
    ``task_id`` the new task's id, or the one holding the key; ``found`` the holder."""

    task: NewTask
    outcome: str
    task_id: str
    found: KnownKey | None = None

    def enqueued(self) -> Enqueued:
        """The result a caller reports."""
        if self.found is None:
            return Enqueued(
                "enqueued", self.task_id, self.task.key, str(Status.PENDING), self.task.line
            )
        return Enqueued(
            self.outcome,
            self.found.task_id,
            self.task.key,
            self.found.status,
            self.task.line,
            self.found.payload_hash if self.outcome == "conflict" else "",
        )

    def message(self) -> str:
        """The log row's message: a delay for a new task; what was found for the others."""
        task, found = self.task, self.found
        if found is None:
            return f"delayed until {format_not_before(task.not_before)}" if task.not_before else ""
        where = " (archived)" if found.archived else ""
        line = f" (line {task.line})" if task.line else ""
        if self.outcome == "duplicate":
            return f"same key and payload enqueued again{line}{where}; nothing added"
        return (
            f"same key {task.key!r}, different payload{line}{where}: "
            f"{task.payload_hash[:19]}… vs {found.payload_hash[:19]}…; nothing added"
        )


def decide_keys(tasks: Iterable[NewTask], known: Mapping[str, KnownKey]) -> list[Decided]:
    """Each task against the keys the queue holds (``known``: key → its holder, live tasks
    before archived ones) and the earlier tasks of the same batch (§4)."""
    seen = dict(known)
    out: list[Decided] = []
    for task in tasks:
        found = seen.get(task.key)
        if found is None:
            task_id = new_task_id()
            seen[task.key] = KnownKey(task_id, task.payload_hash, str(Status.PENDING))
            out.append(Decided(task, "enqueued", task_id))
        elif found.payload_hash == task.payload_hash:
            out.append(Decided(task, "duplicate", found.task_id, found))
        else:
            out.append(Decided(task, "conflict", found.task_id, found))
    return out


def prepare(
    task_type: str,
    payloads: Iterable[tuple[int | None, dict[str, Any]]],
    settings: Settings,
    *,
    key: str | None = None,
    source: str = "payload",
    priority: int | str | None = None,
    group: str | None = None,
) -> list[NewTask]:
    """Canonicalise, size-check and key each payload. ``priority``: the tasks' priority
    (docs/design.md §14; ``None``: the type's ``priority``), an integer or its text;
    ``group``: their group (``None``: the type's ``group_fields`` read from each payload,
    if any). ``InputError`` (exit 2) names the line, a priority that is not an integer, or
    a group value too long or with a control character."""
    config = settings.type_config(task_type)
    level = config.priority if priority is None else check_priority(priority)
    given = None if group is None else clean_group(group)
    tasks: list[NewTask] = []
    for line, body in payloads:
        canonical = canonical_json(body)
        where = f"{source} line {line}" if line else source
        check_size(canonical, where=where)
        tasks.append(
            NewTask(
                task_type,
                canonical,
                payload_hash(canonical),
                derive_key(task_type, body, canonical, explicit=key, key_fields=config.key_fields),
                line,
                priority=level,
                group=given
                if given is not None
                else derive_group(body, config.group_fields, where=where, task_type=task_type),
            )
        )
    return tasks


def check_priority(value: int | str, *, where: str = "--priority") -> int:
    """A priority given by a caller (``--priority``, ``sheetq.enqueue``'s ``priority=``) as an
    int; ``InputError`` (exit 2) naming ``where`` for anything that is not an integer in
    range (``"high"``, ``1.5``, ``True``)."""
    number = parse_priority(value)
    if number is None:
        raise InputError(f"{where} {value!r}: expected {PRIORITY_RULE}")
    return number
