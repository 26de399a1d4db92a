"""LeaderElection: one leader at a time among the candidates of a name (syncprims; etcd's
election API, Curator's ``LeaderLatch``/``LeaderSelector``, client-go's ``leaderelection``).

Leadership *is* a hold of the election's lock, a FairLock (:class:`ElectionLockCore`), taken
with the watchdog; nothing else decides who leads. So the lock machinery gives the election
its waits, its renewals and its loss detection (``syncprims._core.lock.holds``). The term
and the leader's record are written beside the holder's field once the lock is held
(``election_seat.lua``). Layout, terms, slots, leases and shutdown: ``docs/election.md``.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import socket
import threading
from collections.abc import Awaitable, Callable

from syncprims._core.fair import FairLockCore
from syncprims._core.owners import new_owner
from syncprims._core.waiting import WaitPlan, acquire_loop
from syncprims._protocol import scripts
from syncprims._protocol.contracts import Executor, ScriptCall, Wakeable
from syncprims._protocol.election import Leader, parse_leader
from syncprims._protocol.kinds import KINDS
from syncprims._protocol.loss import LossReason
from syncprims._protocol.names import check_name, election_names
from syncprims._protocol.timing import lease_ms, wait_seconds
from syncprims.errors import LockLostError, LockNotHeldError, SyncPrimsError

__all__ = ["MIN_LEASE", "ElectionCore", "ElectionLockCore"]

log = logging.getLogger("syncprims.election")

MIN_LEASE = 1.0
"""The shortest election lease, seconds: renewed every third of it by a watchdog that ticks
every 0.1 s, a shorter one would leave a renewal too little room."""

Elected = Callable[[int], object]
Revoked = Callable[[LossReason | None], object]


def _wake_all(waiters: Wakeable, message: bytes) -> None:
    """The observers' channel: every message (a new term, a proclaim, a vacancy) wakes them
    all, and each reads the record again."""
    waiters.wake_all()


class ElectionLockCore(FairLockCore):
    """The election's lock: a FairLock whose lease is the election's, and whose queued
    candidates each keep their place for one lease (``docs/election.md``)."""

    KIND = KINDS["election"]

    def __init__(self, executor: Executor, name: str, lease: float) -> None:
        super().__init__(executor, name)
        self.own_lease = lease

    def slot_ms(self, wait: float) -> int:
        return self.watchdog_ms()


class ElectionCore:
    """One candidate of an election (an explicit owner of its lock, so that any thread or
    task may resign it), with its leadership's state."""

    KIND = KINDS["election"]
    kind = KIND.display

    def __init__(
        self,
        executor: Executor,
        name: str,
        *,
        value: object,
        lease_time: object,
        on_elected: Elected | None,
        on_revoked: Revoked | None,
    ) -> None:
        self.name = check_name(name)
        lock_name, self.term_key, self.channel = election_names(self.name)
        if lease_time is None:
            lease = executor.config.lock_watchdog_timeout
        else:
            lease = lease_ms(lease_time) / 1000
            if lease < MIN_LEASE:
                raise ValueError(
                    f"lease_time must be at least {MIN_LEASE:g} s (renewed every third of it "
                    f"by a watchdog that ticks every 0.1 s), got {lease:g} s"
                )
        for what, callback in (("on_elected", on_elected), ("on_revoked", on_revoked)):
            if callback is not None and not callable(callback):
                raise TypeError(f"{what} must be callable, not {type(callback).__name__}")
        self._ex = executor
        self.lock = ElectionLockCore(executor, lock_name, lease)
        self.owner = new_owner().value
        self.value = (
            f"{socket.gethostname()}:{os.getpid()}" if value is None else self.check_value(value)
        )
        self.on_elected = on_elected
        self.on_revoked = on_revoked
        self.term: int | None = None  # this candidate's latest leadership's
        # The face's hooks into a leadership's work (the asyncio face's lead_or_cancel):
        # told at its end, and stopped (cancelled, awaited) before a resign releases it.
        self.work_told: Callable[[LossReason | None], None] | None = None
        self.work_stop: Callable[[], Awaitable[None]] | None = None
        self._mutex = threading.Lock()
        self._leading = False  # a leadership began and has not ended
        self._held = False  # a hold of the lock to give back (led, or lost)
        self._campaigning = False
        self._pid = 0  # the process that leads (a forked child does not)

    def check_value(self, value: object) -> str:
        """Validate a value others see.

        Raises:
            TypeError: not a ``str``.
        """
        if not isinstance(value, str):
            raise TypeError(f"value must be a str, not {type(value).__name__}")
        return value

    # -- leading ------------------------------------------------------------------------------

    def is_leader(self) -> bool:
        """Whether this candidate leads, as far as it knows without asking Redis."""
        return (
            self._leading
            and self._pid == os.getpid()
            and self.lock.holds.lost_reason(self.owner) is None
        )

    async def campaign(self, wait_time: object) -> bool:
        """Wait to lead, at most ``wait_time`` seconds (``None``: as long as it takes).

        Raises:
            RuntimeError: this candidate campaigns already (in another thread or task).
            TypeError, ValueError: a bad ``wait_time``.
            TransportError: Redis could not be reached.
        """
        wait = math.inf if wait_time is None else wait_seconds(wait_time)
        if self.is_leader():
            return True
        with self._mutex:
            if self._campaigning:
                raise RuntimeError(f"{self.kind} {self.name!r}: this candidate campaigns already")
            self._campaigning = True
        try:
            term = await self._win(wait)
        finally:
            self._campaigning = False
        if term is None:
            return False
        self._begin(term)
        if self.on_elected is not None:
            try:
                self.on_elected(term)
            except BaseException:
                await self.resign()  # on_revoked(None) too: the leadership ended
                raise
        return True

    async def _win(self, wait: float) -> int | None:
        """Hold the lock and start a term within ``wait`` seconds; the term, or ``None``."""
        if self._leading:  # lost, and not told yet (is_leader() is false already)
            self.end(self.lock.holds.lost_reason(self.owner))
        await self.give_back()  # a leadership lost earlier: its hold, if Redis has it
        ex = self._ex
        deadline = ex.monotonic() + wait
        while await self.lock.try_lock(self.owner, max(0.0, deadline - ex.monotonic()), None):
            self._held = True
            try:
                ex.refuse_if_closing(self.lock.context("campaigning in"))
                term = await self._seat(self.value, "1")
            except BaseException:
                with contextlib.suppress(SyncPrimsError):
                    await self.give_back()
                raise
            if term is not None:
                return term
            await self.give_back()  # gone between the grant and the term (a delete)
            if ex.monotonic() >= deadline:
                break
        return None

    async def _seat(self, value: str, new_term: str) -> int | None:
        """``election_seat.lua``: a new term (``"1"``) or a proclaim (``"0"``)."""
        lock = self.lock
        call = ScriptCall(
            scripts.ELECTION_SEAT,
            [lock.name, self.term_key, self.channel],
            [lock.field(self.owner), value, self._publish(), new_term],
        )
        reply = await lock.run_script(call, action="starting a term of")
        return None if reply is None else int(reply)

    def _publish(self) -> str:
        return self._ex.publish_command_for(self.channel, self.lock.name)

    def _begin(self, term: int) -> None:
        """A leadership began: remember it, hear of its loss, end it at shutdown."""
        with self._mutex:
            self.term = term
            self._leading = True
            self._pid = os.getpid()
        self.lock.holds.add_loss_listener(self.owner, self.end)
        self._ex.closers[self.owner] = self.resign
        reason = self.lock.holds.lost_reason(self.owner)
        if reason is not None:  # lost before the listener was there
            self.end(reason)

    def end(self, reason: LossReason | None) -> bool:
        """End the leadership (``reason``: why it was lost, from the watchdog's loss listener on
        the services thread or loop; ``None``: given up): tell the work, then ``on_revoked``,
        once. ``False`` when none was going on."""
        with self._mutex:
            if not self._leading:
                return False
            self._leading = False
            told = self.work_told
        if told is not None:
            told(reason)
        if self.on_revoked is not None:
            try:
                self.on_revoked(reason)
            except Exception:
                log.exception("on_revoked of %s %r failed", self.kind, self.name)
        return True

    async def resign(self) -> bool:
        """Stop the leader's work (asyncio's ``lead_or_cancel``), end the leadership, and
        release the lock (the next candidate is handed it), then tell the observers.
        ``True`` if this candidate led.

        Raises:
            TransportError: Redis could not be reached (the leadership then ends by its
                lease).
        """
        led = self._leading
        stop = self.work_stop
        if stop is not None:
            await stop()  # its block resigns as it leaves
        self.end(None)
        await self.give_back()
        return led

    async def give_back(self) -> None:
        """Release the hold of a leadership that ended (if Redis still has it), and tell the
        observers."""
        with self._mutex:
            held, self._held = self._held, False
        if not held:
            return
        self.lock.holds.remove_loss_listener(self.owner, self.end)
        self._ex.closers.pop(self.owner, None)
        try:
            await self.lock.unlock(self.owner)
        except LockNotHeldError:
            return  # lost: another leads, or will (its term told the observers)
        try:
            await self.lock.read(
                self._publish(), self.channel, "0", action="announcing the vacancy of"
            )
        except SyncPrimsError as error:  # the observers re-read within their lease anyway
            log.debug("announcing the vacancy of %r failed: %r", self.name, error)

    async def proclaim(self, value: object) -> None:
        """Show ``value`` to others as this leader's.

        Raises:
            TypeError: ``value`` is not a ``str``.
            LockNotHeldError: this candidate does not lead.
            LockLostError: its leadership was lost (Redis no longer has it).
            TransportError: Redis could not be reached.
        """
        text = self.check_value(value)
        field = self.lock.field(self.owner)
        if not self.is_leader():
            raise LockNotHeldError(
                f"{self.kind} {self.name!r} is not led by this candidate",
                name=self.name,
                owner=field,
            )
        if await self._seat(text, "0") is None:
            raise LockLostError(
                f"{self.kind} {self.name!r} was lost while leading: Redis no longer has it",
                name=self.name,
                owner=field,
            )
        self.value = text

    # -- reading ------------------------------------------------------------------------------

    async def _read(self) -> tuple[Leader | None, int]:
        call = ScriptCall(scripts.ELECTION_READ, [self.lock.name], [])
        return parse_leader(await self.lock.run_script(call, action="reading the leader of"))

    async def leader(self) -> Leader | None:
        """Who leads now (``None``: nobody)."""
        return (await self._read())[0]

    async def next_change(self, last: Leader | None, timeout: object) -> tuple[bool, Leader | None]:
        """Wait until the leader is no longer ``last`` (another, a vacancy, a new value), at
        most ``timeout`` seconds (``None``: no limit), woken by the observers' channel and
        re-reading at the latest when the current lease may have run out (an expiry
        publishes nothing). ``(True, the new leader or None)``, or ``(False, last)``."""
        wait = math.inf if timeout is None else wait_seconds(timeout, "timeout")
        seen: list[Leader | None] = [last]

        async def attempt() -> int | None:
            leader, pttl = await self._read()
            if leader != last:
                seen[0] = leader
                return None
            # PTTL 0: the lease ends this millisecond (Redis answers 0, not -2, until the
            # key is past its expiry): re-read after a back-off, not after the re-check
            # interval (read at exactly the lease's end, it once waited the whole timeout)
            return pttl if pttl >= 0 else -1

        plan = WaitPlan(wait, self.channel, _wake_all, self.lock.name)
        changed = await acquire_loop(self._ex, attempt, plan)
        return changed, seen[0]
