"""The fan-out policy of a MultiLock or RedLock, as pure functions (no I/O, no clock of its
own): how many sub-locks make the lock held, when an attempt's fan-out may stop waiting,
and how long the replies still out get once it may. Both faces' fan-outs
(``_transport/blocking/fanout.py``, ``_transport/aio/fanout.py``) and the core
(``_core/multi.py``) ask these; a call marked ``skip_if_busy`` is skipped where its server
is still finishing an earlier call (``contracts.Call``).

Sources: the Redis distlock page ("The Redlock algorithm": a majority, ``N/2 + 1``) and
Redisson's ``RedissonRedLock.minLocksAmount``.
"""

from __future__ import annotations

from syncprims._protocol.timing import MIN_GRACE

__all__ = ["grace_end", "majority", "released_enough", "settled"]


def majority(count: int) -> int:
    """The quorum of ``count`` independent masters: ``count // 2 + 1``."""
    return count // 2 + 1


def settled(granted: int, out: int, need: int) -> bool:
    """Whether an acquire's fan-out may stop waiting: ``need`` sub-locks ``granted``, or too
    few replies still ``out`` for ``need`` (then the attempt has failed already)."""
    return granted >= need or granted + out < need


def released_enough(released: int, need: int) -> bool:
    """Whether an unlock's fan-out may stop waiting: ``need`` sub-locks released (the rest
    finishes in the background, within each server's timeout)."""
    return released >= need


def grace_end(started: float, now: float) -> float:
    """When a fan-out that has enough replies at ``now`` (it started at ``started``, same
    clock, seconds) stops waiting for the others: as long again as it took, at least
    ``MIN_GRACE``. A healthy set answers within it, so nothing is left behind; a slow
    master costs the fastest majority's time twice at most."""
    return now + max(MIN_GRACE, now - started)
