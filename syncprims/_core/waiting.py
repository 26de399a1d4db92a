"""The waiting mechanism every waiting primitive shares: one loop, :func:`acquire_loop`, and
a plan per wait (:class:`WaitPlan`) that the primitive's wake-up part builds, as trio's
``ParkingLot`` is the one way to wait (``docs/design.md``, "Waking waiters"). Redisson
``RedissonLock#tryLock(waitTime, leaseTime)`` (redisson-spec.md 2.3)::

    attempt -> subscribe -> (attempt -> wait at most min(ttl, remaining))* -> unsubscribe

An attempt returns ``None`` when it acquired, or how long (ms) the current holder may keep
the resource (``-1``: unknown / no expiry; ``0``: free but another waiter goes first, tried
again after a back-off of 5 ms doubling up to 100 ms where Redisson spins, redisson-spec.md
13 item 3). A subscription Redis does not confirm degrades the wait to polling, an unsent
attempt during an outage is tried again until the deadline, and one that may have run is
never re-sent (``docs/locks.md``, "Waiting"). A SpinLock polls instead (:func:`poll_loop`).
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable, Iterator
from typing import Protocol

import attrs

from syncprims._protocol.contracts import Executor, Subscription, WakePolicy
from syncprims.errors import TransportError

__all__ = ["Park", "WaitPlan", "Waiters", "acquire_loop", "poll_loop", "waiters", "waiting"]

log = logging.getLogger("syncprims")

Attempt = Callable[[], Awaitable[int | None]]
GiveUp = Callable[[], Awaitable[None]]

OUTAGE = -2
MIN_BACKOFF = 0.005
MAX_BACKOFF = 0.1


class Park(Protocol):
    """How a waiter blocks between two attempts, at most ``pause`` seconds (> 0), in place
    of ``ex.wait`` on the plan's subscription ``sub`` (``None``: the plan names no channel).
    Not while Redis is unreachable: the loop then paces the retries itself."""

    def __call__(self, sub: Subscription | None, pause: float) -> Awaitable[None]: ...


@attrs.frozen
class WaitPlan:
    """How one acquisition waits (module docstring), built by the object's wake-up part.

    Attributes:
        wait: seconds; 0 for a single attempt, ``math.inf`` for no limit.
        channel: the pub/sub channel that announces releases; ``""`` for none of the loop's
            own (then ``park`` waits as it sees fit, or the loop sleeps).
        policy: how that channel's messages wake waiters.
        route: the key of the object the channel belongs to (a cluster routes by it), and
            the name its waiters are counted under (:func:`waiters`).
        herald: a second channel and its rule, subscribed for as long as ``channel``: its
            messages leave notes that ``policy`` reads (an RLock's one wake-up per release).
        give_up: awaited when the wait ends without the resource, also when the caller is
            cancelled or interrupted while waiting (a fair lock leaves its queue).
        park: blocks between attempts (:class:`Park`); ``None``: ``ex.wait`` on ``channel``.
        first: the reply (a TTL, ms) of an attempt the caller made just before, not
            subscribed: the loop goes on from it instead of making its own first attempt
            (the next one comes once subscribed, as always).
        started: when the wait began (``ex.monotonic()``), if before the loop (that first
            attempt's start): the deadline counts from it.
        context: what the wait is, for the error of a shutdown that ends it (default:
            ``waiting on '<channel>'``).
    """

    wait: float
    channel: str
    policy: WakePolicy | None = None
    route: str | None = None
    herald: tuple[str, WakePolicy] | None = None
    give_up: GiveUp | None = None
    park: Park | None = None
    first: int | None = None
    started: float | None = None
    context: str = ""


@attrs.define(eq=False)
class Waiters:
    """How many callers of one client wait for each object now (``statistics()``): a part
    of the client's state (``Executor.state``)."""

    counts: Counter[str] = attrs.field(factory=Counter)
    mutex: threading.Lock = attrs.field(factory=threading.Lock)

    def clear(self) -> None:
        """Forget every count (a forked child: its parent's waiters are not its own)."""
        Waiters.__init__(self)


def waiters(ex: Executor, name: str) -> int:
    """How many callers of ``ex``'s client wait for the object ``name`` now."""
    part = ex.state.of(Waiters)
    with part.mutex:
        return part.counts[name]


@contextlib.contextmanager
def waiting(ex: Executor, name: str | None) -> Iterator[None]:
    """Count the caller among ``name``'s waiters (for ``statistics()``) while in the block,
    and as work that shutdown lets finish (``Executor.release_started``): a wait that ends
    must leave its registration and give back a grant made meanwhile, which needs the
    connections shutdown would close. Shutdown wakes every waiter; the loop then raises
    ``ClientClosedError`` (``Executor.refuse_if_closing``) and gives up cleanly."""
    ex.release_started()
    try:
        if name is None:
            yield
            return
        part = ex.state.of(Waiters)
        with part.mutex:
            part.counts[name] += 1
        try:
            yield
        finally:
            with part.mutex:
                counts = part.counts
                counts[name] -= 1
                if counts[name] <= 0:
                    del counts[name]
    finally:
        ex.release_ended()


@attrs.define(eq=False)
class _Attempts:
    """A wait's attempts, with an unsent one during an outage read as "wait"
    (:data:`OUTAGE`) until the deadline (module docstring)."""

    ex: Executor
    attempt: Attempt
    deadline: float
    outages: int = attrs.field(default=0, init=False)

    async def __call__(self) -> int | None:
        try:
            ttl = await self.attempt()
        except TransportError as error:
            if error.maybe_executed or self.ex.monotonic() >= self.deadline:
                raise
            if self.outages == 0:
                log.warning(
                    "Redis unreachable while waiting (%s); retrying until the wait ends", error
                )
            self.outages += 1
            return OUTAGE
        self.outages = 0
        return ttl


async def acquire_loop(ex: Executor, attempt: Attempt, plan: WaitPlan) -> bool:
    """Acquire with ``attempt`` within ``plan.wait`` seconds, waiting as ``plan`` says.

    Returns:
        ``True`` when acquired, ``False`` when the wait ran out.

    Raises:
        What ``attempt`` raises (but an unsent attempt during an outage, before the
        deadline), and ``ClientClosedError`` when shutdown ends the wait; the plan's
        ``give_up`` has run then.
    """
    start = ex.monotonic() if plan.started is None else plan.started
    attempts = _Attempts(ex, attempt, start + plan.wait)
    early = await _take_lingering(ex, plan) if plan.wait > 0 and plan.channel else None
    ttl = plan.first
    if ttl is None:
        try:
            ttl = await attempts()
        except BaseException:
            _drop(ex, early)
            raise
        if ttl is None:
            _drop(ex, early)
            return True
    if plan.wait <= 0 or ex.monotonic() >= attempts.deadline:
        _drop(ex, early)
        await _give_up(plan.give_up)
        return False
    with waiting(ex, plan.route):
        subs = early
        try:
            if subs is None and plan.channel:
                subs = await _subscribe(ex, plan)  # none left taken if it raises
            acquired = await _parked(ex, attempts, plan, ttl, subs=subs, early=early is not None)
        except BaseException:
            await _give_up(plan.give_up, quietly=True)
            raise
        finally:
            _drop(ex, subs)
        if not acquired:
            await _give_up(plan.give_up)
        return acquired


async def _parked(
    ex: Executor,
    attempts: _Attempts,
    plan: WaitPlan,
    ttl: int,
    *,
    subs: tuple[Subscription | None, Subscription] | None,
    early: bool,
) -> bool:
    """:func:`acquire_loop` once subscribed (``subs``; ``early``: before the first attempt):
    attempt, then park at most min(the holder's TTL, the time left, the re-check interval),
    until acquired (``True``) or out of time (``False``)."""
    config = ex.config
    sub = None if subs is None else subs[1]
    if sub is not None and not early:
        # at most until the holder's lease may run out, too: an expiry publishes
        # nothing, so a slow confirmation must not delay the re-check past it
        confirm = min(attempts.deadline - ex.monotonic(), config.subscription_timeout)
        await ex.wait_ready(sub, min(confirm, ttl / 1000) if ttl > 0 else confirm)
    # Subscribed before the first attempt (a lingering subscription): a release after it
    # left a wake-up, so the first attempt's answer stands; otherwise one more attempt now
    # that the subscription is confirmed (a release in between would be missed). (Not so
    # for the plan's ``first``: it ran before the subscription was taken.) Without a
    # channel, nothing was missed: the first answer stands.
    attempted = sub is None or (early and plan.first is None)
    backoff = MIN_BACKOFF
    park = plan.park
    closing = plan.context or f"waiting on {plan.channel!r}"
    while True:
        if not attempted:
            reply = await attempts()
            if reply is None:
                return True
            ttl = reply
        attempted = False
        remaining = attempts.deadline - ex.monotonic()
        if remaining <= 0:
            return False
        pause = min(remaining, config.wait_recheck_interval)
        if ttl == OUTAGE:
            pause = min(remaining, ex.retry_delay(min(attempts.outages, 10)))
        elif ttl > 0:
            pause = min(pause, ttl / 1000)
            backoff = MIN_BACKOFF
        elif ttl == 0:  # free but not ours yet (a fair lock's head waiter), or expiring now
            pause = min(pause, backoff)
            backoff = min(backoff * 2, MAX_BACKOFF)
        if park is not None and ttl != OUTAGE:
            await park(sub, pause)
        elif sub is not None:
            await ex.wait(sub, pause)
        else:
            await ex.sleep(pause)
        ex.refuse_if_closing(closing)  # shutdown woke it


async def _take_lingering(
    ex: Executor, plan: WaitPlan
) -> tuple[Subscription | None, Subscription] | None:
    """References on the plan's channel (and herald) when the channel is subscribed and
    confirmed already (a wait moments ago left it lingering: a contended lock), else
    ``None``. Taken before the first attempt, they keep a wake-up for every release after
    it, which saves the attempt after subscribing (profile: docs/design.md)."""
    if not ex.subscribed(plan.channel, plan.route):
        return None
    subs = await _subscribe(ex, plan)
    if ex.subscribed(plan.channel, plan.route):  # still the confirmed one (ours now: not swept)
        return subs
    _drop(ex, subs)
    return None


async def _subscribe(ex: Executor, plan: WaitPlan) -> tuple[Subscription | None, Subscription]:
    """References on the plan's herald (first: its notes must be there for the channel's
    messages) and channel; none is left taken if this raises."""
    herald, route = plan.herald, plan.route
    assert plan.policy is not None  # a plan with a channel names its rule
    herald_sub = await ex.subscribe(herald[0], herald[1], route) if herald is not None else None
    try:
        return herald_sub, await ex.subscribe(plan.channel, plan.policy, route)
    except BaseException:
        if herald_sub is not None:
            ex.unsubscribe(herald_sub)
        raise


def _drop(ex: Executor, subs: tuple[Subscription | None, Subscription] | None) -> None:
    if subs is None:
        return
    herald_sub, sub = subs
    ex.unsubscribe(sub)
    if herald_sub is not None:
        ex.unsubscribe(herald_sub)


async def _give_up(on_give_up: GiveUp | None, *, quietly: bool = False) -> None:
    if on_give_up is None:
        return
    try:
        await on_give_up()
    except Exception as error:
        if not quietly:
            raise
        # already leaving with an error (or a cancellation): do not mask it
        log.warning("giving up a wait failed (%r); the waiter's slot expires by itself", error)


async def poll_loop(
    ex: Executor, attempt: Attempt, *, wait: float, delays: Iterable[float], route: str
) -> bool:
    """Acquire with ``attempt`` within ``wait`` seconds, sleeping ``delays`` between attempts.

    No subscription (Redisson ``RedissonSpinLock#tryLock``): each pause is the next delay, cut
    to the time left. An unsent attempt during an outage counts as a failed one, as in
    :func:`acquire_loop`; an attempt that may have run is never re-sent.

    Returns:
        ``True`` when acquired, ``False`` when ``wait`` ran out.
    """
    attempts = _Attempts(ex, attempt, ex.monotonic() + wait)
    if await attempts() is None:
        return True
    with waiting(ex, route):
        for delay in delays:
            remaining = attempts.deadline - ex.monotonic()
            if remaining <= 0:
                return False
            await ex.sleep(min(delay, remaining))
            ex.refuse_if_closing("polling")
            if await attempts() is None:
                return True
    return False
