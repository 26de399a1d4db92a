"""The timing wheel, driven by a fake clock."""

from __future__ import annotations

import random

import pytest

from syncprims._protocol.wheel import TimingWheel


def test_items_fire_once_at_or_after_their_time() -> None:
    wheel: TimingWheel[str] = TimingWheel(tick=0.1, slots=8, start=0.0)
    wheel.add("a", 0.25)
    wheel.add("b", 0.05)
    assert wheel.advance(0.04) == []
    assert wheel.advance(0.06) == ["b"]
    assert wheel.advance(0.2) == []
    assert wheel.advance(0.26) == ["a"]
    assert wheel.advance(5.0) == []
    assert len(wheel) == 0


def test_item_due_later_in_the_current_tick_is_not_skipped() -> None:
    wheel: TimingWheel[str] = TimingWheel(tick=0.1, slots=8, start=0.0)
    wheel.add("x", 1.05)
    assert wheel.advance(1.02) == []
    assert wheel.advance(1.15) == ["x"]


def test_items_beyond_one_revolution_wait_their_round() -> None:
    wheel: TimingWheel[int] = TimingWheel(tick=0.1, slots=4, start=0.0)  # 0.4 s per revolution
    wheel.add(1, 1.0)
    for now in (0.1, 0.2, 0.45, 0.6, 0.85, 0.95):
        assert wheel.advance(now) == []
    assert wheel.advance(1.0) == [1]


def test_cancel() -> None:
    wheel: TimingWheel[str] = TimingWheel(tick=0.1, slots=8, start=0.0)
    handle = wheel.add("a", 0.3)
    wheel.add("b", 0.3)
    wheel.cancel(handle)
    wheel.cancel(handle)  # idempotent
    assert len(wheel) == 1
    assert wheel.advance(1.0) == ["b"]
    wheel.cancel(handle)  # after firing: a no-op


def test_a_long_stall_collects_everything_due_in_order() -> None:
    wheel: TimingWheel[float] = TimingWheel(tick=0.05, slots=16, start=0.0)
    rng = random.Random(3)
    dues = [rng.uniform(0, 100) for _ in range(500)]
    for due in dues:
        wheel.add(due, due)
    assert wheel.advance(50.0) == sorted(d for d in dues if d <= 50.0)
    assert wheel.advance(100.0) == sorted(d for d in dues if d > 50.0)
    assert len(wheel) == 0


def test_randomized_against_a_sorted_list() -> None:
    rng = random.Random(11)
    wheel: TimingWheel[int] = TimingWheel(tick=0.01, slots=32, start=0.0)
    pending: dict[int, float] = {}
    handles = {}
    now = 0.0
    fired: list[int] = []
    for i in range(2000):
        due = now + rng.uniform(0, 1.5)
        handles[i] = wheel.add(i, due)
        pending[i] = due
        if rng.random() < 0.2:
            victim = rng.choice(list(pending))
            wheel.cancel(handles[victim])
            del pending[victim]
        now += rng.uniform(0, 0.02)
        for item in wheel.advance(now):
            assert pending.pop(item) <= now
            fired.append(item)
    assert all(due > now for due in pending.values())
    assert len(wheel) == len(pending)


@pytest.mark.parametrize(("tick", "slots"), [(0, 8), (-1, 8), (float("inf"), 8), (0.1, 0)])
def test_bad_construction(tick: float, slots: int) -> None:
    with pytest.raises(ValueError, match=r"tick|slots"):
        TimingWheel(tick=tick, slots=slots)
