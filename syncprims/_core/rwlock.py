"""ReadWriteLock (Redisson ``RedissonReadWriteLock``; redisson-spec.md 5).

Its layout, semantics (readers share, downgrade but no upgrade, read leases per owner, the
renewal of this client's read holds only) and the writer preference (syncprims only: a
waiting writer's entry in ``syncprims_rwlock_writers:{name}``, expiring after
:data:`WRITER_INTENT_MS` unless its attempts refresh it, which the readers with the option
wait for, ``rw_read_acquire_wp.lua``) are described in ``docs/rw-lock.md``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from syncprims._core.info import lock_info
from syncprims._core.lock import LockCore
from syncprims._core.objects import ExpirableCore
from syncprims._protocol import scripts
from syncprims._protocol.contracts import Arg, Executor, RenewalKind, ScriptCall
from syncprims._protocol.info import LockInfo
from syncprims._protocol.kinds import KINDS
from syncprims._protocol.names import key_prefix, prefix_name, rw_lease_prefix, rw_writers_name

__all__ = ["ReadLockCore", "ReadWriteLockCore", "WriteLockCore"]

READ_UNLOCK_MESSAGE = "0"
WRITE_UNLOCK_MESSAGE = "1"
WRITER_INTENT_MS = 3000  # a waiting writer's entry lives this long unless refreshed
WRITER_REFRESH_MS = 1000  # a waiting writer attempts (and refreshes) at least this often


def _read_renew_command(lease: int, batch: list[tuple[str, str]]) -> tuple[list[str], list[Arg]]:
    keys: list[str] = []
    args: list[Arg] = [lease]
    for name, field in batch:
        keys += [name, key_prefix(name)]
        args.append(field)
    return keys, args


READ_RENEWAL = RenewalKind("read lock", scripts.RW_READ_RENEW, _read_renew_command)
"""Read holds: renew this owner's lease keys and the lock's TTL."""


class _SideCore(LockCore):
    """What both sides share: the hash, the channel ``redisson_rwlock:{name}``."""

    one_wake_part = None  # scripts of its own
    grant_part = None
    mode = ""  # the side's ``mode`` in the hash, and the message its release publishes
    unlock_message = ""

    def __init__(self, executor: Executor, name: str, *, writer_preference: bool = False) -> None:
        super().__init__(executor, name)
        self.channel = prefix_name("redisson_rwlock", self.name)
        self.writer_preference = writer_preference
        self.writers = rw_writers_name(self.name)

    def owner_fields(self, owner: int) -> list[str]:
        """Both sides' fields: the read side checks ``<read field>:write`` for the owner's
        own write hold, so the two take a new incarnation together."""
        read = LockCore.field(self, owner)
        return [read, f"{read}:write"]

    def force_unlock_command(self) -> ScriptCall:
        return ScriptCall(
            scripts.RW_FORCE_UNLOCK,
            [self.name, self.channel],
            [self.mode, self.unlock_message, self.publish],
        )


class ReadLockCore(_SideCore):
    """The read side."""

    KIND = KINDS["read"]
    renewal = READ_RENEWAL
    mode = "read"
    unlock_message = READ_UNLOCK_MESSAGE

    def acquire_command(self, field: str, lease: int, wait: float) -> ScriptCall:
        keys = [self.name, rw_lease_prefix(self.name, field)]
        args: list[Arg] = [lease, field, f"{field}:write"]
        if self.writer_preference:
            return ScriptCall(scripts.RW_READ_ACQUIRE_WP, [*keys, self.writers], args)
        return ScriptCall(scripts.RW_READ_ACQUIRE, keys, args)

    def unlock_command(self, field: str, lease: int, unlock_key: str) -> ScriptCall:
        return ScriptCall(
            scripts.RW_READ_UNLOCK,
            [
                self.name,
                self.channel,
                rw_lease_prefix(self.name, field),
                key_prefix(self.name),
                unlock_key,
            ],
            [READ_UNLOCK_MESSAGE, field, self.publish, self._ex.bounds.unlock_key_ttl_ms],
        )

    async def is_locked(self) -> bool:
        """Read-locked: mode ``read``, or a writer that also holds read locks."""
        mode = await self.read("HGET", self.name, "mode", action="checking")
        if mode == b"read":
            return True
        if mode == b"write":
            return int(await self.read("HLEN", self.name, action="checking")) > 2
        return False


class WriteLockCore(_SideCore):
    """The write side."""

    KIND = KINDS["write"]
    mode = "write"
    unlock_message = WRITE_UNLOCK_MESSAGE

    def field(self, owner: int) -> str:
        return f"{super().field(owner)}:write"

    def acquire_command(self, field: str, lease: int, wait: float) -> ScriptCall:
        if self.writer_preference and wait > 0:  # one attempt never waits: nothing to say
            return ScriptCall(
                scripts.RW_WRITE_ACQUIRE_WP,
                [self.name, self.writers],
                [lease, field, WRITER_INTENT_MS, WRITER_REFRESH_MS],
            )
        return ScriptCall(scripts.RW_WRITE_ACQUIRE, [self.name], [lease, field])

    def give_up(self, field: str, wait: float) -> Callable[[], Awaitable[None]] | None:
        if not (self.writer_preference and wait > 0):
            return None

        async def leave() -> None:
            await self._ex.eval(
                ScriptCall(
                    scripts.RW_WRITE_GIVE_UP,
                    [self.writers, self.channel],
                    [field, WRITE_UNLOCK_MESSAGE, self.publish],
                ),
                context=self.context("giving up the wait for"),
            )

        return leave

    def unlock_command(self, field: str, lease: int, unlock_key: str) -> ScriptCall:
        ttl = self._ex.bounds.unlock_key_ttl_ms
        return ScriptCall(
            scripts.RW_WRITE_UNLOCK,
            [self.name, self.channel, unlock_key],
            [WRITE_UNLOCK_MESSAGE, lease, field, self.publish, ttl],
        )

    async def is_locked(self) -> bool:
        """Write-locked: mode ``write``."""
        return bool(await self.read("HGET", self.name, "mode", action="checking") == b"write")


class ReadWriteLockCore(ExpirableCore):
    """The factory of both sides; an expirable object on the shared hash."""

    KIND = KINDS["rw"]

    def __init__(self, executor: Executor, name: str, *, writer_preference: bool = False) -> None:
        super().__init__(executor, name)
        self.read_side = ReadLockCore(executor, self.name, writer_preference=writer_preference)
        self.write_side = WriteLockCore(executor, self.name, writer_preference=writer_preference)

    async def info(self) -> LockInfo:
        """What the lock keeps in Redis: mode, readers and writer, TTL, waiting writers
        (``syncprims._core.info``)."""
        return await lock_info(self, "rw")
