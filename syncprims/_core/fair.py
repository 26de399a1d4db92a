"""FairLock: a FIFO lock (Redisson ``RedissonFairLock``; redisson-spec.md 4).

Layout (interoperable with Redisson): the RLock hash at the lock's name; a wait queue
``redisson_lock_queue:{name}`` (list of owner fields, head first) and the waiters' deadlines
``redisson_lock_timeout:{name}`` (zset, epoch ms). Each waiter listens on its own channel
``redisson_lock__channel:{name}:<owner field>``; a release notifies only the head of the
queue. Every script first drops the stale waiters at the head (deadline passed), so a waiter
that died without leaving delays the queue by at most its slot.

Decisions (Redisson quirks, redisson-spec.md 13, decided on purpose):

* The wait slot is the caller's ``wait_time`` converted to milliseconds when it is finite and
  positive, else ``Config.fair_lock_wait_timeout`` (Java passes seconds as milliseconds when
  ``tryLock(wait, unit)`` has no lease).
* "The lock is free but another waiter is first in line" answers 0; the waiter retries after
  a short back-off (5 ms doubling to 100 ms) instead of spinning.
* ``unlock()`` of a fair lock that does not exist notifies the head waiter (the lock is free)
  but raises ``LockNotHeldError``, like an RLock and ``threading.Lock`` (Redisson returns
  success there).
* A waiter that stops waiting (timeout, cancellation, interrupt) leaves the queue, and the
  deadlines behind it move earlier by one slot. An asyncio acquire abandoned while its first
  attempt was in flight is undone in the background: released if it acquired, dequeued if it
  enqueued.
* ``delete()`` removes the three keys without notifying anyone (Redisson); ``force_unlock()``
  deletes the hash and notifies the head waiter.
* Deadlines are computed from the client's wall clock (``now`` is passed to every script, as
  in Redisson): keep clients' clocks roughly in sync.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable
from typing import Any

from syncprims._core.lock import UNLOCK_MESSAGE, LockCore
from syncprims._protocol import scripts
from syncprims._protocol.contracts import Executor, ScriptCall
from syncprims._protocol.names import prefix_name
from syncprims._protocol.timing import MAX_LEASE_SECONDS

__all__ = ["FairLockCore"]


class FairLockCore(LockCore):
    """The FairLock algorithms."""

    kind = "fair lock"
    one_wake = False  # scripts of its own

    def __init__(self, executor: Executor, name: str) -> None:
        super().__init__(executor, name)
        self.queue = prefix_name("redisson_lock_queue", self.name)
        self.timeouts = prefix_name("redisson_lock_timeout", self.name)

    def keys(self) -> list[str]:
        """The hash, the wait queue and the deadline set."""
        return [self.name, self.queue, self.timeouts]

    def slot_ms(self, wait: float) -> int:
        """A waiter's slot: its wait time in ms, or ``fair_lock_wait_timeout``."""
        if 0 < wait < math.inf:
            return max(1, math.ceil(min(wait, MAX_LEASE_SECONDS) * 1000))
        return math.ceil(self._ex.config.fair_lock_wait_timeout * 1000)

    def acquire_command(self, field: str, lease: int, wait: float) -> ScriptCall:
        enqueue = "1" if wait > 0 else "0"
        return ScriptCall(
            scripts.FAIR_ACQUIRE,
            [self.name, self.queue, self.timeouts],
            [lease, field, self.slot_ms(wait), self._ex.wall_ms(), enqueue],
        )

    def wait_channel(self, field: str) -> str:
        return f"{self.channel}:{field}"

    def give_up(self, field: str, wait: float) -> Callable[[], Awaitable[None]] | None:
        if wait <= 0:
            return None  # a single attempt never enqueues
        return lambda: self._leave_queue(field, wait)

    async def _leave_queue(self, field: str, wait: float) -> None:
        await self.run_script(
            ScriptCall(
                scripts.FAIR_GIVE_UP, [self.queue, self.timeouts], [field, self.slot_ms(wait)]
            ),
            action="leaving the queue of",
        )

    async def on_abandoned_attempt(self, field: str, wait: float, late_reply: Any) -> None:
        if self.reply_ttl(late_reply) is None:
            await super().on_abandoned_attempt(field, wait, late_reply)
        elif wait > 0:
            await self._leave_queue(field, wait)

    def unlock_command(self, field: str, lease: int, latch: str) -> ScriptCall:
        ex = self._ex
        return ScriptCall(
            scripts.FAIR_UNLOCK,
            [self.name, self.queue, self.timeouts, self.channel, latch],
            [
                UNLOCK_MESSAGE,
                lease,
                field,
                ex.wall_ms(),
                self.publish,
                ex.bounds.unlock_latch_ttl_ms,
            ],
        )

    def force_unlock_command(self) -> ScriptCall:
        return ScriptCall(
            scripts.FAIR_FORCE_UNLOCK,
            [self.name, self.queue, self.timeouts, self.channel],
            [UNLOCK_MESSAGE, self._ex.wall_ms(), self.publish],
        )

    async def delete(self) -> bool:
        """``DEL`` the hash, the queue and the deadlines (nobody is notified)."""
        self._ex.watchdog.cancel_all(self.name)
        return bool(await self.read("DEL", *self.keys(), action="deleting"))
