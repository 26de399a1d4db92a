"""Non-reentrant locks (Redisson 4.4 ``RedissonNonReentrantLock`` and
``RedissonNonReentrantFairLock``; ``docs/locks.md``, "Non-reentrant locks").

The layout is the RLock's (or the FairLock's); only the acquire script differs: an owner
that already holds the lock gets the error reply ``NON_REENTRANT_REACQUIRE`` (Redisson's
``REENTRY_ERR``) and nothing changes in Redis; the core turns it into
:class:`~syncprims.errors.LockReentryError`. The refusal is the server's, as Redisson's (a
local check would refuse an owner whose hold had expired meanwhile). Every acquire script of
the kind carries it: the one-wake RLock script and the fair script take the error code as an
optional last argument (``ARGV[10]``); where the client falls back to Redisson's plain
scripts (the ACL fall-back) the RLock side runs Redisson's ``lock_acquire_nr.lua``.
"""

from __future__ import annotations

from typing import Any

from syncprims._core.fair import FairLockCore
from syncprims._core.lock import LockCore
from syncprims._protocol import scripts
from syncprims._protocol.contracts import Arg, ScriptCall
from syncprims._protocol.kinds import KINDS
from syncprims.errors import LockReentryError, ServerReplyError

__all__ = ["NonReentrantFairLockCore", "NonReentrantLockCore"]


def _refusing(call: ScriptCall) -> ScriptCall:
    """``call`` (an acquire script call of the RLock or FairLock) made to refuse a reentry."""
    if call.script is scripts.LOCK_ACQUIRE:  # Redisson's plain script: its non-reentrant twin
        return ScriptCall(scripts.LOCK_ACQUIRE_NR, call.keys, [*call.args, scripts.REENTRY_ERR])
    args: list[Arg] = list(call.args)
    args += [""] * (9 - len(args))  # the optional arguments before ARGV[10] (fair: unused)
    return ScriptCall(call.script, call.keys, [*args, scripts.REENTRY_ERR])


class _NonReentrant(LockCore):
    """The non-reentrant acquire over a lock kind's algorithms (a mixin)."""

    def acquire_command(self, field: str, lease: int, wait: float) -> ScriptCall:
        return _refusing(super().acquire_command(field, lease, wait))

    def grant_acquire_command(
        self, field: str, lease: int, wait: float, *, waits: str, member: str, fresh: str
    ) -> ScriptCall:
        return _refusing(
            super().grant_acquire_command(
                field, lease, wait, waits=waits, member=member, fresh=fresh
            )
        )

    def single_acquire_command(self, field: str, lease: int) -> ScriptCall:
        if self.one_wake is None:  # the kind's own acquire script, refusing already
            return self.acquire_command(field, lease, 0.0)
        return _refusing(super().single_acquire_command(field, lease))

    async def attempt(
        self, field: str, lease: int, watchdog: bool, wait: float, grant: Any = None
    ) -> int | None:
        try:
            return await super().attempt(field, lease, watchdog, wait, grant)
        except ServerReplyError as error:
            if error.code != scripts.REENTRY_ERR:
                raise
            raise LockReentryError(
                f"{self.kind} {self.name!r} is already held by this owner ({field}): "
                "release it before acquiring it again",
                name=self.name,
                owner=field,
            ) from error


class NonReentrantLockCore(_NonReentrant, LockCore):
    """A non-reentrant, non-fair lock (Redisson ``RedissonNonReentrantLock``)."""

    KIND = KINDS["nonreentrant"]


class NonReentrantFairLockCore(_NonReentrant, FairLockCore):
    """A non-reentrant FIFO lock (Redisson ``RedissonNonReentrantFairLock``)."""

    KIND = KINDS["nonreentrant-fair"]
