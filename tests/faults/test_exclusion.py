"""Mutual exclusion of every lock kind under load, and the checker's self-test."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from syncprims._embedded import RedisServer
from tests.faults.checker import KINDS, Plan, check

pytestmark = [pytest.mark.real, pytest.mark.faults]


@pytest.mark.parametrize("kind", KINDS)
def test_no_overlap_and_an_exact_counter(
    kind: str, five: list[RedisServer], record_property: Callable[[str, object], None]
) -> None:
    urls = tuple(s.url for s in five) if kind == "redlock" else (five[0].url,)
    report = check(Plan(urls=urls, kind=kind))  # 3 processes x 2 threads, 2 s
    record_property(f"exclusion_{kind}_sections", report.sections)
    assert report.sections > 20
    assert report.overlaps == 0
    assert report.counter == report.sections
    assert report.token_regressions == 0
    assert report.correct


def test_the_checker_catches_a_broken_lock(five: list[RedisServer]) -> None:
    # A lease (50 ms) shorter than the critical section (150 ms): holders overlap.
    report = check(
        Plan(urls=(five[0].url,), kind="fenced", seconds=2.0, hold=0.15, lease_time=0.05)
    )
    assert not report.correct
    assert report.overlaps > 0
    assert report.counter < report.sections  # lost updates
    assert report.unlock_errors > 0  # and the late unlocks say the lease had run out
