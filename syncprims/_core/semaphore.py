"""Semaphores (Redisson ``RedissonSemaphore`` and ``RedissonPermitExpirableSemaphore``;
redisson-spec.md 9 and 10).

``Semaphore``: a string counter of available permits at the name. ``PermitExpirableSemaphore``:
the same counter plus a sorted set ``{name}:timeout`` of the permits taken (id -> lease
expiry). Both publish the new count on ``redisson_sc:{name}``. Their calls, the Redisson 4.x
ones, the clocks and the decisions (TTLs kept, counts, lists of ids, what is never re-sent):
``docs/semaphores.md``.
"""

from __future__ import annotations

import logging
import math
import secrets
from collections.abc import Sequence
from typing import Any

from syncprims._core.info import NEVER_MS, semaphore_info
from syncprims._core.objects import ExpirableCore
from syncprims._core.retry import releasing
from syncprims._core.waiting import WaitPlan, acquire_loop, waiters
from syncprims._protocol import scripts
from syncprims._protocol.contracts import Executor, ScriptCall, Wakeable
from syncprims._protocol.ids import new_request_id
from syncprims._protocol.info import SemaphoreInfo
from syncprims._protocol.kinds import KINDS
from syncprims._protocol.names import prefix_name, suffix_name, unlock_key_name
from syncprims._protocol.statistics import SemaphoreStatistics
from syncprims._protocol.timing import lease_ms, threading_wait, wait_seconds
from syncprims._protocol.values import MAX_COUNT, check_count, parse_permit_id
from syncprims.errors import PermitNotHeldError, SyncPrimsError

__all__ = [
    "MAX_PERMITS_PER_CALL",
    "PermitExpirableSemaphoreCore",
    "SemaphoreCore",
    "semaphore_policy",
]

log = logging.getLogger("syncprims.semaphore")


def semaphore_policy(waiters: Wakeable, message: bytes) -> None:
    """The wake-up rule of semaphore channels: the message is the number of permits now
    available (redisson-spec.md 1.6); it wakes up to that many local waiters. A zero or
    negative count (after ``add_permits`` of a negative number) wakes nobody (Redisson would
    fail on it)."""
    try:
        available = int(message)
    except ValueError:
        return
    if available > 0:
        waiters.wake(available)


SERVER_TIME_RECHECK_MS = 50
"""With ``server_time``, the least wait (ms) before a waiter looks again for a lease to end:
the end is on the server's clock, the wait on this client's (skewed, it cannot spin)."""

MAX_PERMITS_PER_CALL = 1000
"""The most permit ids one call of a permit-expirable semaphore acquires or releases (the
release script unpacks the ids, and Lua's stack holds about 8000 values)."""


def _acquiring(many: bool) -> str:
    return "acquiring permits of" if many else "acquiring a permit of"


def _check_many(permits: object) -> int:
    """A multi-permit count: an ``int`` from 0 to ``MAX_PERMITS_PER_CALL``."""
    count = check_count(permits, "permits")
    if count > MAX_PERMITS_PER_CALL:
        raise ValueError(f"permits must be at most {MAX_PERMITS_PER_CALL} per call, got {count}")
    return count


def _parse_permit_ids(permit_ids: object) -> list[bytes]:
    """A list (or tuple, any sequence but a string) of permit ids to their raw bytes.

    Raises:
        TypeError: not a sequence of ``str``.
        ValueError: empty, too long, with duplicates, or an id that is not 32 hex characters.
    """
    if isinstance(permit_ids, (str, bytes, bytearray)) or not isinstance(permit_ids, Sequence):
        raise TypeError(f"permit_ids must be a list of permit ids, not {type(permit_ids).__name__}")
    if not permit_ids:
        raise ValueError("permit_ids must not be empty")
    if len(permit_ids) > MAX_PERMITS_PER_CALL:
        raise ValueError(
            f"permit_ids must hold at most {MAX_PERMITS_PER_CALL} ids, got {len(permit_ids)}"
        )
    ids = [parse_permit_id(permit_id) for permit_id in permit_ids]
    if len(set(ids)) != len(ids):
        raise ValueError("permit_ids must not repeat an id")
    return ids


