"""What a lock object knows of its owners' holds without asking Redis: each one's lease,
when it started, when an explicit lease ends, its ``max_hold`` cap, and whether (and why) it
was lost, with the listeners told when it is (``on_lost``, ``add_loss_listener``).

A lock object owns one :class:`Holds`. The watchdog (``syncprims._services.watchdog``) calls
:meth:`Holds.watchdog_lost` on its services thread when a renewal finds a hold gone. Whether
Redis still has a hold is the lock's question (``LockCore.ensure_held``).
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Callable
from typing import Any, Protocol

from syncprims import _observe
from syncprims._core.lock.view import LockView
from syncprims._protocol.loss import LossReason
from syncprims._protocol.timing import drift, lease_ms

__all__ = ["Holds", "LossWatcher", "max_hold_seconds"]


class LossWatcher(Protocol):
    """A lock made over other locks (a MultiLock's core), told of their losses."""

    def sub_lost(self, holds: Holds, field: str, reason: LossReason) -> None:
        """``field``'s hold on the lock whose :class:`Holds` is ``holds`` was lost."""


def max_hold_seconds(lease_time: object, max_hold: object) -> float:
    """A ``max_hold`` argument in seconds (it bounds the watchdog: no ``lease_time``).

    Raises:
        TypeError, ValueError: not a positive duration, or given with a ``lease_time``.
    """
    if lease_time is not None:
        raise ValueError(
            "max_hold bounds the watchdog's renewals: pass it with lease_time=None (a lease "
            "time is never renewed, so it is its own bound)"
        )
    return lease_ms(max_hold, "max_hold") / 1000


class Holds:
    """One lock object's memory of its owners' holds, keyed by owner field."""

    __slots__ = (
        "_ex",
        "_lock",
        "caps",
        "expires",
        "held_since",
        "leases",
        "listeners",
        "lost",
        "on_lost",
        "watchers",
    )

    def __init__(self, lock: LockView) -> None:
        self._lock = lock
        self._ex = lock.executor
        # owner field -> lease (ms) of that owner's last acquire, re-armed by a partial unlock
        self.leases: dict[str, int] = {}
        self.lost: dict[str, LossReason] = {}  # owner field -> why its hold was lost
        self.held_since: dict[str, float] = {}  # owner field -> first hold (monotonic s)
        self.expires: dict[str, float] = {}  # owner field -> when its explicit lease ends
        self.caps: dict[str, float] = {}  # owner field -> its max_hold, seconds (try_lock)
        self.listeners: dict[str, list[Callable[[LossReason], object]]] = {}
        # The lock's loss callback (``get_lock(on_lost=...)``): ``on_lost(name, reason)``.
        self.on_lost: Callable[[str, LossReason], None] | None = None
        # The MultiLocks and RedLocks made over this lock, told of every loss (watch_by).
        self.watchers: weakref.WeakValueDictionary[int, LossWatcher] = weakref.WeakValueDictionary()

    def lease(self, field: str) -> int:
        """The lease (ms) of ``field``'s last acquire, else the watchdog's."""
        lease = self.leases.get(field)
        return self._lock.watchdog_ms() if lease is None else lease

    def left(self, field: str) -> int:
        """The lease (ms) that keeps ``field``'s earlier holds as they were, for a late grant
        given back: what is left of their explicit lease counted from when its acquire was
        sent (at least 1; Redis counts from a little later), else :meth:`lease` (the
        watchdog's holds, which it renews)."""
        end = self.expires.get(field)
        lease = self.lease(field)
        if end is None:
            return lease
        end += drift(lease / 1000)  # :meth:`acquired` kept the end less the drift
        return max(1, math.ceil((end - self._ex.monotonic()) * 1000))

    def cap(self, field: str, cap: float | None) -> None:
        """Remember ``field``'s ``max_hold`` for its watchdog registration (``None``: none)."""
        if cap is not None:
            self.caps[field] = cap
        elif self.caps:
            self.caps.pop(field, None)

    def acquired(self, field: str, lease: int, watchdog: bool, start: float) -> None:
        """``field`` acquired with a ``lease`` (ms) that started no earlier than ``start``
        (monotonic seconds): the watchdog renews it (``watchdog``), or it ends by itself."""
        lock = self._lock
        self.leases[field] = lease
        self.held_since.setdefault(field, start)
        self.lost.pop(field, None)
        if watchdog:
            self.expires.pop(field, None)
            cap = self.caps.get(field) if self.caps else None
            self._ex.watchdog.register(
                lock.name,
                field,
                self.watchdog_lost,
                kind=lock.renewal,
                since=start,
                until=None if cap is None else start + cap - drift(cap),
                lease=lock.own_lease,
            )
        else:
            end = self.expires[field] = start + lease / 1000 - drift(lease / 1000)
            # never renewed: kept to be checked if its server loses data (watchdog docstring)
            self._ex.watchdog.register(
                lock.name, field, self.watchdog_lost, kind=lock.renewal, until=end, renew=False
            )

    def released(self, field: str, reply: Any) -> float | None:
        """A release of ``field`` replied (1 released, 0 still held, else not held): when its
        hold started, if it ended (for the hold-time metric)."""
        if reply == 0:
            return None
        self.leases.pop(field, None)  # released, or not held: forget this owner's lease
        return self.held_since.pop(field, None)

    def watchdog_lost(self, name: str, field: str, reason: LossReason) -> None:
        """Called by the watchdog (services thread) when ``field``'s hold is gone (a watchdog
        hold, or an explicit lease whose server lost it before its end)."""
        lock = self._lock
        self.lost[field] = reason
        self.held_since.pop(field, None)
        _observe.lost(lock.kind, reason)
        for listener in list(self.listeners.get(field, ())):
            listener(reason)
        for ref in self.watchers.valuerefs():  # a list, made in one step
            watcher = ref()
            if watcher is not None:
                watcher.sub_lost(self, field, reason)
        if self.on_lost is not None:
            self.on_lost(name, reason)

    def add_loss_listener(self, owner: int, listener: Callable[[LossReason], object]) -> None:
        """Call ``listener(reason)`` (on the services thread) if ``owner``'s hold is lost."""
        self.listeners.setdefault(self._lock.field(owner), []).append(listener)

    def watch_by(self, watcher: LossWatcher) -> None:
        """Tell ``watcher`` (a MultiLock or RedLock over this lock) of each loss, whoever's
        hold it was, for as long as the watcher lives (it is held weakly): the watcher
        finds the owner, so that a hold registers nothing."""
        self.watchers[id(watcher)] = watcher

    def remove_loss_listener(self, owner: int, listener: Callable[[LossReason], object]) -> None:
        """Undo :meth:`add_loss_listener`."""
        field = self._lock.field(owner)
        listeners = self.listeners.get(field, [])
        if listener in listeners:
            listeners.remove(listener)
        if not listeners:
            self.listeners.pop(field, None)

    def lease_end(self, owner: int) -> float | None:
        """When ``owner``'s explicit lease ends (monotonic seconds); ``None`` for the watchdog."""
        return self.expires.get(self._lock.field(owner))

    def lost_reason(self, owner: int) -> LossReason | None:
        """Why ``owner``'s hold is known to be lost, or ``None`` (no Redis call is made)."""
        return self.field_lost(self._lock.field(owner))

    def field_lost(self, field: str) -> LossReason | None:
        """:meth:`lost_reason` of the owner whose field is ``field``."""
        reason = self.lost.get(field)
        if reason is not None:
            return reason
        ex = self._ex
        now = ex.monotonic()
        end = self.expires.get(field)
        if end is not None and now >= end:
            return LossReason.LEASE_EXPIRED
        renewed_until = ex.watchdog.lease_end(self._lock.name, field)
        if renewed_until is not None and now >= renewed_until:
            return LossReason.RENEWAL_FAILED
        return None
