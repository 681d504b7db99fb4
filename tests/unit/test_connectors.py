"""Connectors (docs/design.md §13): the configuration, the sliding window, the slots and
the breaker's state machine, as pure functions on a given time."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from sheetq.config import load_settings
from sheetq.connectors import (
    Breaker,
    Kind,
    Limits,
    State,
    admits,
    after,
    effective,
    free_slots,
    grant,
    next_start,
    owed,
    pause,
    resume,
    take,
)
from sheetq.errors import ConfigError

T0 = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)


def _at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def _settings(tmp_path: Path, text: str):  # type: ignore[no-untyped-def]
    path = tmp_path / "sheetq.toml"
    path.write_text(text, encoding="utf-8")
    return load_settings(config=str(path), env={"SHEETQ_SPREADSHEET": "local:x"})


def test_types_share_a_named_connector_and_others_are_their_own(tmp_path: Path) -> None:
    """[connectors.crm] with two types naming it; a type without `connector` is a connector
    of its own with its per-type rate_limit and breaker_threshold."""
    s = _settings(
        tmp_path,
        '[connectors.crm]\nrate_limit = "30/min"\nconcurrency = 2\nbreaker_threshold = 3\n'
        'breaker_cooldown = "1m"\nescalate_after = "10m"\n'
        '[types.lead]\ncommand = "x"\nconnector = "crm"\n'
        '[types.deal]\ncommand = "x"\nconnector = "crm"\n'
        '[types.mail]\ncommand = "x"\nrate_limit = "2/s"\nbreaker_threshold = 4\n',
    )
    crm = s.connector_of("lead")
    assert crm is s.connector_of("deal") and crm.name == "crm"
    assert crm.types == ("lead", "deal") and crm.concurrency == 2 and crm.limited
    assert crm.interval == 2.0
    assert (crm.breaker_threshold, crm.breaker_cooldown, crm.escalate_after) == (3, 60.0, 600.0)
    mail = s.connector_of("mail")
    assert (mail.name, mail.types, mail.breaker_threshold) == ("mail", ("mail",), 4)
    assert mail.interval == 0.5
    assert not s.connector_of("nothing").limited


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        (
            '[types.lead]\ncommand = "x"\nconnector = "crmm"\n',
            "[types.lead].connector: unknown connector 'crmm'",
        ),
        ("[connectors.crm]\nconcurrency = 0\n", "[connectors.crm].concurrency: expected a whole"),
        ('[connectors.crm]\nrate_limit = "30"\n', "[connectors.crm].rate_limit: expected a rate"),
        ('[connectors.crm]\nrate_limit = "30/5"\n', "[connectors.crm].rate_limit: expected"),
        ("[connectors.crm]\nconcurency = 2\n", "unknown key 'concurency'"),
        ('[connectors.crm]\nbreaker_cooldown = "soon"\n', "[connectors.crm].breaker_cooldown"),
        (
            '[connectors.crm]\n[types.lead]\ncommand = "x"\nconnector = "crm"\n'
            'rate_limit = "1/s"\n',
            "[types.lead].rate_limit: the type calls connector 'crm'",
        ),
    ],
)
def test_bad_connector_configuration_names_the_key(
    tmp_path: Path, text: str, fragment: str
) -> None:
    """An unknown connector, concurrency = 0, a rate without a unit: refused at load with
    the key named (exit 2: ConfigError)."""
    with pytest.raises(ConfigError) as info:
        _settings(tmp_path, text)
    assert fragment in info.value.message
    assert info.value.exit_code == 2


def test_the_bucket_never_allows_more_than_the_limit_in_any_window() -> None:
    """Random demand over 10 minutes at 5 per 10 s: in every window of 10 s, wherever it
    starts, at most 5 starts (a fixed-window counter would allow 10 across a boundary)."""
    rng = random.Random(7)
    next_at = None
    log: list[datetime] = []
    t = 0.0
    while t < 600:
        n, next_at = grant(next_at, _at(t), 2.0, rng.randint(0, 4))
        log += [_at(t)] * n
        t += rng.choice([0.1, 0.5, 1.0, 3.0])
    assert len(log) > 150  # the limit is used (at most 300 in 600 s), not just respected
    for first in log:
        inside = [s for s in log if first <= s < first + timedelta(seconds=10)]
        assert len(inside) <= 5


def test_next_start_is_one_interval_after_the_last() -> None:
    n, next_at = grant(None, _at(0), 30.0, 5)
    assert (n, next_at) == (1, _at(30))
    assert next_start(next_at, _at(1), 30.0) == _at(30)
    assert grant(next_at, _at(29.9), 30.0, 1)[0] == 0
    assert grant(next_at, _at(30), 30.0, 3) == (1, _at(60))
    assert grant(next_at, _at(1), None, 3) == (3, next_at)  # no rate limit


def test_a_slot_is_free_again_when_its_lease_ends() -> None:
    slots = {"a": _at(30), "b": _at(90)}
    assert free_slots(slots, _at(0), 2) == 0
    assert free_slots(slots, _at(30), 2) == 1  # a's task lease ended: its slot with it
    assert free_slots(slots, _at(0), None) is None


def test_breaker_opens_after_threshold_then_one_probe_closes_it() -> None:
    limits = Limits(threshold=3, cooldown=60)
    b = Breaker()
    for n in range(2):
        b, change = after(b, _at(n), limits, f"t{n}", Kind.FAIL, "503")
        assert change is None
    b, change = after(b, _at(2), limits, "t2", Kind.FAIL, "503")
    assert change is not None and change.event == "breaker_opened" and "503" in change.message
    assert b.state is State.OPEN and b.until == _at(62)
    assert admits(b, _at(30), limits, 10) == 0
    assert effective(b, _at(62)) is State.HALF_OPEN
    assert admits(b, _at(62), limits, 10) == 1  # exactly one probe
    b = take(b, _at(62), limits, ["p"], _at(122))
    assert b.state is State.HALF_OPEN and b.probe == "p"
    assert admits(b, _at(63), limits, 10) == 0  # the probe is out: nobody else
    assert admits(b, _at(123), limits, 10) == 1  # its lease ended (a crash): another probe
    b, change = after(b, _at(70), limits, "p", Kind.OK)
    assert change is not None and change.event == "breaker_closed"
    assert (b.state, b.failures) == (State.CLOSED, 0)
    assert admits(b, _at(71), limits, 10) == 10


def test_a_success_resets_the_streak_and_a_failed_probe_reopens() -> None:
    limits = Limits(threshold=2, cooldown=60)
    b, _ = after(Breaker(), _at(0), limits, "a", Kind.FAIL)
    b, _ = after(b, _at(1), limits, "b", Kind.OK)
    b, change = after(b, _at(2), limits, "c", Kind.FAIL)
    assert change is None and b.state is State.CLOSED
    b, change = after(b, _at(3), limits, "d", Kind.FAIL)
    assert b.state is State.OPEN
    b = take(b, _at(63), limits, ["p"], _at(200))
    b, change = after(b, _at(64), limits, "p", Kind.FAIL, "timeout")
    assert change is not None and change.event == "breaker_opened"
    assert b.state is State.OPEN and b.until == _at(124) and b.probe == ""


def test_auth_opens_until_a_person_resumes() -> None:
    limits = Limits(threshold=5, cooldown=60)
    b, change = after(Breaker(), _at(0), limits, "a", Kind.AUTH, "401")
    assert change is not None and b.state is State.OPEN and b.until is None
    assert admits(b, _at(10**6), limits, 3) == 0
    b, change = resume(b)
    assert change.event == "resumed" and b.state is State.CLOSED
    assert admits(b, _at(1), limits, 3) == 3


def test_pause_for_a_while_and_a_release_gives_the_slot_back() -> None:
    limits = Limits(concurrency=1, interval=1.0)
    b, change = pause(Breaker(), _at(0), 3600, "CRM maintenance")
    assert change.event == "paused" and "CRM maintenance" in change.message
    assert admits(b, _at(10), limits, 5) == 0
    assert admits(b, _at(3600), limits, 5) == 1  # the pause ended
    b = take(b, _at(3600), limits, ["x"], _at(4000))
    assert b.state is State.CLOSED and admits(b, _at(3601), limits, 5) == 0
    b, _ = after(b, _at(3602), limits, "x", Kind.RELEASE)
    assert admits(b, _at(3603), limits, 5) == 1


def test_what_a_connector_owes_telegram_follows_its_state_and_what_was_told() -> None:
    """Opened: `opened` until told; after escalate_after: `escalated` once; a failed probe
    re-opening it is the same opening (its opened_at kept); closed after being told of
    it: `closed`; a pause owes nothing; an opening never told owes no closing."""
    limits = Limits(threshold=1, cooldown=60)
    b, _ = after(Breaker(), _at(0), limits, "a", Kind.FAIL)
    assert owed(b, "", _at(1), 900) == "opened"
    assert owed(b, "opened", _at(899), 900) == ""
    assert owed(b, "", _at(900), 900) == "escalated"  # never told: said once, as escalated
    b = take(b, _at(61), limits, ["p"], _at(200))
    b, _ = after(b, _at(62), limits, "p", Kind.FAIL)
    assert b.opened_at == _at(0)
    assert owed(b, "opened", _at(900), 900) == "escalated"
    assert owed(b, "escalated", _at(5000), 900) == ""
    b2 = take(b, _at(200), limits, ["q"], _at(300))
    closed, _ = after(b2, _at(201), limits, "q", Kind.OK)
    assert owed(closed, "escalated", _at(202), 900) == "closed"
    assert owed(closed, "closed", _at(203), 900) == ""
    assert owed(closed, "", _at(203), 900) == ""
    paused, _ = pause(Breaker(), _at(0), None, "maintenance")
    assert owed(paused, "", _at(5000), 900) == ""
