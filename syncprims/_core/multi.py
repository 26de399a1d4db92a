"""MultiLock and RedLock: several locks taken as one (Redisson ``RedissonMultiLock`` /
``RedissonRedLock``; redisson-spec.md 8; the Redis distlock page, "The Redlock algorithm").

How an attempt, its validity time, its release and a loss work: ``docs/multi-lock.md`` and
``docs/design.md`` ("Several servers at once"). A MultiLock needs every sub-lock; a RedLock
a majority, ``n // 2 + 1``. Two differences from Redisson beside those: sub-locks are tried
together, each with the caller's lease (Redisson gives each ``2 x wait`` and shortens it,
acquiring one by one), and a cancelled asyncio acquire leaves nothing held (Redisson issue
#4456): calls in flight and calls already answered are both undone.
"""

from __future__ import annotations

import contextlib
import logging
import math
import random
import threading
from collections.abc import Callable, Sequence
from typing import Any

import attrs

from syncprims import _observe
from syncprims._core.lock import AttemptUndo, Holds, LockCore, lock_policy, release_on_exit
from syncprims._core.retry import releasing
from syncprims._core.waiting import WaitPlan, acquire_loop
from syncprims._protocol.contracts import PENDING, Call, Enough, Executor, Subscription
from syncprims._protocol.ids import new_request_id
from syncprims._protocol.kinds import KINDS
from syncprims._protocol.loss import LossReason
from syncprims._protocol.names import unlock_key_name
from syncprims._protocol.quorum import majority, released_enough, settled
from syncprims._protocol.scripts import REENTRY_ERR
from syncprims._protocol.statistics import LockStatistics
from syncprims._protocol.timing import drift, lease_ms, threading_wait, wait_seconds
from syncprims.errors import (
    LockLostError,
    LockNotHeldError,
    LockReentryError,
    ServerReplyError,
    TransportError,
)

__all__ = ["MultiLockCore", "RedLockCore"]

log = logging.getLogger("syncprims.lock")

MIN_BACKOFF = 0.01
MAX_BACKOFF = 0.2

Plan = tuple[LockCore, str, int, bool]
"""A sub-lock's part of an attempt: the sub-lock, the owner's field, the lease (ms), and
whether the watchdog renews it."""


# -- a sub-lock, through the package interface of LockCore ---------------------------------


def _own_keys(sub: LockCore) -> bool:
    """Whether ``sub``'s fan-out calls use syncprims' own keys (``LockCore.uses_own_keys``):
    an RLock's do not (``LockCore.single_acquire_command``); a FairLock's grant keeps its."""
    return sub.one_wake is None and sub.uses_own_keys()


def _acquire_call(sub: LockCore, field: str, lease: int) -> Call:
    """A single acquire attempt of ``sub`` (never queues) as a fan-out call."""
    return Call(
        sub.executor,
        sub.single_acquire_command(field, lease),
        sub.context("acquiring"),
        AttemptUndo(sub, field, 0.0),
        skip_if_busy=True,
    )


def _release_call(sub: LockCore, field: str, request_id: str) -> tuple[Call, str]:
    """An unlock of one hold of ``field`` on ``sub`` as a fan-out call, and its unlock key
    (``request_id``: unique to this call)."""
    unlock_key = unlock_key_name(sub.name, request_id)
    command = sub.single_unlock_command(field, sub.holds.lease(field), unlock_key)
    return sub.releases.call(field, command, unlock_key), unlock_key


def _released(sub: LockCore, owner: int) -> str:
    """A fan-out's unlock of ``owner`` begins: its hold on ``sub`` is given back (whatever
    the outcome) and the watchdog stops renewing it; the field to release."""
    field = sub.field(owner)
    sub.releases.count_hold(owner, -1)
    sub.executor.watchdog.cancel(sub.name, field)
    return field


@attrs.define(eq=False)
class _Watch:
    """One owner's hold of a MultiLock or RedLock: the sub-locks it took, those lost since,
    and whether the loss of the whole was told (once); guarded by the lock's mutex."""

    depth: int = 0  # acquisitions not yet released (reentrancy)
    held: set[int] = attrs.field(factory=set)  # indexes of the sub-locks taken
    lost: set[int] = attrs.field(factory=set)
    told: bool = False


