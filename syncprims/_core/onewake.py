"""The one wake-up per release of an RLock (syncprims; docs/design.md, "One wake-up per
release"): ``lock_acquire_one.lua`` registers each waiting *client* in
``syncprims_lock_waiters:{name}`` and ``lock_unlock_one.lua`` names one of them on the herald
channel before it publishes Redisson's ``0``, so that one client's waiter wakes per release
instead of one in every waiting client. A Redisson client's release (no herald) still wakes
one waiter per client, as Redisson's own clients do.

A lock that uses it owns one :class:`OneWake` (``LockCore.one_wake``); kinds with scripts of
their own (FairLock, SpinLock, FencedLock, both read-write sides) own none.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from syncprims._protocol import scripts
from syncprims._protocol.contracts import Arg, ScriptCall, Wakeable, WakePolicy
from syncprims.errors import ServerReplyError

if TYPE_CHECKING:
    from syncprims._core.lock import LockCore

__all__ = [
    "ONE_WAKE_ENTRY_MS",
    "ONE_WAKE_RESERVATION_MS",
    "ONE_WAKE_SLICE_MS",
    "UNLOCK_MESSAGE",
    "OneWake",
    "herald_policy",
    "one_wake_policy",
]

log = logging.getLogger("syncprims.lock")

UNLOCK_MESSAGE = "0"  # what a release publishes on the lock channel (Redisson's)
ONE_WAKE_ENTRY_MS = 10_000  # a waiting client's registration lives this long (NX: not renewed)
ONE_WAKE_SLICE_MS = 1_000  # a registered waiter attempts (and re-registers) at least this often
ONE_WAKE_RESERVATION_MS = 100  # a released lock waits this long, at most, for the named client


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

    __slots__ = ("_lock", "_rules")

    def __init__(self, lock: LockCore) -> None:
        self._lock = lock
        self._rules: tuple[WakePolicy, tuple[str, WakePolicy]] | None = None

    def rules(self) -> tuple[WakePolicy, tuple[str, WakePolicy]]:
        """The lock channel's and the herald's wake-up rules (made once per lock object)."""
        rules = self._rules
        if rules is None:
            lock = self._lock
            rules = self._rules = (
                one_wake_policy(lock._ex.client_id),
                (lock.herald, herald_policy(lock.channel)),
            )
        return rules

    def first_command(self, field: str, lease: int, wait: float) -> ScriptCall:
        """An attempt's call outside a grant wait: it tells whether this caller waits
        (``wait``, seconds) and whether other callers of this client wait too."""
        lock = self._lock
        waiting = len(lock._client.local_waiters.get(lock.name, ()))
        others = waiting - 1 if wait > 0 else waiting  # a waiting caller counts itself
        kept = lock.kept  # encoded once (syncprims._core.kept)
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
            [lock.name, lock.waiters, lock.reservation, lock.grant_marker],
            [
                lease,
                field,
                lock._ex.client_id,
                waits,
                others,
                ONE_WAKE_ENTRY_MS,
                ONE_WAKE_SLICE_MS,
                member,
                fresh,
            ],
        )

    def unlock_command(self, field: str, lease: int, latch: str, give_back: str) -> ScriptCall:
        """``lock_unlock_one.lua``; ``give_back``: the member of a grant to give back."""
        lock = self._lock
        keys = [
            lock.name,
            lock.channel,
            latch,
            lock.waiters,
            lock.herald,
            lock.reservation,
            lock.grant_marker,
            lock.handoff_prefix,
        ]
        publish = lock.publish
        latch_ttl = lock._ex.bounds.unlock_latch_ttl_ms
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
        return lock.kept.spliced(key, scripts.LOCK_UNLOCK_ONE, keys, args, 2)  # the latch

    def enter(self) -> object:
        """A caller of this process starts waiting for the lock: its token."""
        lock = self._lock
        token = object()
        lock._client.local_waiters.setdefault(lock.name, set()).add(token)
        return token

    def leave(self, token: object) -> None:
        """The caller of ``token`` stopped waiting."""
        lock = self._lock
        waiting = lock._client.local_waiters
        tokens = waiting.get(lock.name)
        if tokens is not None:
            tokens.discard(token)
            if not tokens:
                waiting.pop(lock.name, None)

    def give_up(self) -> Callable[[], Awaitable[None]]:
        """What a waiter that stops without the lock runs: the client leaves the registry,
        unless other callers of this client still wait."""
        lock = self._lock

        async def leave() -> None:
            ex = lock._ex
            if not lock.uses_own_keys():  # fell back to Redisson's scripts meanwhile (ACL)
                return
            if len(lock._client.local_waiters.get(lock.name, ())) <= 1:
                try:
                    await ex.command(
                        "ZREM",
                        lock.waiters,
                        ex.client_id,
                        context=lock.context("giving up the wait for"),
                        route=lock.name,
                    )
                except ServerReplyError as error:  # the entry expires by itself
                    log.debug("%s: leaving the waiters' registry failed: %s", lock.name, error)

        return leave
