"""Batched, fire-and-forget deletion of short-lived keys (the unlock idempotency latches):
one ``UNLINK`` per batch from the services loop, where Redisson sends one per unlock
(docs/design.md, "Late calls: fields, incarnations and taint", Releases).

A batch goes 50 ms after its first key; once a batch held ``BUSY_KEYS`` keys or more (400
unlocks a second and up), the next one waits a second instead: each flush wakes the services
thread (and, in the sync face, a worker thread for the blocking ``UNLINK``), which fight the
callers' threads for the GIL (docs/measurements.md, "Profile: the RedLock fan-out and the
janitor").
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable, Sequence

from syncprims._services.loop import Scheduler
from syncprims._services.record import CommandRunner

__all__ = ["Janitor"]

log = logging.getLogger("syncprims.services")

FLUSH_DELAY = 0.05
BUSY_FLUSH_DELAY = 1.0
BUSY_KEYS = 20
BATCH = 1000


class Janitor:
    """Collects keys to delete and deletes them in batches."""

    def __init__(
        self,
        services: Scheduler,
        runner: CommandRunner,
        slot_of: Callable[[str], int] | None = None,
    ) -> None:
        self._services = services
        self._runner = runner
        self._slot_of = slot_of or (lambda key: 0)
        self.forget()

    def forget(self) -> None:
        """The state a new janitor starts with; after ``os.fork()``, in the child."""
        self._mutex = threading.Lock()
        self._keys: list[str] = []
        self._scheduled = False
        self._delay = FLUSH_DELAY  # loop-only: set by the last flush

    def discard(self, key: str) -> None:
        """Delete ``key`` soon, in the background. Never blocks."""
        with self._mutex:
            self._keys.append(key)
            if self._scheduled:
                return
            self._scheduled = True
        self._services.call_soon(self._schedule)

    def _schedule(self) -> None:
        asyncio.get_running_loop().call_later(self._delay, self._flush)

    def _flush(self) -> None:
        keys = self.take()
        self._delay = BUSY_FLUSH_DELAY if len(keys) >= BUSY_KEYS else FLUSH_DELAY
        for group in self.groups(keys):
            self._services.spawn(self._unlink(group))

    def take(self) -> list[str]:
        """The keys not yet deleted, taken from the janitor (any thread)."""
        with self._mutex:
            keys, self._keys = self._keys, []
            self._scheduled = False
        return keys

    def pending(self) -> bool:
        """Whether keys are waiting to be deleted (read without the mutex: a hint)."""
        return bool(self._keys)

    def groups(self, keys: Sequence[str]) -> list[list[str]]:
        """``keys`` in groups of at most ``BATCH`` of one slot each (a cluster command
        touches one slot only)."""
        by_slot: dict[int, list[str]] = {}
        for key in keys:
            by_slot.setdefault(self._slot_of(key), []).append(key)
        return [
            group[start : start + BATCH]
            for group in by_slot.values()
            for start in range(0, len(group), BATCH)
        ]

    async def _unlink(self, keys: Sequence[str]) -> None:
        try:
            await self._runner.command(
                "UNLINK", *keys, context="deleting unlock latch keys", route=keys[0]
            )
        except Exception as error:  # they expire by their TTL anyway
            log.debug("janitor: UNLINK of %d keys failed: %s", len(keys), error)