class MultiLockCore:
    """Every sub-lock, or nothing."""

    KIND = KINDS["multi"]
    kind = KIND.display

    def __init__(self, locks: Sequence[LockCore]) -> None:
        if not locks:
            raise ValueError(f"a {self.kind} needs at least one lock")
        self.locks = list(locks)
        self._ex: Executor = self.locks[0].executor
        self._validity: dict[int, tuple[float, float]] = {}  # owner -> (validity s, at)
        self._calls: dict[int, tuple[tuple[tuple[str, int, bool], ...], tuple[Call, ...]]] = {}
        self._timed = any(sub.timed_attempt for sub in self.locks)  # calls made each attempt
        # A RedLock's sub-locks share one name on several masters: say it once.
        names = list(dict.fromkeys(sub.name for sub in self.locks))
        self.name = ", ".join(repr(name) for name in names)
        self.error_name = names[0] if len(names) == 1 else self.name
        self.need = self.needed(len(self.locks))
        self._acquiring = self.context("acquiring")  # for messages, made once
        self._waiting = self.context("waiting for")
        self.on_lost: Callable[[str, LossReason], None] | None = None
        self._watches: dict[int, _Watch] = {}  # owner -> its hold (see _Watch)
        self._lost: dict[int, LossReason] = {}  # owner -> why its hold was lost
        # Sub-lock losses come from the services threads of several clients. Each sub-lock
        # tells this lock of every loss of its own (Holds.watch_by), and this lock finds
        # the owner whose hold it was: nothing is registered per hold.
        self._mutex = threading.Lock()
        for sub in self.locks:
            sub.holds.watch_by(self)

    @staticmethod
    def needed(count: int) -> int:
        """How many of ``count`` sub-locks make the lock held: every one."""
        return count

    def context(self, action: str) -> str:
        """For messages."""
        return f"{action} {self.kind} of {self.name}"

    # -- acquire ------------------------------------------------------------------------------

    async def try_lock(self, owner: int, wait_time: object, lease_time: object) -> bool:
        """Acquire within ``wait_time`` seconds (``None``/0: one attempt; ``math.inf``: forever).

        Args:
            owner: the caller's owner id.
            wait_time: as :meth:`LockCore.try_lock`.
            lease_time: seconds, or ``None`` for each sub-lock's watchdog.

        Raises:
            TypeError, ValueError: bad durations (nothing is sent), or a lease no longer than
                its drift allowance (about 2 ms).
            ServerReplyError: a server refused a sub-lock's script (an ACL, say); what the
                attempt took is released first.
        """
        wait = wait_seconds(wait_time)
        lease_s = None if lease_time is None else lease_ms(lease_time) / 1000
        if lease_s is not None and lease_s <= drift(lease_s):
            raise ValueError(
                f"lease_time of a {self.kind} must exceed its clock-drift allowance (1% + 2 ms), "
                f"got {lease_s!r} s: no attempt could ever have validity time left"
            )
        for sub in self.locks:
            sub.executor.refuse_if_closing(self._acquiring)
        for sub in self.locks:
            sub.releases.fresh_field(owner)
        plans = [(sub, sub.field(owner), *sub.lease_of(lease_time)) for sub in self.locks]
        ex = self._ex
        started = ex.monotonic()
        fanout = _FanOut(self, owner, plans, lease_s)
        try:
            ttl = await fanout.attempt()  # made here, not by the loop: none built if free
            if ttl is None:
                return True
            plan = WaitPlan(
                wait, "", park=fanout, first=ttl, started=started, context=self._waiting
            )
            return await acquire_loop(ex, fanout.attempt, plan)
        finally:
            if fanout.waiting is not None or fanout.unsettled:  # [hot-10]: nothing else
                fanout.end()

    def _acquire_calls(self, owner: int, plans: Sequence[Plan]) -> Sequence[Call]:
        """The attempt's fan-out calls, made once per owner, fields and leases: the same
        tuple each attempt, which a blocking executor routes once (``SyncExecutor.eval_many``).
        A list made afresh when a sub-lock's attempt carries the time (``timed_attempt``)."""
        if self._timed:
            return [_acquire_call(sub, field, lease) for sub, field, lease, _ in plans]
        key = tuple([(field, lease, sub.uses_own_keys()) for sub, field, lease, _ in plans])
        cached = self._calls.get(owner)
        if cached is not None and cached[0] == key:
            return cached[1]
        calls = tuple([_acquire_call(sub, field, lease) for sub, field, lease, _ in plans])
        if len(self._calls) >= 64:  # owners come and go (threads, tasks): a few kept
            self._calls.clear()
        self._calls[owner] = (key, calls)
        return calls

    def _settled(self, plans: Sequence[Plan]) -> Enough:
        """When an attempt's fan-out may stop waiting: a quorum granted, or too few replies
        left for one. The calls still out finish in the background; a late grant is
        released at once (``LockCore.on_abandoned_attempt``)."""
        need = self.need

        def enough(replies: Sequence[Any]) -> bool:
            granted = out = 0
            for (sub, _, _, _), reply in zip(plans, replies, strict=True):
                if reply is PENDING:
                    out += 1
                elif not isinstance(reply, Exception) and sub.reply_ttl(reply) is None:
                    granted += 1
            return settled(granted, out, need)

        return enough

    async def lock(self, owner: int, lease_time: object) -> None:
        """Acquire, waiting as long as it takes."""
        await self.try_lock(owner, math.inf, lease_time)

    async def acquire(self, owner: int, blocking: object, timeout: object) -> bool:
        """The ``threading.Lock.acquire(blocking, timeout)`` protocol."""
        return await self.try_lock(owner, threading_wait(blocking, timeout), None)

    # -- release ------------------------------------------------------------------------------

    async def _release(self, holds: list[tuple[LockCore, str]], *, retry: bool = True) -> list[Any]:
        """Release one hold of each ``(sub-lock, field)`` in parallel; returns the replies.

        ``retry``: retry unreachable sub-locks alone until a quorum is released (an unlock);
        without it, one parallel pass and what could not be reached expires by its lease (a
        failed attempt cleaning up, which must not eat into the caller's wait).
        """
        if not holds:
            return []
        own_keys = [_own_keys(sub) for sub, _ in holds]
        # One random id per release, made unique per call by its index: an unlock key is
        # per call (two holds of one sub-lock in a set must not share one) [hot-6].
        request_id = new_request_id()
        calls: list[tuple[Call, str]] = [
            _release_call(sub, field, f"{request_id}:{i}") for i, (sub, field) in enumerate(holds)
        ]
        need = self.need

        def quorum_released(replies: Sequence[Any]) -> bool:
            return released_enough(sum(1 for reply in replies if reply in (0, 1)), need)

        # With a quorum released, the rest finishes in the background (each within its
        # server's timeout, its book-keeping done by the call's on_orphan).
        replies = await self._ex.eval_many([call for call, _ in calls], quorum_released)
        enough = quorum_released(replies)
        for i, reply in enumerate(replies):
            sub, field = holds[i]
            pending = reply is PENDING
            if pending and (enough or not retry):  # finished in the background; unknown
                sub.releases.settle(field, reply, calls[i][1], unknown=True)
                continue
            unknown = pending or (isinstance(reply, TransportError) and reply.maybe_executed)
            if isinstance(reply, ServerReplyError) and sub.refuses_own_keys(
                reply, tried=own_keys[i]
            ):
                # An ACL for Redisson's keys only (nothing ran): Redisson's script instead.
                calls[i] = _release_call(sub, field, new_request_id())
                replies[i], unknown = await sub.releases.retry(calls[i][0])
            elif (pending or isinstance(reply, TransportError)) and retry and not enough:
                # Retry alone (idempotent by its unlock key, kept while a copy may still run):
                # unreachable, or still to come when the fan-out stopped waiting. Once enough
                # sub-locks are released, the rest are left to expire: a dead master costs
                # nothing.
                replies[i], retried_unknown = await sub.releases.retry(calls[i][0])
                unknown = unknown or retried_unknown
            sub.releases.settle(field, replies[i], calls[i][1], unknown=unknown)
        return replies

    async def unlock_on_exit(self, owner: int) -> None:
        """The release that ends ``with lock:`` (``LockCore.unlock_on_exit``): quiet when
        every sub-lock's ``raise_on_release_error`` is off."""
        raises = any(sub.raises_on_release_error() for sub in self.locks)
        await release_on_exit(self.unlock(owner), raises=raises)

    async def unlock(self, owner: int) -> None:
        """Release one hold of every sub-lock, in parallel.

        Raises:
            LockNotHeldError: fewer sub-locks than required were held (MultiLock: any one
                not held), after releasing the others: the ones known not to be held leave
                no quorum, whatever the unreachable ones hold.
            TransportError: too many sub-locks could not be reached to release them (the
                lock may still be held on them, until their leases end).
        """
        await releasing(self._ex, self._unlock(owner))

    async def _unlock(self, owner: int) -> None:
        holds = [(sub, _released(sub, owner)) for sub in self.locks]
        self._validity.pop(owner, None)
        self._unwatch(owner)
        replies = await self._release(holds)
        released = sum(1 for reply in replies if reply in (0, 1))
        if released >= self.need:
            return
        errors = [reply for reply in replies if isinstance(reply, TransportError)]
        # "Not held" only when the sub-locks known not to be held leave no quorum: where one
        # could not be reached, the lock may still be held there (a RedLock held on exactly
        # a quorum, one member frozen at the release), and that is a transport error. (No
        # reply is PENDING here: short of a quorum, _release retried each one.)
        if released + len(errors) < self.need:
            raise self._not_held(
                owner, f": {released} of {len(self.locks)} sub-locks released, {self.need} required"
            ) from (errors[0] if errors else None)
        raise errors[0]

    def _not_held(self, owner: int, why: str = "") -> LockNotHeldError:
        return LockNotHeldError(
            f"{self.kind} of {self.name} is not held by owner {owner}{why}",
            name=self.error_name,
            owner=str(owner),
        )

    # -- loss -----------------------------------------------------------------------------

    def _watch(self, owner: int, taken: Sequence[int]) -> None:
        """``owner`` acquired the sub-locks at ``taken``: their losses count from now."""
        self._lost.pop(owner, None)
        watch = self._watches.get(owner)
        if watch is None:
            watch = self._watches[owner] = _Watch()
        watch.depth += 1
        watch.held.update(taken)

    def sub_lost(self, holds: Holds, field: str, reason: LossReason) -> None:
        """The hold of ``field`` on the sub-lock whose :class:`Holds` is ``holds`` was lost
        (on that sub-lock's client's services thread): tell the owner's loss of the whole,
        once, when too few of its sub-locks still hold it."""
        # Copies (each made in one step): the callers' threads add and remove meanwhile.
        for owner, watch in list(self._watches.items()):
            hit = [
                i
                for i in tuple(watch.held)
                if self.locks[i].holds is holds and self.locks[i].field(owner) == field
            ]
            if hit:
                self._lost_part(owner, watch, hit, reason)

    def _lost_part(self, owner: int, watch: _Watch, lost: list[int], reason: LossReason) -> None:
        with self._mutex:
            watch.lost.update(lost)
            if watch.told or len(watch.held - watch.lost) >= self.need:
                return  # a minority of a RedLock's: still held
            watch.told = True
            self._lost[owner] = reason
        log.warning(
            "%s held by owner %s was lost: %d of %d sub-locks lost (%s), %d required",
            self.context("the"),
            owner,
            len(watch.lost),
            len(self.locks),
            reason,
            self.need,
        )
        _observe.lost(self.kind, reason)
        if self.on_lost is not None:
            self.on_lost(self.error_name, reason)

    def _unwatch(self, owner: int) -> None:
        """One release of ``owner``'s hold began: at the last, its losses no longer count."""
        self._lost.pop(owner, None)
        watch = self._watches.get(owner)
        if watch is None:
            return
        watch.depth -= 1
        if watch.depth <= 0:
            self._watches.pop(owner, None)

    def lost_reason(self, owner: int) -> LossReason | None:
        """Why ``owner``'s hold is known to be lost (too few sub-locks hold it, or its lease
        ran out), or ``None``; no Redis call is made."""
        reason = self._lost.get(owner)
        if reason is not None:
            return reason
        watch = self._watches.get(owner)
        if watch is None:
            return None
        reasons = [
            why for i in watch.held if (why := self.locks[i].holds.lost_reason(owner)) is not None
        ]
        return reasons[0] if len(watch.held) - len(reasons) < self.need else None

    async def ensure_held(self, owner: int) -> None:
        """Check, in Redis, that ``owner`` still holds the required sub-locks.

        Raises:
            LockLostError: the hold was lost (too few sub-locks still hold it).
            LockNotHeldError: ``owner`` never acquired it (or released it).
        """
        reason = self.lost_reason(owner)
        held = await self._count_held(owner) if reason is None else 0
        if reason is None and held >= self.need:
            return
        if owner in self._watches or reason is not None:
            why = reason or f"{held} of {len(self.locks)} sub-locks hold it, {self.need} required"
            raise LockLostError(
                f"{self.kind} of {self.name} held by owner {owner} was lost: {why}",
                name=self.error_name,
                owner=str(owner),
            )
        raise self._not_held(owner)

    # -- queries ------------------------------------------------------------------------------

    async def _count_held(self, owner: int | None) -> int:
        """How many sub-locks ``owner`` holds (``None``: anyone)."""
        held = 0
        for sub in self.locks:
            with contextlib.suppress(TransportError):  # unreachable: nothing to count on
                held += await (sub.is_locked() if owner is None else sub.is_held_by(owner))
        return held

    async def is_held_by(self, owner: int) -> bool:
        """Whether ``owner`` holds the required number of sub-locks."""
        return await self._count_held(owner) >= self.need

    async def is_locked(self) -> bool:
        """Whether the required number of sub-locks are held (by anyone)."""
        return await self._count_held(None) >= self.need

    def validity_time(self, owner: int) -> float | None:
        """Seconds left of ``owner``'s validity time; ``None`` without a lease or a hold."""
        entry = self._validity.get(owner)
        if entry is None:
            return None
        validity, at = entry
        return max(0.0, validity - (self._ex.monotonic() - at))

    async def statistics(self, owner: int) -> tuple[LockStatistics, ...]:
        """Each sub-lock's snapshot for ``owner``, in order."""
        return tuple([await lock.statistics(owner) for lock in self.locks])


