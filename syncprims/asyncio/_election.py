"""``LeaderElection``: one leader at a time among the candidates of a name."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Self, final

from syncprims._core.election import ElectionCore
from syncprims._protocol.election import Leader
from syncprims._protocol.loss import LossReason
from syncprims._protocol.timing import Duration, wait_seconds
from syncprims.asyncio._objects import _Handle
from syncprims.errors import LockLostError, LockTimeoutError

__all__ = ["LeaderElection"]


@final
class LeaderElection(_Handle):
    """One candidate of a leader election: at most one candidate of a name leads at a time,
    across processes and hosts.

    Use it when exactly one instance of a service must run something (the scheduler, the
    consumer, the cron job) and another must take over when it stops. Make one with
    [`get_leader_election`][syncprims.asyncio.Client.get_leader_election] per candidate;
    [`campaign`][syncprims.asyncio.LeaderElection.campaign] waits to lead, in arrival
    order. Leadership ends with [`resign`][syncprims.asyncio.LeaderElection.resign], the
    client's shutdown, or when its lease runs out (a crashed leader is replaced within its
    lease). Every leadership has a [`term`][syncprims.asyncio.LeaderElection.term], a
    fencing token strictly higher than every earlier one: pass it to the storage it writes to.

    Example:
        ```python
        election = client.get_leader_election("scheduler", value="host-1:8080")
        async with election:                  # waits to lead; resigns at the end
            while election.is_leader():
                await run_one_round(election.term)  # the term fences its writes
        ```

    Algorithm: a FairLock held with the watchdog, the term from the server's clock (as a
    FencedLock's durable tokens); the anchors' names are mapped in docs/election.md.
    """

    __slots__ = ()

    _core: ElectionCore

    @property
    def value(self) -> str:
        """What this candidate shows others when it leads (its last ``proclaim``)."""
        return self._core.value

    @property
    def term(self) -> int | None:
        """This candidate's latest leadership's term (``None`` before its first): a fencing
        token, strictly higher for every new leadership of the election (at least the
        server's clock in microseconds, so also after Redis lost its data). It stays after
        the leadership ends, so that a write still in flight carries it and is refused by a
        storage that has seen a newer one (``syncprims.fencing``)."""
        return self._core.term

    async def campaign(self, wait_time: Duration | None = None) -> bool:
        """Wait to lead (at once when this candidate leads already).

        Candidates are served in the order they came (a FairLock's queue; a candidate that
        died while queued holds it up for at most about a lease). Once elected,
        ``on_elected(term)`` is called here; if it raises, the leadership is resigned
        (``on_revoked(None)`` is called) and the error propagates.

        Args:
            wait_time: the longest wait, seconds or ``timedelta``; ``None`` (default) waits
                as long as it takes; 0 makes a single attempt.

        Returns:
            ``True`` once this candidate leads; ``False`` when ``wait_time`` ran out.

        Raises:
            RuntimeError: this candidate campaigns already (another caller is waiting).
            TypeError, ValueError: a bad ``wait_time`` (nothing is sent).
            TransportError: Redis could not be reached.
            ClientClosedError: the client is shut down.
        """
        return await self._core.campaign(wait_time)

    def is_leader(self) -> bool:
        """Whether this candidate leads now (no Redis call is made).

        False once its lease has run out as counted here (no later than Redis lets it go),
        or the watchdog found the leadership gone (docs/election.md, "When a leadership is
        lost").
        """
        return self._core.is_leader()

    async def leader(self) -> Leader | None:
        """Who leads now, as any client sees it.

        Returns:
            A [`Leader`][syncprims.Leader] (value, term, since when), or ``None`` when
            nobody leads.

        Raises:
            TransportError: Redis could not be reached (after retries).
        """
        return await self._core.leader()

    async def proclaim(self, value: str) -> None:
        """Change what this leader shows others (``leader().value``), keeping its term.

        Args:
            value: the new value.

        Raises:
            TypeError: ``value`` is not a ``str``.
            LockNotHeldError: this candidate does not lead.
            LockLostError: its leadership was lost (Redis no longer has it).
            TransportError: Redis could not be reached (after retries).
        """
        await self._core.proclaim(value)

    async def resign(self) -> bool:
        """Give the leadership up: the leader's work is stopped first (an asyncio
        ``lead_or_cancel()`` block is cancelled and awaited), ``on_revoked(None)`` is called,
        then the next candidate is handed the lock (docs/election.md, "Hand-over"). Nothing
        happens if this candidate does not lead.

        Returns:
            ``True`` if this candidate led.

        Raises:
            TransportError: Redis could not be reached (the leadership then ends by its
                lease).
        """
        return await self._core.resign()

    async def observe(self, timeout: Duration | None = None) -> AsyncIterator[Leader | None]:
        """The leader now, then each change: another leader, a new value, a vacancy
        (``None``).

        A crashed leader's vacancy is reported within its lease; a change shorter than a
        read may be folded into the next, terms tell every leadership apart
        (docs/election.md, "Observing").

        Args:
            timeout: the longest wait for a change, seconds or ``timedelta``; when it
                passes without one, the iteration ends. ``None`` (default): no limit.

        Yields:
            A [`Leader`][syncprims.Leader], or ``None`` when nobody leads.

        Raises:
            TypeError, ValueError: a bad ``timeout``.
            TransportError: Redis could not be reached.
        """
        if timeout is not None:
            wait_seconds(timeout, "timeout")
        current = await self._core.leader()
        while True:
            yield current
            changed, current = await self._core.next_change(current, timeout)
            if not changed:
                return

    async def __aenter__(self) -> Self:
        """``async with election:`` campaigns as long as it takes, and resigns at the end."""
        await self._core.campaign(None)
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._core.resign()

    # unasync: remove (a thread cannot be cancelled from outside)
    @contextlib.asynccontextmanager
    async def lead_or_cancel(self, wait_time: Duration | None = None) -> AsyncIterator[int]:
        """Lead for a block, and cancel the block when the leadership ends meanwhile.

        Campaigns like [`campaign`][syncprims.asyncio.LeaderElection.campaign], then runs the
        block with the term. If the leadership is lost (its lease ran out here, the watchdog
        found it gone), or ended from outside (``resign()`` from another task, the client's
        shutdown), the task running the block is cancelled and the block ends with
        ``LockLostError``; a resign or shutdown waits for the block to end before the
        leadership is released. Otherwise the leadership is resigned when the block ends.
        Only in the asyncio face: a thread cannot be cancelled from outside.

        Example:
            ```python
            async with election.lead_or_cancel() as term:
                await serve_as_leader(term)     # cancelled if the leadership ends
            ```

        Args:
            wait_time: as in [`campaign`][syncprims.asyncio.LeaderElection.campaign].

        Yields:
            The leadership's term.

        Raises:
            LockTimeoutError: not elected within ``wait_time``.
            LockLostError: the leadership ended during the block.
        """
        core = self._core
        task = asyncio.current_task()
        if task is None:
            raise RuntimeError("lead_or_cancel() must run inside an asyncio task")
        loop = asyncio.get_running_loop()
        if not await core.campaign(wait_time):
            wait = wait_seconds(wait_time)
            message = f"{core.kind} {self.name!r} was not won within {wait:g} s"
            raise LockTimeoutError(message, name=self.name)
        ended: list[LossReason | None] = []
        active = [True]
        left = loop.create_future()

        def cancel_if_active() -> None:
            if active[0]:
                task.cancel()

        def told(reason: LossReason | None) -> None:  # the services thread, or this loop
            if not ended:
                ended.append(reason)
                loop.call_soon_threadsafe(cancel_if_active)

        async def stop() -> None:
            if asyncio.current_task() is task:
                return  # the block resigns itself
            told(None)
            await asyncio.shield(left)

        core.work_told, core.work_stop = told, stop
        try:
            try:
                yield core.term or 0
            finally:
                active[0] = False
                core.work_told = core.work_stop = None
            if ended and task.cancelling():
                task.uncancel()
        except asyncio.CancelledError:
            if not ended or task.uncancel() > 0:
                await self._leave(left)
                raise
        except BaseException:
            await self._leave(left)
            raise
        await self._leave(left)
        if ended:
            why = ended[0] or "it was resigned from outside the block"
            raise LockLostError(
                f"{core.kind} {self.name!r} ended while leading: {why}",
                name=self.name,
                owner=core.lock.field(core.owner),
            )

    # unasync: remove
    async def _leave(self, left: asyncio.Future[None]) -> None:
        """End a ``lead_or_cancel`` block: resign, then let a waiting ``stop()`` go on."""
        try:
            await self._core.resign()
        finally:
            if not left.done():
                left.set_result(None)
