"""Durations, deadlines and back-off arithmetic.

Pure: no I/O, no clock reads except where a function says so. Durations given by users are
seconds as ``int``/``float`` or a ``datetime.timedelta``; Redis wants integer
milliseconds.
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Callable
from datetime import timedelta
from typing import TypeAlias

import attrs

__all__ = [
    "clock",
    "MAX_LEASE_SECONDS",
    "Bounds",
    "Duration",
    "check_duration_type",
    "drift",
    "lease_ms",
    "threading_wait",
    "to_seconds",
    "wait_seconds",
]

MAX_LEASE_SECONDS = 1e9
"""The longest lease or TTL, seconds (about 31.7 years). Redis keeps TTLs in 64-bit
milliseconds, but the scripts add and compare them as Lua numbers, which print in exponent
form from 1e14 ms on; a cap far below that keeps every script's arithmetic exact."""

Duration: TypeAlias = float | timedelta
"""A duration: seconds (``float``, or ``int``, which type checkers accept as ``float``) or a
``datetime.timedelta``."""


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
        TypeError, ValueError: as ``to_seconds``; also for an infinite lease (use
            ``None`` and the watchdog instead) and one above ``MAX_LEASE_SECONDS``.
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
        TypeError, ValueError: as ``to_seconds``.
    """
    if value is None:
        return 0.0
    return to_seconds(value, what)


def threading_wait(blocking: object, timeout: object, *, permits: bool = False) -> float:
    """The wait time, seconds, of ``threading.Lock.acquire(blocking, timeout)``
    (``permits``: a semaphore's, whose count is the keyword ``permits=``).

    Raises:
        TypeError: ``blocking`` is not a bool (the message says what to write instead).
        ValueError: a timeout with ``blocking=False``, or a negative timeout other than -1.
    """
    if not isinstance(blocking, bool):
        fix = ""
        if isinstance(blocking, (int, float)):
            fix = (
                f": to take {blocking} permits, write acquire(permits={blocking}) (the first "
                "argument is threading's blocking flag, not Redisson's count)"
                if permits and isinstance(blocking, int)
                else f": to wait at most {blocking} s, write acquire(timeout={blocking})"
            )
        raise TypeError(f"blocking must be a bool, not {type(blocking).__name__}{fix}")
    if timeout is not None:
        check_duration_type(timeout, "timeout")
    if timeout == -1 or timeout is None:
        return math.inf if blocking else 0.0
    if not blocking:
        raise ValueError("can't specify a timeout for a non-blocking call")
    return to_seconds(timeout, "timeout")


def _lease_clock() -> Callable[[], float]:
    """``CLOCK_BOOTTIME`` where the platform has it (Linux), else ``time.monotonic``.

    Lease deadlines are counted here on a clock that goes on while the host is suspended:
    ``CLOCK_MONOTONIC`` stops then, while the server's clock (and so a lease in Redis) runs
    on, so a holder suspended for a minute would wake counting its 30 s lease as valid.
    """
    boottime = getattr(time, "CLOCK_BOOTTIME", None)
    if boottime is not None:
        try:
            time.clock_gettime(boottime)
        except OSError:  # declared, not supported by the kernel
            pass
        else:
            return functools.partial(time.clock_gettime, boottime)
    return time.monotonic


clock: Callable[[], float] = _lease_clock()
"""Seconds on the clock that lease deadlines are counted on (no fixed origin): monotonic,
and going on while the host is suspended where the platform allows (:func:`_lease_clock`).
A clock read, the one exception to this module's purity."""


def drift(lease: float) -> float:
    """Clock drift allowance, seconds, for a lease of ``lease`` seconds (the Redis distlock
    page: 1% of it plus 2 ms). A client counts a lease as ended this much before its nominal
    end, so that a server clock running a little fast cannot expire it first."""
    return lease * 0.01 + 0.002


def notice_margin(lease: float) -> float:
    """How much earlier than its drift-allowed end (:func:`drift`) the watchdog reports a
    renewed lease lost when no renewal reply came: 5 % of the lease, at most 0.5 s.

    The report is a timer on the services loop, and a loaded host runs it late; at the
    lease's end exactly, a few milliseconds of scheduling delay carry it past Redis's
    expiry and another client's grant (docs/guarantees.md). A renewal that is merely slow
    and answers later is then reported lost although it was not: the holder stops early,
    the safe side."""
    return min(lease * 0.05, 0.5)


@attrs.frozen
class Bounds:
    """How long a client's calls may take, resolved from its options and its redis-py client.

    Attributes:
        timeout: the longest wait for one reply, seconds.
        connect_timeout: the longest wait to open one connection, seconds.
        retry_attempts: retries after a transport error.
        retry_delay_cap: the longest pause between two attempts, seconds.
        operation_timeout: the longest one operation can take, seconds, retries included
            (worked out from the others; see ``_operation_timeout``).
        unlock_key_ttl_ms: how long an unlock's idempotency key lives, milliseconds
            (worked out from the others; see ``_unlock_key_ttl_ms``).
    """

    timeout: float
    connect_timeout: float
    retry_attempts: int
    retry_delay_cap: float

    # Worked out once (an unlock reads the latch lifetime on every call).
    operation_timeout: float = attrs.field(init=False)
    unlock_key_ttl_ms: int = attrs.field(init=False)

    @operation_timeout.default
    def _operation_timeout(self) -> float:
        """The longest one operation can take, seconds, retries included.

        Each attempt waits at most ``connect_timeout + timeout``, and at most
        ``retry_delay_cap`` separates two attempts: ``(connect_timeout + timeout +
        retry_delay_cap) * (retry_attempts + 1)``. No retry starts that could end later.
        """
        per_attempt = self.connect_timeout + self.timeout + self.retry_delay_cap
        return per_attempt * (self.retry_attempts + 1)

    @unlock_key_ttl_ms.default
    def _unlock_key_ttl_ms(self) -> int:
        """How long an unlock's idempotency key lives, milliseconds: longer than every retry
        of one unlock call can take (Redisson: ``(timeout + retryDelay) * retryAttempts``),
        and at least :data:`LATE_COPY`, so that a copy of a retried unlock that TCP delivers
        late still finds it. A key is deleted once its unlock is answered, unless a copy of
        it may still be on its way."""
        return max(1, math.ceil(max(self.operation_timeout, LATE_COPY) * 1000))


LATE_COPY = 960.0
"""Seconds a command sent into a partition may still reach Redis, at most: Linux gives up
retransmitting after ``tcp_retries2`` = 15 back-offs, about 924.6 s."""


MIN_GRACE = 0.002
"""Seconds a fan-out with ``enough`` still waits for the other replies, at least (as long
again as it took to have enough, when that was longer): a healthy set answers within it."""
