"""The PostgreSQL worker's handler threads (``sheetq.postgres.slots``): a Python handler
runs on the slot's own thread; one past its timeout is left behind and replaced at once."""

from __future__ import annotations

import threading

from sheetq.handlers.python import Abandoned
from sheetq.postgres.slots import CallWatch, Slots


def test_a_call_past_its_timeout_is_left_behind_and_its_slot_serves_on() -> None:
    slots = Slots(1, name="t", started_clock=lambda: 42.0)
    release = threading.Event()
    events: list[str] = []
    done = threading.Event()
    raised: list[BaseException] = []

    def stuck(call: CallWatch) -> None:
        call.start(0.05)
        release.wait(5)
        if not call.finish():
            events.append("stuck returned late")
            try:
                raise Abandoned
            except Abandoned as exc:
                raised.append(exc)
                raise

    def quick(call: CallWatch) -> None:
        events.append(f"quick on {threading.current_thread().name}")
        done.set()

    slots.submit(stuck, lambda started: events.append(f"timed out, started {started}"))
    slots.submit(quick, lambda started: events.append("never"))
    assert done.wait(5)  # the one slot ran the next job while the stuck call still runs
    assert not release.is_set()
    release.set()
    slots.shutdown()
    assert events[:2] == ["timed out, started 42.0", "quick on t-2"], events
    assert slots.abandoned == 1


def test_a_call_within_its_timeout_is_not_abandoned() -> None:
    slots = Slots(2, name="t", started_clock=lambda: 0.0)
    answers: list[bool] = []

    def call(watch: CallWatch) -> None:
        watch.start(5.0)
        answers.append(watch.finish())

    for _ in range(20):
        slots.submit(call, lambda started: answers.append(False))
    slots.shutdown()
    assert answers == [True] * 20 and slots.abandoned == 0
