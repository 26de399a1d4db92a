"""CountDownLatch (Redisson ``RedissonCountDownLatch``; redisson-spec.md 11).

A string counter at the name; missing means 0 (open). Channel
``redisson_countdownlatch__channel__{name}`` (always braced): ``0`` when the count reaches
zero (open), ``1`` when a new count is set. Decisions: ``docs/semaphores.md``, "Count-down
latch".
"""

from __future__ import annotations

from syncprims._core.info import latch_channel, latch_info
from syncprims._core.objects import ObjectCore
from syncprims._core.waiting import WaitPlan, acquire_loop, waiters
from syncprims._protocol import scripts
from syncprims._protocol.contracts import Executor, ScriptCall, Wakeable
from syncprims._protocol.info import LatchInfo
from syncprims._protocol.kinds import KINDS
from syncprims._protocol.statistics import LatchStatistics
from syncprims._protocol.timing import wait_seconds
from syncprims._protocol.values import check_count

__all__ = ["CountDownLatchCore", "latch_policy"]

OPEN_MESSAGE = b"0"
"""Published when the count reaches zero (``1`` announces a new count and wakes nobody)."""


def latch_policy(waiters: Wakeable, message: bytes) -> None:
    """The wake-up rule of a count-down latch's channel: ``0`` opens the latch (wakes every
    waiter); ``1`` (a new count) wakes nobody."""
    if message == OPEN_MESSAGE:
        waiters.wake_all()


class CountDownLatchCore(ObjectCore):
    """A distributed count-down latch."""

    KIND = KINDS["latch"]

    def __init__(self, executor: Executor, name: str) -> None:
        super().__init__(executor, name)
        self.channel = latch_channel(self.name)

    async def _op(self, op: str, count: int = 0) -> int:
        return int(
            await self.run_script(
                ScriptCall(scripts.LATCH_OPS, [self.name], [op, count, self.publish, self.channel]),
                action="updating",
            )
        )

    async def try_set_count(self, count: object) -> bool:
        """Set the count if the latch does not exist (is open); ``True`` if it was set."""
        return await self._op("try_set", check_count(count, "count")) == 1

    async def count_down(self) -> None:
        """Decrement the count; at 0 the latch opens and every waiter is released."""
        await self._op("count_down")

    async def get_count(self) -> int:
        """The count now (0: open)."""
        value = await self.read("GET", self.name, action="reading")
        return 0 if value is None else max(0, int(value))

    async def delete(self) -> bool:
        """Delete the latch: it opens, and its waiters are released."""
        return await self._op("delete") == 1

    async def _attempt(self) -> int | None:
        return None if await self.get_count() == 0 else -1

    async def wait(self, timeout: object) -> bool:
        """Wait until the count is 0, at most ``timeout`` seconds (``None``: no limit).

        Returns:
            ``True`` when open, ``False`` on timeout.
        """
        wait = float("inf") if timeout is None else wait_seconds(timeout, "timeout")
        plan = WaitPlan(wait, self.channel, latch_policy, self.name)
        return await acquire_loop(self._ex, self._attempt, plan)

    async def statistics(self) -> LatchStatistics:
        """A snapshot: the count and this client's waiters."""
        return LatchStatistics(
            name=self.name, count=await self.get_count(), waiters=waiters(self._ex, self.name)
        )

    async def info(self) -> LatchInfo:
        """What the latch keeps in Redis (``syncprims._core.info``)."""
        return await latch_info(self)
