"""The fan-out policy of a MultiLock/RedLock (``syncprims._protocol.quorum``), as pure code:
the numbers both faces' fan-outs and the core ask."""

from __future__ import annotations

import pytest

from syncprims._protocol.quorum import grace_end, majority, released_enough, settled
from syncprims._protocol.timing import MIN_GRACE


@pytest.mark.parametrize(("count", "need"), [(1, 1), (2, 2), (3, 2), (4, 3), (5, 3), (7, 4)])
def test_majority_is_more_than_half(count: int, need: int) -> None:
    assert majority(count) == need
    assert need > count / 2 and need - 1 <= count / 2


def test_an_acquire_settles_on_a_quorum_or_when_none_is_possible() -> None:
    need = majority(5)
    assert settled(granted=3, out=2, need=need)  # a quorum: stop, the rest is late
    assert not settled(granted=2, out=2, need=need)  # two more may still grant
    assert settled(granted=1, out=1, need=need)  # two at most: it has failed already
    assert not settled(granted=0, out=5, need=need)  # nothing answered yet
    assert settled(granted=5, out=0, need=5)  # a MultiLock needs every one
    assert settled(granted=4, out=0, need=5) and not settled(granted=4, out=1, need=5)


def test_an_unlock_may_stop_once_a_quorum_released() -> None:
    assert released_enough(3, majority(5))
    assert not released_enough(2, majority(5))


def test_the_grace_is_as_long_again_as_it_took_and_at_least_the_minimum() -> None:
    assert grace_end(started=10.0, now=10.05) == pytest.approx(10.1)  # 50 ms more
    assert grace_end(started=10.0, now=10.0005) == pytest.approx(10.0005 + MIN_GRACE)
