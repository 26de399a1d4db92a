"""FairLock: a FIFO lock (Redisson ``RedissonFairLock``; redisson-spec.md 4).

Layout (interoperable with Redisson): the RLock hash at the lock's name; a wait queue
``redisson_lock_queue:{name}`` (list of owner fields, head first) and the waiters' deadlines
``redisson_lock_timeout:{name}`` (zset, epoch ms); a channel per waiter,
``redisson_lock__channel:{name}:<owner field>``. Every script first drops the stale waiters
at the head. Its wait slots, decisions (redisson-spec.md 13) and one-hop grant (syncprims,
``syncprims_lock_waiters:{name}:fair``): ``docs/fair-lock.md`` and ``docs/grants.md``, "The
FairLock's one-hop grant". An abandoned asyncio attempt is undone in the background:
released if it acquired, dequeued if it enqueued.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable
from typing import Any

from syncprims._core.lock import (
    ONE_WAKE_ENTRY_MS,
    UNLOCK_MESSAGE,
    Grant,
    LockCore,
    Releases,
    ReplicaSync,
    lock_policy,
)
from syncprims._protocol import scripts
from syncprims._protocol.contracts import Arg, Executor, ScriptCall, WakePolicy
from syncprims._protocol.kinds import KINDS
from syncprims._protocol.names import fair_grant_registry_name, prefix_name
from syncprims._protocol.timing import MAX_LEASE_SECONDS

__all__ = ["FairGrant", "FairLockCore"]


class FairGrant(Grant):
    """The FairLock's one-hop grant: ``fair_unlock.lua`` grants the head of the queue; a
    wait listens on its owner's own channel."""

    __slots__ = ("_fair",)

    def __init__(
        self, lock: FairLockCore, one_wake: None, releases: Releases, replicas: ReplicaSync
    ) -> None:
        super().__init__(lock, one_wake, releases, replicas)
        self._fair = lock

    def give_back_command(self, field: str, unlock_key: str, member: str) -> ScriptCall:
        # always conditional on the marker (never a plain release of the owner's hold)
        fair = self._fair
        return fair.unlock_call(field, fair.watchdog_ms(), unlock_key, member, grants=True)

    async def unregister(self, member: str, wait: float) -> int:
        field = member.split("|", 3)[3]
        return int(await self._fair.leave_queue(field, wait, member))

    def wait_rule(self, field: str) -> tuple[str, WakePolicy]:
        return self._fair.wait_channel(field), lock_policy

    def wake_channel(self, member: str) -> str:
        return self._fair.wait_channel(member.split("|", 3)[3])


