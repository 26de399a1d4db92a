"""The acquire skeleton shared by every waiting primitive.

Redisson ``RedissonLock#tryLock(waitTime, leaseTime)`` (redisson-spec.md 2.3)::

    attempt -> subscribe -> (attempt -> wait at most min(ttl, remaining))* -> unsubscribe

An attempt returns ``None`` when it acquired, or how long (ms) the current holder may keep
the resource (``-1``: unknown / no expiry). The wait is bounded by that TTL because a lock
that expires publishes nothing, and by ``Config.wait_recheck_interval`` so that a lost
message cannot stall a waiter for long.

Differences from Redisson, on purpose: a subscription that Redis does not confirm within
``Config.subscription_timeout`` does not fail the acquire; the waiter goes on, bounded by
the TTL and the re-check interval (degraded to polling while pub/sub is down), so a broken
subscriber connection neither hangs nor fails ``lock()``. An attempt that answers 0 ("free,
but another waiter goes first") is retried after a short back-off, 5 ms doubling up to
100 ms, instead of at once (Redisson spins there: redisson-spec.md 13 item 3).

A Redis outage during a wait (connection refused or reset before the attempt was sent, so the
attempt certainly did not run) does not end the wait: the attempt is tried again after a
back-off (``Config.retry_delay``, equal jitter) until the wait's deadline, and the last
error is raised if the deadline passes while Redis is still unreachable. An attempt that may
have run (a timeout after sending) is never re-sent: its error propagates at once, so a lost
reply cannot double-apply an acquire. ``lock()`` (no deadline) therefore rides out a restart
of any length; ``try_lock(wait_time=w)`` answers within ``w`` plus one call.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import weakref
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable, Iterator

from syncprims._protocol.contracts import Executor, Subscription, WakePolicy
from syncprims.errors import TransportError

__all__ = ["acquire_loop", "poll_loop", "waiters", "waiting"]

log = logging.getLogger("syncprims")

Attempt = Callable[[], Awaitable[int | None]]

_WAITERS: weakref.WeakKeyDictionary[Executor, Counter[str]] = weakref.WeakKeyDictionary()
_WAITERS_MUTEX = threading.Lock()


def waiters(ex: Executor, name: str) -> int:
    """How many callers of ``ex``'s client wait for the object ``name`` now."""
    with _WAITERS_MUTEX:
        counts = _WAITERS.get(ex)
        return 0 if counts is None else counts[name]


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
        with _WAITERS_MUTEX:
            _WAITERS.setdefault(ex, Counter())[name] += 1
        try:
            yield
        finally:
            with _WAITERS_MUTEX:
                counts = _WAITERS[ex]
                counts[name] -= 1
                if counts[name] <= 0:
                    del counts[name]
    finally:
        ex.release_ended()


