"""Who held a lock when: the record both ``syncprims demo`` and ``syncprims bench`` keep of
every critical section, and what is read from it (overlaps, handoffs, FIFO order, readers
inside at once).

Pure: no I/O. Times are ``time.monotonic_ns()`` values, one clock for every process on a
host, so holds recorded in different processes compare directly.
"""

from __future__ import annotations

import itertools
import math

import attrs

__all__ = ["Hold", "analyse", "fifo_fraction", "percentile", "reader_concurrency"]


@attrs.frozen
class Hold:
    """One critical section: who held the lock, and when (``time.monotonic_ns``).

    ``requested_ns`` is when the holder called ``lock()`` (0 when not recorded); ``mode`` is
    ``"x"`` for an exclusive lock, ``"r"``/``"w"`` for the sides of a read-write lock.
    """

    worker: int
    thread: int
    acquired_ns: int
    released_ns: int
    requested_ns: int = 0
    mode: str = "x"

    @property
    def exclusive(self) -> bool:
        """Whether nothing else may overlap this hold (a read or a semaphore permit may)."""
        return self.mode in ("x", "w")


def percentile(sorted_values: list[float], q: float) -> float | None:
    """The ``q`` quantile (0..1, nearest rank) of ascending values; ``None`` when empty."""
    if not sorted_values:
        return None
    index = min(len(sorted_values) - 1, max(0, math.ceil(q * len(sorted_values)) - 1))
    return sorted_values[index]


def fifo_fraction(holds: list[Hold]) -> float | None:
    """The share of consecutive acquisitions granted in the order they were requested.

    Sorted by acquire time, a pair is in FIFO order when the later holder also called
    ``lock()`` later. ``None`` without request times.
    """
    ordered = sorted(holds, key=lambda h: h.acquired_ns)
    pairs = [(a, b) for a, b in itertools.pairwise(ordered) if a.requested_ns and b.requested_ns]
    if not pairs:
        return None
    return sum(1 for a, b in pairs if a.requested_ns <= b.requested_ns) / len(pairs)


def analyse(holds: list[Hold]) -> tuple[int, list[float]]:
    """Count overlapping holds and collect handoff latencies (ms) between different workers.

    Returns:
        ``(overlaps, sorted handoff latencies in milliseconds)``.
    """
    ordered = sorted(holds, key=lambda h: h.acquired_ns)
    overlaps = 0
    active: list[Hold] = []  # holds not yet ended when the current one started
    for current in ordered:
        active = [h for h in active if h.released_ns > current.acquired_ns]
        if active and (current.exclusive or any(h.exclusive for h in active)):
            overlaps += 1
        active.append(current)
    handoffs: list[float] = []
    for previous, current in itertools.pairwise(ordered):
        other = (current.worker, current.thread) != (previous.worker, previous.thread)
        if other and current.acquired_ns >= previous.released_ns:
            handoffs.append((current.acquired_ns - previous.released_ns) / 1e6)
    handoffs.sort()
    return overlaps, handoffs


def reader_concurrency(holds: list[Hold], mode: str = "r") -> tuple[float, int] | None:
    """(mean, max) holders of ``mode`` inside while any is inside; ``None`` without any."""
    events: list[tuple[int, int]] = []
    for h in holds:
        if h.mode == mode:
            events += [(h.acquired_ns, 1), (h.released_ns, -1)]
    if not events:
        return None
    events.sort()
    inside = peak = 0
    busy = weighted = 0
    last = events[0][0]
    for at, delta in events:
        if inside > 0:
            busy += at - last
            weighted += inside * (at - last)
        inside += delta
        peak = max(peak, inside)
        last = at
    return (weighted / busy if busy else 1.0), peak
