"""RLock: the reentrant, non-fair lock (Redisson ``RedissonLock``; redisson-spec.md 2 and 3).

Layout (interoperable with Redisson): a hash at the lock's name with one field
``<client uuid>:<owner id>`` whose value is the hold count, with a TTL equal to the lease.
Unlock publishes ``0`` on ``redisson_lock__channel:{name}``. One script call to acquire and
one to release when uncontended.

Decisions (see also ``docs/locks.md``):

* ``lease_time=None`` means the watchdog: the lease is ``lock_watchdog_timeout`` and it is
  renewed every third of it until the last unlock. An explicit lease is never renewed.
* The TTL re-armed by an unlock that leaves holds is the lease of this owner's last acquire
  (Redisson keeps it per lock *object*, so two threads sharing one object disturbed each
  other: redisson-spec.md 13 item 9).
* Acquire scripts are never re-sent after they may have run (a lost reply must not count a
  hold twice). Unlock carries a request id and is retried; a retry returns the first run's
  result (Redisson 3.24+ unlock latch).
* An acquire abandoned by a cancelled or timed-out asyncio caller whose reply says
  "acquired" is released in the background.
* The watchdog registration is made before the acquire returns and dropped at the start of
  unlock, whatever the unlock's outcome.
"""

from __future__ import annotations

import math
from typing import Any

from syncprims._core.executor import Executor
from syncprims._core.objects import ExpirableCore
from syncprims._core.retry import with_retry
from syncprims._core.waiting import acquire_loop
from syncprims._protocol import scripts
from syncprims._protocol.ids import new_request_id, owner_field
from syncprims._protocol.names import lock_channel, unlock_latch_key
from syncprims._protocol.timing import lease_ms, to_seconds, wait_seconds
from syncprims._services.pubsub import lock_policy
from syncprims.errors import LockNotHeldError

__all__ = ["LockCore"]

UNLOCK_MESSAGE = "0"


