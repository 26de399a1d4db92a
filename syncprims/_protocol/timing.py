"""Durations, deadlines and back-off arithmetic.

Pure: no I/O, no clock reads except where a function says so. Durations given by users are
seconds as ``int``/``float`` or a :class:`datetime.timedelta`; Redis wants integer
milliseconds.
"""

from __future__ import annotations

import math
import random
from datetime import timedelta
from typing import TypeAlias

__all__ = [
    "MAX_LEASE_SECONDS",
    "Duration",
    "check_duration_type",
    "equal_jitter_delay",
    "lease_ms",
    "to_seconds",
    "wait_seconds",
]

MAX_LEASE_SECONDS = 1e9
"""The longest lease or TTL, seconds (about 31.7 years). Redis keeps TTLs in 64-bit
milliseconds, but the scripts add and compare them as Lua numbers, which print in exponent
form from 1e14 ms on; a cap far below that keeps every script's arithmetic exact."""

Duration: TypeAlias = float | int | timedelta
"""A duration in seconds (``int`` or ``float``) or a :class:`datetime.timedelta`."""


def check_duration_type(value: object, what: str) -> None:
    """Raise ``TypeError`` unless ``value`` is seconds (``int``/``float``, not ``bool``) or a
    ``timedelta``; ``what`` names the argument in the message."""
    if isinstance(value, bool) or not isinstance(value, (int, float, timedelta)):
        raise TypeError(
            f"{what} must be seconds (int or float) or a timedelta, not {type(value).__name__}"
        )


def to_seconds(value: object, what: str, *, allow_zero: bool = True) -> float:
    """Validate a duration and return it in seconds.

    Args:
        value: seconds as ``int``/``float``, or a ``timedelta``.
        what: the argument's name, for the error message.
        allow_zero: whether ``0`` is accepted.

    Returns:
        The duration in seconds, a finite non-negative float (``math.inf`` is returned
        unchanged, and an ``int`` too large for a float becomes ``math.inf``: callers decide
        whether they accept it).

    Raises:
        TypeError: ``value`` is not a number or a ``timedelta`` (``bool`` is refused).
        ValueError: ``value`` is negative, NaN, or zero when ``allow_zero`` is false.
    """
    check_duration_type(value, what)
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
    else:
        assert isinstance(value, (int, float))
        try:
            seconds = float(value)
        except OverflowError:  # an int beyond any float
            seconds = math.inf if value > 0 else -math.inf
    if math.isnan(seconds):
        raise ValueError(f"{what} must not be NaN")
    if seconds < 0:
        raise ValueError(f"{what} must not be negative, got {seconds!r}")
    if seconds == 0 and not allow_zero:
        raise ValueError(f"{what} must be greater than 0")
    return seconds


def lease_ms(value: object, what: str = "lease_time") -> int:
    """Validate a lease and return it in whole milliseconds (at least 1).

    Args:
        value: a positive, finite duration (seconds or ``timedelta``).
        what: the argument's name, for the error message.

    Returns:
        Milliseconds, rounded up so that a tiny positive lease never becomes 0.

    Raises:
        TypeError, ValueError: as :func:`to_seconds`; also for an infinite lease (use
            ``None`` and the watchdog instead) and one above :data:`MAX_LEASE_SECONDS`.
    """
    seconds = to_seconds(value, what, allow_zero=False)
    if math.isinf(seconds):
        raise ValueError(f"{what} must be finite; pass None to use the watchdog")
    if seconds > MAX_LEASE_SECONDS:
        raise ValueError(
            f"{what} must be at most {MAX_LEASE_SECONDS:g} s (about 31 years), got {seconds!r}"
        )
    return max(1, math.ceil(seconds * 1000))


def wait_seconds(value: object, what: str = "wait_time") -> float:
    """Validate a wait time: ``None`` means "do not wait" (0.0), ``math.inf`` means forever.

    Raises:
        TypeError, ValueError: as :func:`to_seconds`.
    """
    if value is None:
        return 0.0
    return to_seconds(value, what)


def equal_jitter_delay(
    attempt: int, base: float, cap: float, rng: random.Random | None = None
) -> float:
    """Equal-jitter exponential back-off (Redisson ``EqualJitterDelay``), in seconds.

    ``e = min(base * 2**attempt, cap)``; the delay is ``e/2 + uniform(0, e/2)``.

    Args:
        attempt: 0 for the first retry.
        base: the first delay's upper bound, seconds.
        cap: the largest ``e``, seconds.
        rng: the random source (tests pass a seeded one).

    Returns:
        The delay in seconds, within ``[e/2, e]``.
    """
    e = min(math.ldexp(base, min(attempt, 32)), cap)
    r: float = (rng or random).random()
    return e / 2 + r * e / 2


def drift(lease: float) -> float:
    """Clock drift allowance, seconds, for a lease of ``lease`` seconds (the Redis distlock
    page: 1% of it plus 2 ms). A client counts a lease as ended this much before its nominal
    end, so that a server clock running a little fast cannot expire it first."""
    return lease * 0.01 + 0.002
