"""A hashed timing wheel: O(1) add and cancel, due items collected per tick.

Pure: the caller passes the clock reading to :meth:`TimingWheel.advance`. The watchdog uses
one wheel per client (Varghese & Lauck, "Hashed and Hierarchical Timing Wheels", 1987; the
same structure as Netty's ``HashedWheelTimer`` that Redisson uses).
"""

from __future__ import annotations

import math
from typing import Generic, TypeVar

__all__ = ["TimerHandle", "TimingWheel"]

T = TypeVar("T")


class TimerHandle(Generic[T]):
    """One scheduled item; pass it to :meth:`TimingWheel.cancel`."""

    __slots__ = ("_bucket", "cancelled", "due", "item")

    def __init__(self, item: T, due: float, bucket: int) -> None:
        self.item = item
        self.due = due
        self.cancelled = False
        self._bucket = bucket


class TimingWheel(Generic[T]):
    """Items scheduled at absolute times, collected by :meth:`advance`.

    Args:
        tick: bucket width, seconds. An item is returned by the first ``advance(now)`` with
            ``now >= due``; precision is one tick.
        slots: number of buckets; items further away than ``tick * slots`` wait extra rounds.
        start: the clock reading at construction.

    Raises:
        ValueError: ``tick`` is not positive or ``slots`` is below 1.
    """

    def __init__(self, tick: float, slots: int = 512, start: float = 0.0) -> None:
        if not tick > 0 or math.isinf(tick):
            raise ValueError("tick must be a positive finite number of seconds")
        if slots < 1:
            raise ValueError("slots must be at least 1")
        self._tick = tick
        self._slots = slots
        self._buckets: list[dict[TimerHandle[T], None]] = [{} for _ in range(slots)]
        self._done_tick = math.floor(start / tick) - 1  # every tick <= this has been collected
        self._count = 0

    def __len__(self) -> int:
        return self._count

    def add(self, item: T, due: float) -> TimerHandle[T]:
        """Schedule ``item`` at the absolute time ``due`` (seconds, same clock as ``advance``)."""
        tick = max(math.floor(due / self._tick), self._done_tick + 1)
        bucket = tick % self._slots
        handle = TimerHandle(item, due, bucket)
        self._buckets[bucket][handle] = None
        self._count += 1
        return handle

    def cancel(self, handle: TimerHandle[T]) -> None:
        """Remove a scheduled item; a no-op when it already fired or was cancelled."""
        if handle.cancelled:
            return
        handle.cancelled = True
        if self._buckets[handle._bucket].pop(handle, 0) is None:
            self._count -= 1

    def advance(self, now: float) -> list[T]:
        """Collect every item whose due time is ``<= now``, in due-time order.

        Returns:
            The due items; they are removed from the wheel.
        """
        target = math.floor(now / self._tick)
        if target < self._done_tick + 1:
            return []
        if target - self._done_tick > self._slots:
            ticks = range(target - self._slots + 1, target + 1)  # a whole revolution: scan all
        else:
            ticks = range(self._done_tick + 1, target + 1)
        due: list[TimerHandle[T]] = []
        for tick in ticks:
            bucket = self._buckets[tick % self._slots]
            ready = [h for h in bucket if h.due <= now]
            for h in ready:
                del bucket[h]
                h.cancelled = True  # fired: a later cancel() is a no-op
            due.extend(ready)
        # The current tick is only partly over: its bucket is scanned again next time.
        self._done_tick = target - 1
        self._count -= len(due)
        due.sort(key=lambda h: h.due)
        return [h.item for h in due]
