"""The one wake-up per release of an RLock (syncprims; docs/grants.md, "One wake-up per
release"): ``lock_acquire_one.lua`` registers each waiting *client* in
``syncprims_lock_waiters:{name}`` and ``lock_unlock_one.lua`` names one of them on the herald
channel before it publishes Redisson's ``0``, so that one client's waiter wakes per release.

A lock that uses it owns one :class:`OneWake` (``LockCore.one_wake``); kinds with scripts of
their own (FairLock, SpinLock, FencedLock, both read-write sides) own none. This module also
holds the lock channels' wake-up rules and builds a lock's :class:`~syncprims._core.waiting.
WaitPlan` (:func:`wait_plan`): the lock's wake-up part.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from syncprims._core.lock.view import LockView
from syncprims._core.waiting import GiveUp, WaitPlan
from syncprims._protocol import scripts
from syncprims._protocol.contracts import Arg, ScriptCall, Wakeable, WakePolicy
from syncprims.errors import ServerReplyError

__all__ = [
    "ONE_WAKE_ENTRY_MS",
    "ONE_WAKE_RESERVATION_MS",
    "ONE_WAKE_SLICE_MS",
    "UNLOCK_MESSAGE",
    "OneWake",
    "herald_policy",
    "lock_policy",
    "one_wake_policy",
    "wait_plan",
]

log = logging.getLogger("syncprims.lock")

UNLOCK_MESSAGE = "0"  # what a release publishes on the lock channel (Redisson's)
ONE_WAKE_ENTRY_MS = 10_000  # a waiting client's registration lives this long (NX: not renewed)
ONE_WAKE_SLICE_MS = 1_000  # a registered waiter attempts (and re-registers) at least this often
ONE_WAKE_RESERVATION_MS = 100  # a released lock waits this long, at most, for the named client


def lock_policy(waiters: Wakeable, message: bytes) -> None:
    """The wake-up rule of lock channels (redisson-spec.md 1.6): ``0`` (a release) wakes one
    local waiter, ``1`` (a write-lock release of a read-write lock) wakes them all.

    Unlike Redisson, ``1`` also leaves a permit for each local user that is between two
    attempts, so that none of them sleeps until the TTL on a message it just missed.
    """
    waiters.take_note()  # a herald's note is for the rule below, never for a later message
    if message == b"1":
        waiters.wake_all()
    else:
        waiters.wake(1)


def wait_plan(
    lock: LockView,
    one_wake: OneWake | None,
    channel: str,
    wait: float,
    *,
    give_up: GiveUp | None,
    plain: tuple[int | None, float | None],
) -> WaitPlan:
    """How a lock's wait for ``wait`` seconds on ``channel`` waits: through the herald of the
    one wake-up per release when the lock has one (and its client may use its keys), else
    by :func:`lock_policy`. ``plain``: the reply of a plain first attempt and when it was sent
    (or ``None``s): the wait goes on from it."""
    first, started = plain
    policy: WakePolicy = lock_policy
    herald = None
    if one_wake is not None and wait > 0 and not lock.client_state.own_keys_refused:
        policy, herald = one_wake.rules()
    return WaitPlan(wait, channel, policy, lock.name, herald, give_up, first=first, started=started)


def one_wake_policy(client_id: str) -> WakePolicy:
    """The wake-up rule of an RLock channel with one wake-up per release: a ``0`` that a
    herald note names another client for lets this client's waiters sleep on; a ``0`` naming
    this client, or with no note (a release by a Redisson client, or a herald this client
    has not subscribed yet), wakes one local waiter, as ``lock_policy`` does."""
    me = client_id.encode()

    def policy(waiters: Wakeable, message: bytes) -> None:
        note = waiters.take_note()
        if message == b"1":
            waiters.wake_all()
        elif note is None or note == me:
            waiters.wake(1)

    return policy


def herald_policy(channel: str) -> WakePolicy:
    """The rule of an RLock's herald channel: its message (the client id a release names)
    is left as a note for the very next message on the lock's ``channel``."""

    def policy(waiters: Wakeable, message: bytes) -> None:
        waiters.tell(channel, message)

    return policy


