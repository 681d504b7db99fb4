"""The group rules of docs/design.md §14 as pure functions (``sheetq.order``): a group value
given or read from a payload, and which task of a group may run."""

from __future__ import annotations

import pytest

from sheetq.errors import InputError
from sheetq.model import Status
from sheetq.order import Member, blocked, claimable, clean_group, derive_group


def test_group_values_from_payloads_span_types_and_encode_separators() -> None:
    """`field=value` without the type, separators encoded as in keys; a missing, null or
    empty field is refused (the task would run beside its group), naming field and type."""
    assert derive_group({"deal_id": 42}, ["deal_id"], where="payload") == "deal_id=42"
    assert derive_group({"a": {"b": "x:y"}}, ["a.b"], where="p") == "a.b=x%3Ay"
    assert derive_group({"a": 1, "b": "2"}, ["a", "b"], where="p") == "a=1:b=2"
    for payload in ({}, {"deal_id": None}, {"deal_id": ""}):
        with pytest.raises(InputError, match="type 'deal' groups its tasks by 'deal_id'"):
            derive_group(payload, ["deal_id"], where="p", task_type="deal")
    assert derive_group({"deal_id": 1}, [], where="p") == ""


@pytest.mark.parametrize(
    ("value", "why"),
    [("", "empty"), ("a\x00b", "control character"), ("a\u2028b", "control"), ("x" * 201, "201")],
)
def test_bad_group_values_are_refused(value: str, why: str) -> None:
    with pytest.raises(InputError, match=why):
        clean_group(value)
    assert clean_group("  deal-42 ") == "deal-42"


def _m(task: str, status: Status, blocks: bool = False) -> Member:
    return Member(task, (task,), status, blocks)


def test_only_the_head_runs_and_only_while_nothing_of_its_group_runs() -> None:
    p, r, f, d = Status.PENDING, Status.RETRY, Status.FAILED, Status.DONE
    assert claimable([_m("a", d), _m("b", p), _m("c", p)]) == "b"
    assert claimable([_m("a", f), _m("b", r)]) == "b"  # failed releases
    assert claimable([_m("a", f, blocks=True), _m("b", p)]) is None  # unless it blocks
    assert blocked([_m("a", f, blocks=True), _m("b", p)]) == _m("a", f, blocks=True)
    assert claimable([_m("a", p), _m("b", Status.PROCESSING)]) is None  # requeued earlier
    assert claimable([_m("a", Status.SKIPPED), _m("b", d)]) is None
    assert blocked([_m("a", p)]) is None