class FairLockCore(LockCore):
    """The FairLock algorithms."""

    KIND = KINDS["fair"]
    one_wake_part = None  # scripts of its own, which grant (FairGrant) but do not herald
    grant_part = FairGrant
    timed_attempt = True  # fair_acquire.lua drops the waiters whose deadline passed by it

    def __init__(self, executor: Executor, name: str) -> None:
        super().__init__(executor, name)
        self.queue = prefix_name("redisson_lock_queue", self.name)
        self.timeouts = prefix_name("redisson_lock_timeout", self.name)
        self.grants = fair_grant_registry_name(self.name)

    def uses_own_keys(self) -> bool:
        """Whether this client uses the one-hop grant's keys (``Config.lock_grant_handoff``,
        unless its ACL refused them)."""
        return self._ex.config.lock_grant_handoff and not self.client_state.own_keys_refused

    def keys(self) -> list[str]:
        """The hash, the wait queue and the deadline set."""
        return [self.name, self.queue, self.timeouts]

    def slot_ms(self, wait: float) -> int:
        """A waiter's slot: its wait time in ms, or ``fair_lock_wait_timeout``."""
        if 0 < wait < math.inf:
            return max(1, math.ceil(min(wait, MAX_LEASE_SECONDS) * 1000))
        return math.ceil(self._ex.config.fair_lock_wait_timeout * 1000)

    def acquire_command(self, field: str, lease: int, wait: float) -> ScriptCall:
        return self._acquire_call(field, lease, wait, member="", fresh="", register="0")

    def grant_acquire_command(
        self, field: str, lease: int, wait: float, *, waits: str, member: str, fresh: str
    ) -> ScriptCall:
        return self._acquire_call(field, lease, wait, member=member, fresh=fresh, register=waits)

    def _acquire_call(
        self, field: str, lease: int, wait: float, *, member: str, fresh: str, register: str
    ) -> ScriptCall:
        """``fair_acquire.lua``, with the grant registry when this client uses it (a waiter
        that does not register then drops any stale registration of its owner)."""
        keys = [self.name, self.queue, self.timeouts]
        args: list[Arg] = [
            lease,
            field,
            self.slot_ms(wait),
            self._ex.wall_ms(),
            "1" if wait > 0 else "0",
        ]
        if self.uses_own_keys():
            keys += [self.grants, self.grant_marker]
            args += [member, fresh, register, ONE_WAKE_ENTRY_MS]
        return ScriptCall(scripts.FAIR_ACQUIRE, keys, args)

    def wait_channel(self, field: str) -> str:
        return f"{self.channel}:{field}"

    def give_up(self, field: str, wait: float) -> Callable[[], Awaitable[None]] | None:
        if wait <= 0:
            return None  # a single attempt never enqueues
        return lambda: self.leave_queue(field, wait)

    async def leave_queue(self, field: str, wait: float, member: str = "") -> Any:
        """``fair_give_up.lua`` (and the owner's grant registration, when this client uses
        it: the reply is then 1 when it was ``member``, else 0)."""
        keys = [self.queue, self.timeouts]
        args: list[Arg] = [field, self.slot_ms(wait)]
        if self.uses_own_keys():
            keys.append(self.grants)
            args.append(member)
        return await self.run_script(
            ScriptCall(scripts.FAIR_GIVE_UP, keys, args), action="leaving the queue of"
        )

    async def on_abandoned_attempt(self, field: str, wait: float, late_reply: Any) -> None:
        if self.reply_ttl(late_reply) is None:
            await super().on_abandoned_attempt(field, wait, late_reply)
        elif wait > 0:
            await self.leave_queue(field, wait)

    def unlock_command(self, field: str, lease: int, unlock_key: str) -> ScriptCall:
        return self.unlock_call(field, lease, unlock_key, "", grants=self.uses_own_keys())

    def unlock_call(
        self, field: str, lease: int, unlock_key: str, give_back: str, *, grants: bool
    ) -> ScriptCall:
        """``fair_unlock.lua``; with ``grants``, the one that may grant the head waiter."""
        ex = self._ex
        keys = [self.name, self.queue, self.timeouts, self.channel, unlock_key]
        args: list[Arg] = [
            UNLOCK_MESSAGE,
            lease,
            field,
            ex.wall_ms(),
            self.publish,
            ex.bounds.unlock_key_ttl_ms,
        ]
        if grants:
            keys += [self.grants, self.grant_marker, self.handoff_prefix]
            args += [self.grant_prefix, give_back]
        return ScriptCall(scripts.FAIR_UNLOCK, keys, args)

    def force_unlock_command(self) -> ScriptCall:
        return ScriptCall(
            scripts.FAIR_FORCE_UNLOCK,
            [self.name, self.queue, self.timeouts, self.channel],
            [UNLOCK_MESSAGE, self._ex.wall_ms(), self.publish],
        )

    async def delete(self) -> bool:
        """``DEL`` the hash, the queue and the deadlines (nobody is notified), and the grant
        registry; ``True`` when any of them existed."""
        self._ex.watchdog.cancel_all(self.name)
        keys = [*self.keys(), self.grants] if self.uses_own_keys() else self.keys()
        return bool(await self.read("DEL", *keys, action="deleting"))
