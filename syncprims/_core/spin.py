"""SpinLock: an RLock whose waiters poll instead of subscribing (Redisson ``RedissonSpinLock``;
``docs/locks.md``, "Spin locks"): the RLock's layout and acquire and renew scripts; nothing
is published (unlock and force-unlock only delete).

Wake-up rule (Redisson ``LockOptions.ExponentialBackOff``, the default of ``getSpinLock``):
the first pause is ``initial_delay`` (1 ms), each next one is the previous times
``multiplier`` (2) plus a jitter of up to ``attempts - 1`` ms (uniform, whole ms), capped at
``max_delay`` (128 ms), which then repeats. Every pause is cut to the wait time left.

Decisions: as for an RLock; ``try_lock`` with a wait makes a last attempt when the wait runs
out (Redisson checks the clock first).
"""

from __future__ import annotations

import random
from collections.abc import Iterator

import attrs

from syncprims._core.lock import LockCore
from syncprims._core.waiting import Attempt, poll_loop
from syncprims._protocol import scripts
from syncprims._protocol.contracts import Executor, ScriptCall
from syncprims._protocol.kinds import KINDS

__all__ = ["BackOff", "SpinLockCore"]


def _positive(instance: object, attribute: attrs.Attribute[float], value: float) -> None:
    if not value > 0:
        raise ValueError(f"{attribute.name} must be > 0, not {value!r}")


@attrs.frozen
class BackOff:
    """Redisson's ``ExponentialBackOff``: the pauses of one wait, in seconds.

    Attributes:
        initial_delay: the first pause, seconds (Redisson: 1 ms).
        max_delay: the longest pause, seconds (Redisson: 128 ms).
        multiplier: how much each pause grows (Redisson: 2).
    """

    initial_delay: float = attrs.field(default=0.001, validator=_positive)
    max_delay: float = attrs.field(default=0.128, validator=_positive)
    multiplier: float = attrs.field(default=2.0, validator=_positive)

    def delays(self, rng: random.Random | None = None) -> Iterator[float]:
        """The pauses, forever (``LockOptions.ExponentialBackOffPolicy#getNextSleepPeriod``)."""
        rng = rng or random.Random()
        pause, fails = self.initial_delay, 0
        while pause < self.max_delay:
            yield pause
            fails += 1
            pause = min(self.max_delay, pause * self.multiplier + rng.randrange(fails) / 1000)
        while True:
            yield self.max_delay


class SpinLockCore(LockCore):
    """The SpinLock algorithms: RLock's, with polling waits and no messages."""

    KIND = KINDS["spin"]
    one_wake_part = None  # no messages: nothing to register for
    grant_part = None

    def __init__(self, executor: Executor, name: str, backoff: BackOff | None = None) -> None:
        super().__init__(executor, name)
        self.backoff = backoff or BackOff()

    async def wait_for(
        self, attempt: Attempt, field: str, wait: float, plain: tuple[int | None, float | None]
    ) -> bool:
        # ``plain`` comes from the RLock's one wake-up only (none here)
        return await poll_loop(
            self._ex, attempt, wait=wait, delays=self.backoff.delays(), route=self.name
        )

    def unlock_command(self, field: str, lease: int, unlock_key: str) -> ScriptCall:
        return ScriptCall(
            scripts.SPIN_UNLOCK,
            [self.name, unlock_key],
            [lease, field, self._ex.bounds.unlock_key_ttl_ms],
        )

    def force_unlock_command(self) -> ScriptCall:
        return ScriptCall(scripts.SPIN_FORCE_UNLOCK, [self.name], [])