class LockCore(ExpirableCore):
    """The RLock algorithms, for any owner id chosen by a face."""

    kind = "lock"

    def __init__(self, executor: Executor, name: str) -> None:
        super().__init__(executor, name)
        self.channel = lock_channel(self.name)
        # owner field -> lease (ms) of that owner's last acquire, re-armed by a partial unlock
        self._leases: dict[str, int] = {}

    def field(self, owner: int) -> str:
        """The hash field that names ``owner`` of this client."""
        return owner_field(self._ex.client_id, owner)

    def _lease(self, lease_time: object) -> tuple[int, bool]:
        """(lease ms, watchdog?) for a ``lease_time`` argument."""
        if lease_time is None:
            return round(self._ex.config.lock_watchdog_timeout * 1000), True
        return lease_ms(lease_time), False

    # -- acquire ------------------------------------------------------------------------------

    async def attempt(self, field: str, lease: int, watchdog: bool) -> int | None:
        """One run of the acquire script; ``None`` when acquired, else the holder's TTL (ms)."""
        ex = self._ex
        reply = await with_retry(
            ex,
            lambda: ex.eval(
                scripts.LOCK_ACQUIRE,
                [self.name],
                [lease, field],
                context=self.context("acquiring"),
                on_orphan=lambda late: self._release_orphan(field, late),
            ),
            idempotent=False,
        )
        if reply is None:
            self.acquired(field, lease, watchdog)
            return None
        return int(reply)

    def acquired(self, field: str, lease: int, watchdog: bool) -> None:
        """Book-keeping after a successful acquire: lease memory and watchdog registration."""
        self._leases[field] = lease
        if watchdog:
            self._ex.watchdog.register(self.name, field)

    async def _release_orphan(self, field: str, late_reply: Any) -> None:
        if late_reply is None:  # the abandoned attempt did acquire: give it back
            await self._unlock_field(field, self._leases.get(field, self._watchdog_ms()))

    async def try_lock(self, owner: int, wait_time: object, lease_time: object) -> bool:
        """Acquire within ``wait_time`` seconds (``None``/0: one attempt; ``math.inf``: forever).

        Raises:
            TypeError, ValueError: bad durations (nothing is sent).
            TransportError: Redis failed; an acquire that may have run is not retried.
        """
        wait = wait_seconds(wait_time)
        lease, watchdog = self._lease(lease_time)
        field = self.field(owner)
        return await acquire_loop(
            self._ex,
            lambda: self.attempt(field, lease, watchdog),
            channel=self.channel,
            policy=lock_policy,
            wait=wait,
        )

    async def lock(self, owner: int, lease_time: object) -> None:
        """Acquire, waiting as long as it takes. Raises as :meth:`try_lock`."""
        await self.try_lock(owner, math.inf, lease_time)

    async def acquire(self, owner: int, blocking: object, timeout: object) -> bool:
        """The ``threading.Lock.acquire(blocking, timeout)`` protocol.

        Raises:
            ValueError: a timeout with ``blocking=False``, or a negative timeout other than -1.
        """
        if not isinstance(blocking, bool):
            raise TypeError(f"blocking must be a bool, not {type(blocking).__name__}")
        if timeout == -1 or timeout is None:
            wait = math.inf if blocking else 0.0
        else:
            if not blocking:
                raise ValueError("can't specify a timeout for a non-blocking call")
            wait = to_seconds(timeout, "timeout")
        return await self.try_lock(owner, wait, None)

    # -- release ------------------------------------------------------------------------------

    def _watchdog_ms(self) -> int:
        return round(self._ex.config.lock_watchdog_timeout * 1000)

    async def _unlock_field(self, field: str, lease: int) -> Any:
        ex = self._ex
        latch = unlock_latch_key(self.name, new_request_id())
        keys = [self.name, self.channel, latch]
        args: list[str | int] = [
            UNLOCK_MESSAGE,
            lease,
            field,
            ex.publish_command,
            ex.config.unlock_latch_ttl_ms,
        ]
        context = self.context("releasing")
        reply = await with_retry(
            ex,
            lambda: ex.eval(scripts.LOCK_UNLOCK, keys, args, context=context),
            idempotent=True,
        )
        ex.janitor.discard(latch)
        if reply != 0:  # released (1) or not held (nil): forget this owner's lease
            self._leases.pop(field, None)
        return reply

    async def unlock(self, owner: int) -> None:
        """Release one hold of ``owner``.

        Raises:
            LockNotHeldError: ``owner`` does not hold the lock (never did, or it expired).
            TransportError: Redis failed (after retries); the lock expires by its lease.
        """
        field = self.field(owner)
        self._ex.watchdog.cancel(self.name, field)
        reply = await self._unlock_field(field, self._leases.get(field, self._watchdog_ms()))
        if reply is None:
            raise LockNotHeldError(
                f"lock {self.name!r} is not held by owner {owner} of client {self._ex.client_id}",
                name=self.name,
                owner=field,
            )

    async def force_unlock(self) -> bool:
        """Delete the lock whoever holds it and wake waiters; ``True`` if it was held."""
        self._ex.watchdog.cancel_all(self.name)
        reply = await self.run_script(
            scripts.LOCK_FORCE_UNLOCK,
            [self.name, self.channel],
            [UNLOCK_MESSAGE, self._ex.publish_command],
            action="force-unlocking",
        )
        return bool(reply == 1)

    async def delete(self) -> bool:
        """A lock's ``delete`` is :meth:`force_unlock` (Redisson)."""
        return await self.force_unlock()

    # -- queries ------------------------------------------------------------------------------

    async def is_locked(self) -> bool:
        """Whether anyone holds the lock."""
        return await self.is_exists()

    async def is_held_by(self, owner: int) -> bool:
        """Whether ``owner`` of this client holds the lock."""
        return bool(await self.read("HEXISTS", self.name, self.field(owner), action="checking"))

    async def get_hold_count(self, owner: int) -> int:
        """How many holds ``owner`` of this client has (0 when none)."""
        count = await self.read("HGET", self.name, self.field(owner), action="reading")
        return 0 if count is None else int(count)