@attrs.define(eq=False)
class _FanOut:
    """One MultiLock ``try_lock``'s attempts, and how its waiter parks between them (its
    plan's ``park``, ``syncprims._core.waiting``), as ``docs/multi-lock.md`` says: between
    attempts the waiter waits on the release channel of a sub-lock held by someone else
    (subscribed at the first attempt that finds one, then tried again at once), at most the
    jittered back-off and the holders' TTLs; while no sub-lock was found held, it sleeps
    that back-off."""

    core: MultiLockCore
    owner: int
    plans: list[Plan]
    lease_s: float | None
    backoff: float = attrs.field(default=MIN_BACKOFF, init=False)
    busy: Plan | None = attrs.field(default=None, init=False)  # a sub-lock found held, if any
    hints: list[float] = attrs.field(factory=list, init=False)  # the TTLs of those, seconds
    waiting: tuple[Executor, Subscription] | None = attrs.field(default=None, init=False)
    # sub-locks with an acquire whose reply may come
    unsettled: set[int] = attrs.field(factory=set, init=False)

    async def attempt(self) -> int | None:
        """One fan-out attempt (again at once after an ACL refusal turned a sub-lock to
        Redisson's scripts): ``None`` when acquired, else -1 (what it found is kept for
        the park). What a failed attempt took is released first.

        Raises:
            LockReentryError: a non-reentrant sub-lock is held by this owner already.
            ServerReplyError: a server refused a sub-lock's script.
        """
        core, owner, plans = self.core, self.owner, self.plans
        ex = core._ex
        while True:
            started = ex.monotonic()
            own_keys = [_own_keys(sub) for sub, _, _, _ in plans]
            replies = await ex.eval_many(core._acquire_calls(owner, plans), core._settled(plans))
            self.unsettled.update(
                i
                for i, reply in enumerate(replies)
                if reply is PENDING or (isinstance(reply, TransportError) and reply.maybe_executed)
            )
            elapsed = ex.monotonic() - started
            ttls: list[object] = [
                reply
                if reply is PENDING or isinstance(reply, Exception)
                else plans[i][0].reply_ttl(reply)
                for i, reply in enumerate(replies)
            ]
            taken = [i for i, ttl in enumerate(ttls) if ttl is None]
            # Validity left, also under the watchdog (its first lease): grants whose
            # replies came after it (the process was paused mid-acquire) may be someone
            # else's by now, and are given back.
            lease_s = self.lease_s
            limit = lease_s if lease_s is not None else min(p[2] for p in plans) / 1000
            left = limit - elapsed - drift(limit)
            if len(taken) >= core.need and left > 0:
                for i in taken:
                    sub, field, lease, watchdog = plans[i]
                    sub.acquired(field, lease, watchdog, replies[i], since=started)
                for sub in core.locks:  # each sub-lock's holds, as its unlock counts them
                    sub.releases.count_hold(owner, 1)
                core._watch(owner, taken)
                if lease_s is not None:  # validity counted from the attempt's start
                    core._validity[owner] = (left + elapsed, started)
                return None
            if len(taken) >= core.need:
                log.warning(
                    "%s: the grants came %.3f s after they were asked for, past the "
                    "%.3f s lease: not taken",
                    core.context("acquiring"),
                    elapsed,
                    limit,
                )
            # Replies that may have taken a sub-lock: lost ones, and script errors (a
            # script can fail after it wrote), but for a non-reentrant sub-lock's refusal
            # of a reentry (nothing written; the owner's hold there stays).
            refused = [i for i, reply in enumerate(replies) if isinstance(reply, ServerReplyError)]
            reentry = [i for i in refused if replies[i].code == REENTRY_ERR]
            lost = [
                i
                for i, reply in enumerate(replies)
                if (isinstance(reply, TransportError) and reply.maybe_executed)
                or (isinstance(reply, ServerReplyError) and reply.code != REENTRY_ERR)
            ]
            await core._release([(plans[i][0], plans[i][1]) for i in taken + lost], retry=False)
            if reentry:
                sub, field = plans[reentry[0]][0], plans[reentry[0]][1]
                raise LockReentryError(
                    f"{core.kind} through {sub.kind} {sub.name!r}: non-reentrant and "
                    f"already held by owner {field}",
                    name=sub.name,
                    owner=field,
                ) from replies[reentry[0]]
            # An ACL for Redisson's keys only: those sub-locks use Redisson's scripts
            # from now on (nothing ran); try again at once.
            if refused and all(
                plans[i][0].refuses_own_keys(replies[i], tried=own_keys[i]) for i in refused
            ):
                continue
            if refused:  # not contention: waiting would not help
                raise replies[refused[0]]
            busy = [i for i, ttl in enumerate(ttls) if isinstance(ttl, int)]
            self.busy = plans[busy[0]] if busy else None
            self.hints = [t / 1000 for t in (ttls[i] for i in busy) if isinstance(t, int) and t > 0]
            return -1

    async def __call__(self, sub: Subscription | None, pause: float) -> None:
        """The park: at most ``pause`` seconds and the back-off (class docstring)."""
        pause = min(pause, self.backoff * random.uniform(0.5, 1.0))
        self.backoff = min(self.backoff * 2, MAX_BACKOFF)
        waiting, busy = self.waiting, self.busy
        if waiting is None and busy is not None:
            held, field = busy[0], busy[1]
            held_ex = held.executor
            channel = await held_ex.subscribe(held.wait_channel(field), lock_policy, held.name)
            self.waiting = (held_ex, channel)
            await held_ex.wait_ready(channel, pause)  # then tried again at once
        elif waiting is not None:
            await waiting[0].wait(waiting[1], min([pause, *self.hints]))
        else:
            await self.core._ex.sleep(pause)

    def end(self) -> None:
        """The attempts are over (acquired, given up, or failed): unsubscribe, and give a
        new field to an owner whose late reply may still come."""
        if self.waiting is not None:
            self.waiting[0].unsubscribe(self.waiting[1])
        # The late reply of such an acquire is undone by unlocking its field (its
        # on_orphan); read after the lease it set ran out, that undo would end the
        # owner's next hold of the field. So where a late reply may still be read that
        # late, the next hold takes a new field, as an RLock's does (``Releases.taint``).
        # Retries within this call keep theirs, and so does a late reply read within
        # its lease (a fresh field there left a RedLock unable to retake resumed
        # masters: their old fields' grants, whose replies were never read, held them).
        for i in self.unsettled:
            sub, field, lease, _ = self.plans[i]
            if lease / 1000 <= sub.executor.late_reply_window:
                sub.releases.taint(field)


class RedLockCore(MultiLockCore):
    """A majority of the sub-locks, on independent masters."""

    KIND = KINDS["redlock"]
    kind = KIND.display

    @staticmethod
    def needed(count: int) -> int:
        """A majority (``syncprims._protocol.quorum.majority``)."""
        return majority(count)