class OneWake:
    """One lock object's part of the one wake-up per release: its scripts' calls, its
    wake-up rules, and the registration of this process's waiting callers."""

    __slots__ = ("_client", "_ex", "_kept", "_lock", "_rules")

    def __init__(self, lock: LockView) -> None:
        self._lock = lock
        self._ex = lock.executor
        self._client = lock.client_state
        self._kept = self._client.kept  # calls encoded once, per client (kept.py)
        self._rules: tuple[WakePolicy, tuple[str, WakePolicy]] | None = None

    def rules(self) -> tuple[WakePolicy, tuple[str, WakePolicy]]:
        """The lock channel's and the herald's wake-up rules (made once per lock object)."""
        rules = self._rules
        if rules is None:
            lock = self._lock
            rules = self._rules = (
                one_wake_policy(self._ex.client_id),
                (lock.herald, herald_policy(lock.channel)),
            )
        return rules

    def first_command(self, field: str, lease: int, wait: float) -> ScriptCall:
        """An attempt's call outside a grant wait: it tells whether this caller waits
        (``wait``, seconds) and whether other callers of this client wait too."""
        lock = self._lock
        waiting = len(self._client.local_waiters.get(lock.name, ()))
        others = waiting - 1 if wait > 0 else waiting  # a waiting caller counts itself
        kept = self._kept  # encoded once (kept.py)
        # with the scripts' constants, which a test may change
        key = (
            "acquire_one",  # a str: its hash is kept (a Script's is computed each time)
            lock.name,
            field,
            lease,
            wait > 0,
            others > 0,
            ONE_WAKE_ENTRY_MS,
            ONE_WAKE_SLICE_MS,
        )
        call = kept.get(key)
        if call is not None:
            return call
        return kept.keep(
            key,
            self.acquire_command(
                field,
                lease,
                "1" if wait > 0 else "0",
                "1" if others > 0 else "0",
                member="",
                fresh="",
            ),
        )

    def acquire_command(
        self, field: str, lease: int, waits: str, others: str, *, member: str, fresh: str
    ) -> ScriptCall:
        """``lock_acquire_one.lua``; ``member``/``fresh``: a one-hop grant's registrations."""
        lock = self._lock
        return ScriptCall(
            scripts.LOCK_ACQUIRE_ONE,
            [lock.name, lock.waiters_key, lock.reservation, lock.grant_marker],
            [
                lease,
                field,
                self._ex.client_id,
                waits,
                others,
                ONE_WAKE_ENTRY_MS,
                ONE_WAKE_SLICE_MS,
                member,
                fresh,
            ],
        )

    def unlock_command(self, field: str, lease: int, unlock_key: str, give_back: str) -> ScriptCall:
        """``lock_unlock_one.lua``; ``give_back``: the member of a grant to give back."""
        lock = self._lock
        keys = [
            lock.name,
            lock.channel,
            unlock_key,
            lock.waiters_key,
            lock.herald,
            lock.reservation,
            lock.grant_marker,
            lock.handoff_prefix,
        ]
        ex = self._ex
        publish = ex.publish_command_for(lock.channel, lock.name)
        latch_ttl = ex.bounds.unlock_key_ttl_ms
        args: list[Arg] = [
            UNLOCK_MESSAGE,
            lease,
            field,
            publish,
            latch_ttl,
            ONE_WAKE_RESERVATION_MS,
            lock.grant_prefix,
            give_back,
        ]
        key = (
            "unlock_one",
            lock.name,
            field,
            lease,
            give_back,
            publish,
            latch_ttl,
            ONE_WAKE_RESERVATION_MS,
        )
        return self._kept.spliced(key, scripts.LOCK_UNLOCK_ONE, keys, args, 2)  # the unlock key

    def enter(self) -> object:
        """A caller of this process starts waiting for the lock: its token."""
        token = object()
        self._client.local_waiters.setdefault(self._lock.name, set()).add(token)
        return token

    def leave(self, token: object) -> None:
        """The caller of ``token`` stopped waiting."""
        name = self._lock.name
        waiting = self._client.local_waiters
        tokens = waiting.get(name)
        if tokens is not None:
            tokens.discard(token)
            if not tokens:
                waiting.pop(name, None)

    def give_up(self) -> Callable[[], Awaitable[None]]:
        """What a waiter that stops without the lock runs: the client leaves the registry,
        unless other callers of this client still wait."""
        lock, ex, client = self._lock, self._ex, self._client

        async def leave() -> None:
            if client.own_keys_refused:  # fell back to Redisson's scripts meanwhile (ACL)
                return
            if len(client.local_waiters.get(lock.name, ())) <= 1:
                try:
                    await ex.command(
                        "ZREM",
                        lock.waiters_key,
                        ex.client_id,
                        context=lock.context("giving up the wait for"),
                        route=lock.name,
                    )
                except ServerReplyError as error:  # the entry expires by itself
                    log.debug("%s: leaving the waiters' registry failed: %s", lock.name, error)

        return leave
