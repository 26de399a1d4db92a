"""Duration validation and back-off arithmetic."""

from __future__ import annotations

import math
from datetime import timedelta

import pytest

from syncprims._protocol.timing import (
    LATE_COPY,
    Bounds,
    lease_ms,
    threading_wait,
    to_seconds,
    wait_seconds,
)


def test_to_seconds_accepts_numbers_and_timedeltas() -> None:
    assert to_seconds(2, "x") == 2.0
    assert to_seconds(0.25, "x") == 0.25
    assert to_seconds(timedelta(milliseconds=1500), "x") == 1.5
    assert to_seconds(math.inf, "x") == math.inf


@pytest.mark.parametrize(
    ("value", "error", "match"),
    [
        (-1, ValueError, "must not be negative"),
        (math.nan, ValueError, "NaN"),
        ("1", TypeError, "seconds"),
        (True, TypeError, "seconds"),
        (None, TypeError, "seconds"),
        (timedelta(seconds=-2), ValueError, "negative"),
    ],
)
def test_to_seconds_rejects(value: object, error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match):
        to_seconds(value, "wait_time")


def test_zero_allowed_only_when_asked() -> None:
    assert to_seconds(0, "x") == 0.0
    with pytest.raises(ValueError, match="greater than 0"):
        to_seconds(0, "x", allow_zero=False)


def test_lease_ms_rounds_up_and_refuses_zero_and_infinity() -> None:
    assert lease_ms(10) == 10_000
    assert lease_ms(0.0001) == 1
    assert lease_ms(timedelta(seconds=1, microseconds=500)) == 1001
    with pytest.raises(ValueError, match="greater than 0"):
        lease_ms(0)
    with pytest.raises(ValueError, match="finite"):
        lease_ms(math.inf)


def test_wait_seconds_none_means_no_wait() -> None:
    assert wait_seconds(None) == 0.0
    assert wait_seconds(3) == 3.0


def test_bounds_cover_every_retry() -> None:
    bounds = Bounds(timeout=3, connect_timeout=1, retry_attempts=3, retry_delay_cap=1.0)
    assert bounds.operation_timeout == (1 + 3 + 1) * 4
    # the latch outlives a late copy of the unlock (LATE_COPY), and every retry of it
    assert bounds.unlock_key_ttl_ms == round(LATE_COPY * 1000)
    slow = Bounds(timeout=300, connect_timeout=10, retry_attempts=3, retry_delay_cap=1.0)
    assert slow.unlock_key_ttl_ms == (10 + 300 + 1) * 4 * 1000


@pytest.mark.parametrize(
    ("blocking", "timeout", "wait"),
    [(True, -1, math.inf), (False, -1, 0.0), (True, 2.5, 2.5), (True, timedelta(seconds=2), 2.0)],
)
def test_threading_wait_follows_the_standard_library(
    blocking: bool, timeout: float | timedelta, wait: float
) -> None:
    assert threading_wait(blocking, timeout) == wait


@pytest.mark.parametrize(
    ("blocking", "timeout", "error"),
    [(False, 1, ValueError), (True, -2, ValueError), (1, -1, TypeError), (True, "1", TypeError)],
)
def test_threading_wait_refuses(blocking: object, timeout: object, error: type[Exception]) -> None:
    with pytest.raises(error):
        threading_wait(blocking, timeout)