class SemaphoreCore(ExpirableCore):
    """A counting semaphore."""

    KIND = KINDS["semaphore"]

    def __init__(self, executor: Executor, name: str) -> None:
        super().__init__(executor, name)
        self.channel = prefix_name("redisson_sc", self.name)

    async def _set(self, op: str, permits: int) -> Any:
        return await self.run_script(
            ScriptCall(scripts.SEM_SET, [self.name, self.channel], [op, permits, self.publish]),
            action="setting the permits of",
        )

    async def try_set_permits(self, permits: object, ttl: object = None) -> bool:
        """Set the permits (and, with ``ttl`` seconds, a time to live, in the same script) if
        the semaphore does not exist yet; ``True`` if it was set.

        Raises:
            TypeError, ValueError: a bad count or ``ttl`` (nothing is sent).
        """
        count = check_count(permits, "permits")
        if ttl is None:
            return bool(await self._set("try_set", count) == 1)
        ms = lease_ms(ttl, "ttl")
        reply = await self.run_script(
            ScriptCall(
                scripts.SEM_TRY_SET_TTL, [self.name, self.channel], [count, self.publish, ms]
            ),
            action="setting the permits of",
        )
        return bool(reply == 1)

    async def add_permits(self, permits: object) -> int:
        """Add permits (a negative number removes them); returns the new count."""
        count = check_count(permits, "permits", minimum=-MAX_COUNT)
        return int(await self._set("add", count))

    async def drain_permits(self) -> int:
        """Take every available permit; returns how many there were."""
        return int(await self._set("drain", 0))

    async def available_permits(self) -> int:
        """The permits available now (0 when the semaphore does not exist)."""
        value = await self.read("GET", self.name, action="reading")
        return 0 if value is None else int(value)

    async def _attempt(self, permits: int) -> int | None:
        reply = await self.run_script(
            ScriptCall(scripts.SEM_ACQUIRE, [self.name], [permits]),
            action="acquiring",
            idempotent=False,
            on_orphan=lambda late: self._give_back(permits, late),
        )
        return None if reply == 1 else -1

    async def _give_back(self, permits: int, late_reply: Any) -> None:
        if late_reply == 1:  # an abandoned acquire did take them
            await self._release(permits)

    async def try_acquire(self, permits: object, wait_time: object) -> bool:
        """Take ``permits`` within ``wait_time`` seconds (``None``/0: one attempt).

        Raises:
            TypeError, ValueError: a bad count or duration (nothing is sent).
        """
        count = check_count(permits, "permits")
        wait = wait_seconds(wait_time)
        if count == 0:
            return True
        self._ex.refuse_if_closing(self.context("acquiring"))
        plan = WaitPlan(wait, self.channel, semaphore_policy, self.name)
        return await acquire_loop(self._ex, lambda: self._attempt(count), plan)

    async def acquire(self, permits: object, blocking: object, timeout: object) -> bool:
        """Take ``permits`` with the ``threading.Semaphore.acquire(blocking, timeout)``
        protocol (-1: no limit).

        Raises:
            TypeError, ValueError: a bad count or duration (nothing is sent).
        """
        return await self.try_acquire(permits, threading_wait(blocking, timeout, permits=True))

    async def _release(self, permits: int) -> None:
        # INCRBY is not idempotent: never re-send a release that may have run (its reply
        # lost), or the permits come back twice and N + 1 holders get in (issue 17).
        call = ScriptCall(scripts.SEM_RELEASE, [self.name, self.channel], [permits, self.publish])
        await releasing(self._ex, self.run_script(call, action="releasing", idempotent=False))

    async def release(self, permits: object) -> None:
        """Give ``permits`` back (to whoever waits); 0 does nothing."""
        count = check_count(permits, "permits")
        if count:
            await self._release(count)

    async def release_if_exists(self, permits: object) -> bool:
        """Give ``permits`` back only if the semaphore exists (nothing is created); ``False``
        when it does not, or for 0 permits (no Redis call), as Redisson.

        Raises:
            TypeError, ValueError: a bad count (nothing is sent).
        """
        count = check_count(permits, "permits")
        if count == 0:
            return False
        # Not re-sent after a lost reply: INCRBY twice would give back twice (as _release).
        reply = await self.run_script(
            ScriptCall(
                scripts.SEM_RELEASE_IF_EXISTS, [self.name, self.channel], [count, self.publish]
            ),
            action="releasing",
            idempotent=False,
        )
        return bool(reply == 1)

    async def statistics(self) -> SemaphoreStatistics:
        """A snapshot: available permits and this client's waiters."""
        return SemaphoreStatistics(
            name=self.name,
            available_permits=await self.available_permits(),
            acquired_permits=None,
            waiters=waiters(self._ex, self.name),
        )

    async def info(self) -> SemaphoreInfo:
        """What the semaphore keeps in Redis (``syncprims._core.info``)."""
        return await semaphore_info(self, expirable=False)


