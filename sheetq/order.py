"""Order per entity: task groups (docs/design.md §14). Pure; shared by the sheet engine and
PostgreSQL's reports (PostgreSQL applies the same rule in SQL, migration 6).

A task may belong to a group (the ``group`` column: ``enqueue --group G``, or the type's
``group_fields`` read from the payload). Tasks of one group run one at a time, in enqueue
order (``created_at``, then ``task_id``):

* a task **holds** its group while it is ``pending``, ``processing`` or ``retry``, and while
  it is ``failed`` if its type says ``group_blocks_on_failure = true`` (it waits for a person
  to requeue or skip it); ``done``, ``skipped`` and other ``failed`` tasks release it;
* of a group's holding tasks the earliest is its **head**; only the head is claimed, and
  only while no task of the group is ``processing`` (a requeued earlier task waits for a
  later one that is running to end).

* ``clean_group`` / ``derive_group`` — a group value given or read from a payload, checked;
* ``Member`` / ``claimable`` / ``head`` — which task of a group may run.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from sheetq.errors import InputError
from sheetq.idempotency import encode_key_value, key_value, path_value
from sheetq.model import Status

MAX_GROUP_CHARS = 200
HOLDING = frozenset({Status.PENDING, Status.PROCESSING, Status.RETRY})


def clean_group(value: str, *, where: str = "--group") -> str:
    """A group value as given (``--group G``, ``sheetq.enqueue``'s ``group=``): trimmed and
    NFC-normalised like keys. ``InputError`` (exit 2), naming ``where``, when it is empty,
    longer than ``MAX_GROUP_CHARS`` or holds a control character (groups are one line)."""
    cleaned = unicodedata.normalize("NFC", value.strip())
    if not cleaned:
        raise InputError(f"{where}: empty after trimming spaces")
    bad = next((c for c in cleaned if unicodedata.category(c) in ("Cc", "Cs", "Zl", "Zp")), None)
    if bad is not None:
        raise InputError(
            f"{where}: contains the control character {bad!r} at {cleaned.index(bad) + 1}; "
            "a group is one line of text"
        )
    if len(cleaned) > MAX_GROUP_CHARS:
        raise InputError(f"{where}: {len(cleaned)} characters; at most {MAX_GROUP_CHARS} allowed")
    return cleaned


def derive_group(
    payload: dict[str, Any], fields: Sequence[str], *, where: str, task_type: str = ""
) -> str:
    """The group a type's ``group_fields`` (dotted paths) give a payload:
    ``field=value[:field=value…]``, encoded as derived keys are (docs/design.md §4), without
    the type, so types that name the same field share the group; ``""`` (no group) when the
    type has no ``group_fields``. ``InputError`` (exit 2) when a field is missing, null or
    empty (the task would otherwise run beside its group's other tasks: docs/order.md),
    naming the field and ``task_type``, or when the value breaks ``clean_group``'s limits
    (``where`` names the payload line)."""
    if not fields:
        return ""
    parts = [(name, key_value(path_value(payload, name))) for name in fields]
    absent = next((name for name, value in parts if value is None), None)
    if absent is not None:
        raise InputError(
            f"{where}: type {task_type!r} groups its tasks by {absent!r} (group_fields), "
            "which is missing, null or empty; give it in the payload, or a group with --group"
        )
    text = ":".join(f"{name}={encode_key_value(value or '')}" for name, value in parts)
    return clean_group(text, where=f"{where}: group_fields {', '.join(fields)}")


@dataclass(frozen=True)
class Member:
    """One task of a group as the rule sees it: ``order`` sorts by enqueue order;
    ``blocks``: its type says ``group_blocks_on_failure``."""

    task_id: str
    order: tuple[Any, ...]
    status: Status | None
    blocks: bool = False

    @property
    def holding(self) -> bool:
        """Whether it holds its group (see the module's docstring)."""
        return self.status in HOLDING or (self.status is Status.FAILED and self.blocks)


def head(members: Iterable[Member]) -> Member | None:
    """The earliest task holding the group (``None``: the group is free)."""
    holding = [m for m in members if m.holding]
    return min(holding, key=lambda m: m.order) if holding else None


def claimable(members: Sequence[Member]) -> str | None:
    """The task of the group that may be claimed now: its head, when waiting and no task of
    the group is ``processing``; ``None`` otherwise."""
    first = head(members)
    if first is None or first.status not in (Status.PENDING, Status.RETRY):
        return None
    if any(m.status is Status.PROCESSING for m in members):
        return None
    return first.task_id


def blocked(members: Sequence[Member]) -> Member | None:
    """The failed task that blocks its group (its type's ``group_blocks_on_failure``) until a
    person requeues or skips it; ``None`` when the group is not blocked."""
    first = head(members)
    return first if first is not None and first.status is Status.FAILED else None
