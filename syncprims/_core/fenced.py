"""FencedLock: an RLock with a fencing token (Redisson ``RedissonFencedLock``; spec 7).

Every successful acquisition, reentrant ones included and whichever method took it,
increments ``redisson_lock_token:{name}`` in the same script: tokens strictly increase.
The acquire reply carries an explicit flag (``{0, token}`` / ``{1, ttl}``), which Java's
``{-1, token}`` / ``{pttl, -1}`` leaves ambiguous for a holder without TTL. Durable tokens
(``durable_tokens=True``, ours: ``max(counter + 1, the server's TIME in µs)``,
``fenced_acquire_durable.lua``) and the other decisions: ``docs/fenced-lock.md``.
"""

from __future__ import annotations

import math
from typing import Any

from syncprims._core.lock import LockCore
from syncprims._protocol import scripts
from syncprims._protocol.contracts import Executor, ScriptCall
from syncprims._protocol.kinds import KINDS
from syncprims._protocol.names import prefix_name

__all__ = ["FencedLockCore"]


class FencedLockCore(LockCore):
    """The FencedLock algorithms."""

    KIND = KINDS["fenced"]
    one_wake_part = None  # scripts of its own
    grant_part = None

    def __init__(self, executor: Executor, name: str, *, durable_tokens: bool = False) -> None:
        super().__init__(executor, name)
        if not isinstance(durable_tokens, bool):
            raise TypeError(f"durable_tokens must be a bool, not {type(durable_tokens).__name__}")
        self.token_key = prefix_name("redisson_lock_token", self.name)
        self._acquire = scripts.FENCED_ACQUIRE_DURABLE if durable_tokens else scripts.FENCED_ACQUIRE
        self._tokens: dict[str, int] = {}  # owner field -> token of its last acquisition

    def keys(self) -> list[str]:
        """The lock and its token counter."""
        return [self.name, self.token_key]

    def acquire_command(self, field: str, lease: int, wait: float) -> ScriptCall:
        return ScriptCall(self._acquire, [self.name, self.token_key], [lease, field])

    def reply_ttl(self, reply: Any) -> int | None:
        flag, value = reply
        return None if int(flag) == 0 else int(value)

    def acquired(self, field: str, lease: int, watchdog: bool, reply: Any, since: float) -> None:
        if reply is not None:
            self._tokens[field] = int(reply[1])
        super().acquired(field, lease, watchdog, reply, since)

    async def try_lock_and_get_token(
        self, owner: int, wait_time: object, lease_time: object
    ) -> int | None:
        """Acquire within ``wait_time``; the token of this acquisition, or ``None``."""
        if await self.try_lock(owner, wait_time, lease_time):
            return self._tokens[self.field(owner)]
        return None

    async def lock_and_get_token(self, owner: int, lease_time: object) -> int:
        """Acquire, waiting as long as it takes; the token of this acquisition."""
        token = await self.try_lock_and_get_token(owner, math.inf, lease_time)
        assert token is not None
        return token

    async def get_token(self) -> int:
        """The latest token handed out (0 before the first acquisition)."""
        value = await self.read("GET", self.token_key, action="reading the token of")
        return 0 if value is None else int(value)

    async def delete(self) -> bool:
        """``DEL`` the lock and its token (nobody is notified)."""
        self._ex.watchdog.cancel_all(self.name)
        return bool(await self.read("DEL", *self.keys(), action="deleting"))