class PermitExpirableSemaphoreCore(ExpirableCore):
    """A semaphore whose permits are leased and identified."""

    KIND = KINDS["pes"]

    def __init__(self, executor: Executor, name: str, *, server_time: bool = False) -> None:
        super().__init__(executor, name)
        if not isinstance(server_time, bool):
            raise TypeError(f"server_time must be a bool, not {type(server_time).__name__}")
        self.channel = prefix_name("redisson_sc", self.name)
        self.timeouts = suffix_name(self.name, "timeout")
        self.server_time = server_time

    def _now(self) -> int | str:
        """The time the scripts reclaim leases by: the client's wall clock in epoch ms
        (Redisson's), or ``"T0"``, the server's clock (``pes_clock.lua``)."""
        return "T0" if self.server_time else self._ex.wall_ms()

    def keys(self) -> list[str]:
        """The counter and the lease set."""
        return [self.name, self.timeouts]

    async def _admin(self, op: str, value: int | str = 0, permit: bytes = b"") -> Any:
        return await self.run_script(
            ScriptCall(
                scripts.PES_ADMIN,
                [self.name, self.timeouts, self.channel],
                [op, self._now(), self.publish, value, permit],
            ),
            action="updating",
        )

    async def available_permits(self) -> int:
        """Permits available now, after expired leases were given back."""
        return int(await self._admin("available"))

    async def acquired_permits(self) -> int:
        """Permits leased now (expired leases are given back first)."""
        return int(await self._admin("acquired"))

    async def try_set_permits(self, permits: object) -> bool:
        """Set the permits if the semaphore does not exist yet; ``True`` if it was set."""
        return bool(await self._admin("try_set", check_count(permits, "permits")) == 1)

    async def set_permits(self, permits: object) -> None:
        """Set the total capacity (available + leased) to ``permits``."""
        await self._admin("set", check_count(permits, "permits"))

    def _expiry(self, lease_time: object) -> int | str:
        if lease_time is None:
            return NEVER_MS
        if self.server_time:
            return f"T{lease_ms(lease_time)}"
        return self._ex.wall_ms() + lease_ms(lease_time)

    async def _attempt(self, permits: list[bytes], lease_time: object, *, many: bool) -> int | None:
        """One attempt to lease ``permits`` (all or none): Redisson's single-permit script, or
        with ``many`` its multi-permit one. ``None`` when leased, else how long to wait."""
        ex = self._ex
        expiry = self._expiry(lease_time)
        now = self._now()
        sent = ex.monotonic()
        keys = [self.name, self.timeouts, self.channel]
        if many:
            call = ScriptCall(
                scripts.PES_ACQUIRE_MANY,
                keys,
                [len(permits), expiry, now, NEVER_MS, self.publish, *permits],
            )
        else:
            call = ScriptCall(
                scripts.PES_ACQUIRE, keys, [permits[0], expiry, now, NEVER_MS, self.publish]
            )
        action = _acquiring(many)
        reply = await self.run_script(
            call,
            action=action,
            idempotent=False,
            on_orphan=lambda late: self._give_back(permits, late, many=many),
        )
        if reply == 1:
            lease = None if lease_time is None else lease_ms(lease_time) / 1000
            took = ex.monotonic() - sent
            if lease is None or took < lease:  # as the RLock's grant (LockCore.attempt)
                return None
            # The grant's reply came after the lease (the process was paused, or the network
            # held the reply): other callers may have reclaimed
            # the permits. Give them back (if another caller reclaimed one, the all-or-nothing
            # release does nothing, and the rest are reclaimed by the next script: their lease
            # is over) and try again.
            log.warning(
                "%s: the permit(s) came %.3f s after they were asked for, past their %.3f s "
                "lease: not taken",
                self.context(action),
                took,
                lease,
            )
            try:
                await self._give_back(permits, reply, many=many)
            except SyncPrimsError as error:  # their lease bounds them
                log.debug("%s: giving back late permits failed: %r", self.name, error)
            return 0
        if not reply:
            return -1
        if self.server_time:  # the earliest lease's end on the server's clock: a hint only
            return max(SERVER_TIME_RECHECK_MS, int(reply) - ex.wall_ms())
        return max(1, int(reply) - int(now))

    async def _give_back(self, permits: list[bytes], late_reply: Any, *, many: bool) -> None:
        """Release what an attempt leased (``late_reply`` 1: its late reply, whose caller
        went away, or its reply past the lease)."""
        if late_reply == 1:
            await (self._release_many(permits) if many else self._release(permits[0]))

    async def try_acquire(self, wait_time: object, lease_time: object) -> str | None:
        """Lease one permit within ``wait_time`` seconds; its id, or ``None``.

        Args:
            wait_time: ``None``/0 for one attempt; ``math.inf`` to wait forever.
            lease_time: seconds until the permit comes back by itself; ``None``: never.

        Raises:
            TypeError, ValueError: bad durations (nothing is sent).
        """
        ids = await self._lease(1, wait_time, lease_time, many=False)
        return None if ids is None else ids[0]

    async def acquire(self, blocking: object, timeout: object, lease_time: object) -> str | None:
        """Lease one permit with the ``threading.Semaphore.acquire(blocking, timeout)``
        protocol; its id, or ``None``."""
        return await self.try_acquire(threading_wait(blocking, timeout, permits=True), lease_time)

    async def try_acquire_many(
        self, permits: object, wait_time: object, lease_time: object
    ) -> list[str] | None:
        """Lease ``permits`` permits at once (all or none) within ``wait_time`` seconds;
        their ids, or ``None``. 0 permits: ``[]`` without Redis.

        Raises:
            TypeError, ValueError: a bad count or duration (nothing is sent).
        """
        return await self._lease(_check_many(permits), wait_time, lease_time, many=True)

    async def _lease(
        self, count: int, wait_time: object, lease_time: object, *, many: bool
    ) -> list[str] | None:
        """Lease ``count`` new permits (all or none; ``many``: as :meth:`_attempt`); their
        ids, or ``None``."""
        wait = wait_seconds(wait_time)
        if lease_time is not None:
            lease_ms(lease_time)  # validate before anything is sent
        if count == 0:
            return []
        self._ex.refuse_if_closing(self.context(_acquiring(many)))
        ids = [secrets.token_bytes(16) for _ in range(count)]
        plan = WaitPlan(wait, self.channel, semaphore_policy, self.name)
        acquired = await acquire_loop(
            self._ex, lambda: self._attempt(ids, lease_time, many=many), plan
        )
        return [permit.hex() for permit in ids] if acquired else None

    async def acquire_many(self, permits: object, lease_time: object) -> list[str]:
        """Lease ``permits`` permits at once, waiting as long as it takes; their ids."""
        ids = await self.try_acquire_many(permits, math.inf, lease_time)
        assert ids is not None  # an unbounded wait ends only when acquired
        return ids

    async def _release_many(self, permits: list[bytes]) -> int:
        unlock_key, ttl = self._unlock_key()
        call = ScriptCall(
            scripts.PES_RELEASE_MANY,
            [self.name, self.channel, self.timeouts, unlock_key],
            [len(permits), self._now(), self.publish, ttl, *permits],
        )
        return int(await self._released(call, unlock_key, "releasing permits of"))

    async def _release(self, permit: bytes) -> Any:
        unlock_key, ttl = self._unlock_key()
        call = ScriptCall(
            scripts.PES_RELEASE,
            [self.name, self.timeouts, self.channel, unlock_key],
            [permit, self._now(), self.publish, ttl],
        )
        return await self._released(call, unlock_key, "releasing a permit of")

    def _unlock_key(self) -> tuple[str, int]:
        """A release's unlock key and its TTL (ms): a retry of the release, after a lost
        reply, answers as the first copy did instead of saying the permit was not held."""
        return unlock_key_name(self.name, new_request_id()), self._ex.bounds.unlock_key_ttl_ms

    async def _released(self, call: ScriptCall, unlock_key: str, action: str) -> Any:
        """Run a release ``call`` (retried, idempotent by its ``unlock_key``); the unlock key goes
        once answered (a copy run again later finds its permits gone and changes nothing)."""
        try:
            return await releasing(self._ex, self.run_script(call, action=action))
        finally:
            self._ex.janitor.discard(unlock_key)

    async def try_release(self, permit_id: object) -> bool:
        """Give a permit back (a ``str`` id), or several at once (a list of ids: all or
        none); ``False`` when an id is unknown, released or expired (a list: nothing is
        released then).

        Raises:
            TypeError, ValueError: not a permit id or a list of them: empty, with
                duplicates, or longer than ``MAX_PERMITS_PER_CALL`` (nothing is sent).
        """
        if isinstance(permit_id, str) or not isinstance(permit_id, Sequence):
            return bool(await self._release(parse_permit_id(permit_id)) == 1)
        permits = _parse_permit_ids(permit_id)
        return await self._release_many(permits) == len(permits)

    async def release(self, permit_id: object) -> None:
        """Give a permit back, or several (all or none), as ``try_release``.

        Raises:
            PermitNotHeldError: an id is unknown, already released, or its lease ran out
                (a list: nothing was released; ``permit_id`` lists the ids, comma-separated).
        """
        if not await self.try_release(permit_id):
            if isinstance(permit_id, str) or not isinstance(permit_id, Sequence):
                raise self._not_held(f"permit {permit_id} of", str(permit_id))
            shown = ", ".join(str(one) for one in permit_id)
            raise self._not_held(f"one of the permits {shown} (none was released) of", shown)

    def _not_held(self, what: str, shown: str) -> PermitNotHeldError:
        return PermitNotHeldError(
            f"{what} {self.kind} {self.name!r} is unknown, already released, or its lease ran out",
            name=self.name,
            permit_id=shown,
        )

    async def get_permits(self) -> int:
        """All permits, available and leased (0 when the counter does not exist), after
        expired leases were given back."""
        reply = await self.run_script(
            ScriptCall(
                scripts.PES_GET_PERMITS,
                [self.name, self.timeouts, self.channel],
                [self._now(), self.publish],
            ),
            action="counting the permits of",
        )
        return int(reply)

    async def add_permits(self, permits: object) -> int:
        """Add available permits (a negative number removes them); the new count.

        Raises:
            TypeError, ValueError: a bad count (nothing is sent).
        """
        count = check_count(permits, "permits", minimum=-MAX_COUNT)
        # Not re-sent after a lost reply (it adds; Redisson's is): see _release of Semaphore.
        reply = await self.run_script(
            ScriptCall(scripts.PES_ADD_PERMITS, [self.name, self.channel], [count, self.publish]),
            action="adding permits to",
            idempotent=False,
        )
        return int(reply)

    async def get_lease_time(self, permit_id: object) -> float | None:
        """A leased permit's lease left, seconds; ``None`` when it never expires.

        Raises:
            PermitNotHeldError: the id is unknown, already released, or its lease ran out.
            TypeError, ValueError: not a permit id (nothing is sent).
        """
        permit = parse_permit_id(permit_id)
        reply = await self.run_script(
            ScriptCall(
                scripts.PES_LEASE_TIME,
                [self.name, self.timeouts, self.channel],
                [permit, NEVER_MS, self._now(), self.publish],
            ),
            action="reading a lease of",
        )
        ms = int(reply)
        if ms == 0:
            raise self._not_held(f"permit {permit_id} of", str(permit_id))
        return None if ms < 0 else ms / 1000

    async def update_lease_time(self, permit_id: object, lease_time: object) -> bool:
        """Give a leased permit a new lease (``None``: never expires); ``False`` if unknown."""
        permit = parse_permit_id(permit_id)
        return bool(await self._admin("update", self._expiry(lease_time), permit) == 1)

    async def statistics(self) -> SemaphoreStatistics:
        """A snapshot: available and acquired permits, and this client's waiters."""
        return SemaphoreStatistics(
            name=self.name,
            available_permits=await self.available_permits(),
            acquired_permits=await self.acquired_permits(),
            waiters=waiters(self._ex, self.name),
        )

    async def info(self) -> SemaphoreInfo:
        """What the semaphore keeps in Redis, with each lease (``syncprims._core.info``)."""
        return await semaphore_info(self, expirable=True)