async def acquire_loop(
    ex: Executor,
    attempt: Attempt,
    *,
    channel: str,
    policy: WakePolicy,
    wait: float,
    route: str | None = None,
    on_give_up: Callable[[], Awaitable[None]] | None = None,
    herald: tuple[str, WakePolicy] | None = None,
    first: int | None = None,
    started: float | None = None,
    block: Callable[[Subscription, float], Awaitable[None]] | None = None,
) -> bool:
    """Acquire with ``attempt`` within ``wait`` seconds (``math.inf``: no limit).

    Args:
        ex: the executor.
        attempt: one acquire attempt (see the module docstring).
        channel: the pub/sub channel that announces releases.
        route: the key of the object the channel belongs to (a cluster routes by it).
        policy: how that channel's messages wake waiters.
        wait: seconds; 0 for a single attempt.
        on_give_up: awaited when the wait ends without the resource, also when the caller
            is cancelled or interrupted while waiting (a fair lock leaves its queue).
        herald: a second channel and its rule, subscribed for as long as ``channel``: its
            messages leave notes that ``policy`` reads (an RLock's one wake-up per release).
        first: the reply (a TTL, ms) of an attempt the caller made just before, not
            subscribed: the loop goes on from it instead of making its own first attempt
            (the next one comes once subscribed, as always).
        started: when the wait began (``ex.monotonic()``), if before this call (that first
            attempt's start): the deadline counts from it.
        block: waits between attempts, at most the given seconds (> 0), in place of
            ``ex.wait`` on ``channel``'s subscription (an RLock's direct grant pops a list);
            not while Redis is unreachable (``ex.wait`` then paces the retries).

    Returns:
        ``True`` when acquired, ``False`` when ``wait`` ran out.
    """
    start = ex.monotonic() if started is None else started
    deadline = start + wait
    outages = 0

    async def attempt_or_outage() -> int | None:
        """``attempt()``, with an unsent attempt during an outage read as "wait" (-2)."""
        nonlocal outages
        try:
            ttl = await attempt()
        except TransportError as error:
            if error.maybe_executed or ex.monotonic() >= deadline:
                raise
            if outages == 0:
                log.warning(
                    "Redis unreachable while waiting (%s); retrying until the wait ends", error
                )
            outages += 1
            return OUTAGE
        outages = 0
        return ttl

    early = await _take_lingering(ex, channel, policy, route, herald) if wait > 0 else None
    ttl = first
    if ttl is None:
        try:
            ttl = await attempt_or_outage()
        except BaseException:
            _drop(ex, early)
            raise
        if ttl is None:
            _drop(ex, early)
            return True
    if wait <= 0 or ex.monotonic() >= deadline:
        _drop(ex, early)
        await _give_up(on_give_up)
        return False
    with waiting(ex, route):
        config = ex.config
        backoff = MIN_BACKOFF
        subs = early
        if subs is None:
            try:
                subs = await _subscribe(ex, channel, policy, route, herald)
            except BaseException:
                await _give_up(on_give_up, quietly=True)
                raise
        sub = subs[1]
        try:
            if early is None:
                await ex.wait_ready(
                    sub, min(deadline - ex.monotonic(), config.subscription_timeout)
                )
            # Subscribed before the first attempt (a lingering subscription): a release
            # after it left a wake-up, so the first attempt's answer stands; otherwise one
            # more attempt now that the subscription is confirmed (a release in between
            # would be missed).
            # (Not so for ``first``: it ran before the subscription was taken.)
            attempted = early is not None and first is None
            while True:
                if not attempted:
                    ttl = await attempt_or_outage()
                    if ttl is None:
                        return True
                attempted = False
                remaining = deadline - ex.monotonic()
                if remaining <= 0:
                    break
                pause = min(remaining, config.wait_recheck_interval)
                if ttl == OUTAGE:
                    pause = min(remaining, ex.retry_delay(min(outages, 10)))
                elif ttl > 0:
                    pause = min(pause, ttl / 1000)
                    backoff = MIN_BACKOFF
                elif ttl == 0:  # free, but not ours yet (a fair lock's head waiter is taking it)
                    pause = min(pause, backoff)
                    backoff = min(backoff * 2, MAX_BACKOFF)
                if block is not None and ttl != OUTAGE:
                    await block(sub, pause)
                else:
                    await ex.wait(sub, pause)
                ex.refuse_if_closing(f"waiting on {channel!r}")  # shutdown woke it
        except BaseException:
            await _give_up(on_give_up, quietly=True)
            raise
        finally:
            _drop(ex, subs)
        await _give_up(on_give_up)
        return False


async def _take_lingering(
    ex: Executor,
    channel: str,
    policy: WakePolicy,
    route: str | None,
    herald: tuple[str, WakePolicy] | None,
) -> tuple[Subscription | None, Subscription] | None:
    """References on ``channel`` (and ``herald``) when ``channel`` is subscribed and
    confirmed already (a wait moments ago left it lingering: a contended lock), else
    ``None``. Taken before the first attempt, they keep a wake-up for every release after
    it, which saves the attempt after subscribing (profile: docs/design.md)."""
    if not ex.subscribed(channel, route):
        return None
    subs = await _subscribe(ex, channel, policy, route, herald)
    if ex.subscribed(channel, route):  # still the confirmed one (ours now: not swept)
        return subs
    _drop(ex, subs)
    return None


async def _subscribe(
    ex: Executor,
    channel: str,
    policy: WakePolicy,
    route: str | None,
    herald: tuple[str, WakePolicy] | None,
) -> tuple[Subscription | None, Subscription]:
    """References on ``herald`` (first: its notes must be there for the channel's messages)
    and ``channel``; none is left taken if this raises."""
    herald_sub = await ex.subscribe(herald[0], herald[1], route) if herald is not None else None
    try:
        return herald_sub, await ex.subscribe(channel, policy, route)
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


OUTAGE = -2
MIN_BACKOFF = 0.005
MAX_BACKOFF = 0.1


async def _give_up(
    on_give_up: Callable[[], Awaitable[None]] | None, *, quietly: bool = False
) -> None:
    if on_give_up is None:
        return
    if not quietly:
        await on_give_up()
        return
    try:  # already leaving with an error (or a cancellation): do not mask it
        await on_give_up()
    except Exception as error:
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
    deadline = ex.monotonic() + wait
    warned = False

    async def attempt_or_outage() -> int | None:
        nonlocal warned
        try:
            return await attempt()
        except TransportError as error:
            if error.maybe_executed or ex.monotonic() >= deadline:
                raise
            if not warned:
                warned = True
                log.warning("Redis unreachable while polling (%s); retrying", error)
            return OUTAGE

    if await attempt_or_outage() is None:
        return True
    with waiting(ex, route):
        for delay in delays:
            remaining = deadline - ex.monotonic()
            if remaining <= 0:
                return False
            await ex.sleep(min(delay, remaining))
            ex.refuse_if_closing("polling")
            if await attempt_or_outage() is None:
                return True
    return False
