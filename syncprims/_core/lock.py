"""RLock: the reentrant, non-fair lock (Redisson ``RedissonLock``; redisson-spec.md 2 and 3).

Layout (interoperable with Redisson): a hash at the lock's name with one field
``<client uuid>:<owner id>`` whose value is the hold count, with a TTL equal to the lease.
Unlock publishes ``0`` on ``redisson_lock__channel:{name}``. One script call to acquire and
one to release when uncontended.

Decisions (see also ``docs/locks.md``):

* ``lease_time=None`` means the watchdog: the lease is ``lock_watchdog_timeout`` and it is
  renewed every third of it until the last unlock. An explicit lease is never renewed.
* The TTL re-armed by an unlock that leaves holds is the lease of this owner's last acquire
  (Redisson keeps it per lock *object*, so two threads sharing one object disturbed each
  other: redisson-spec.md 13 item 9).
* Acquire scripts are never re-sent after they may have run (a lost reply must not count a
  hold twice). Unlock carries a request id and is retried; a retry returns the first run's
  result (Redisson 3.24+ unlock latch).
* An acquire abandoned by a cancelled or timed-out asyncio caller whose reply says
  "acquired" is released in the background.
* The watchdog registration is made before the acquire returns and dropped at the start of
  unlock, whatever the unlock's outcome.
* A release whose outcome is unknown (a copy was sent and no reply read: a timeout, a
  reset) may still run later: TCP delivers it when a partition heals, seconds later, and a
  proxy may already have passed it on. Two rules keep such a late copy from ending a later
  hold (found by the chaos campaign, ``tests/faults/test_late_release.py``):

  - its latch key is kept for its whole TTL (:data:`~syncprims._protocol.timing.LATE_COPY`
    at least) instead of being deleted once answered, so a copy of a retried release finds
    it and does nothing;
  - when it ended, or may have ended, the owner's last hold, the owner's next *fresh* hold of
    the lock (none held by its callers, on any object of the name) takes a new field,
    ``<client uuid>:<owner id>.<n>``, which the late copy does not name. Until then the
    field stays Redisson's ``<client uuid>:<owner id>``; an owner that still holds keeps it.
"""

from __future__ import annotations

import itertools
import logging
import math
import os
import threading
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, ClassVar

from syncprims import _observe
from syncprims._core.info import lock_info
from syncprims._core.objects import ExpirableCore
from syncprims._core.retry import releasing, with_retry
from syncprims._core.waiting import acquire_loop, waiters
from syncprims._protocol import scripts
from syncprims._protocol.contracts import (
    PENDING,
    WAKE_TOKEN,
    Arg,
    Call,
    Executor,
    RenewalKind,
    ScriptCall,
    Subscription,
    Wakeable,
    WakePolicy,
)
from syncprims._protocol.ids import new_request_id, owner_field
from syncprims._protocol.info import LockInfo
from syncprims._protocol.loss import LossReason
from syncprims._protocol.names import (
    lock_channel,
    lock_grant_channel_prefix,
    lock_grant_marker_name,
    lock_handoff_list_prefix,
    lock_herald_channel,
    lock_reservation_name,
    lock_waiters_name,
    unlock_latch_key,
)
from syncprims._protocol.statistics import LockStatistics
from syncprims._protocol.timing import drift, lease_ms, threading_wait, wait_seconds
from syncprims.errors import (
    LockLostError,
    LockNotHeldError,
    ReplicaSyncError,
    ServerReplyError,
    SyncPrimsError,
    TransportError,
)

__all__ = ["LOCK_RENEWAL", "REENTRY_ERR", "LockCore", "lock_policy"]

log = logging.getLogger("syncprims.lock")

UNLOCK_MESSAGE = "0"


REENTRY_ERR = "NON_REENTRANT_REACQUIRE"
"""The error code of a non-reentrant lock's refused reentry (Redisson 4.4's
``RedissonNonReentrantLock.REENTRY_ERR``; ``_core/nonreentrant.py``)."""


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


def one_wake_policy(client_id: str) -> WakePolicy:
    """The wake-up rule of an RLock channel with one wake-up per release: a ``0`` that a
    herald note names another client for lets this client's waiters sleep on; a ``0`` naming
    this client, or with no note (a release by a Redisson client, or a herald this client
    has not subscribed yet), wakes one local waiter, as :func:`lock_policy` does."""
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


def grant_policy(channel: Callable[[str], str], give_back: Callable[[str], None]) -> WakePolicy:
    """The rule of a client's grant channel of a lock (the one-hop grant): a grant for
    a wait in progress is recorded on it and wakes the local waiters of the channel that
    ``channel(member)`` names (an RLock's: the lock's, where the granted one finds it and any
    other goes back to sleep after its attempt; a FairLock's: the owner's own);
    a grant that no wait takes any more (it ended, or moved on to a newer registration) is
    handed to ``give_back`` (which releases it in the background, only if still unclaimed)."""

    def policy(waiters: Wakeable, message: bytes) -> None:
        member = message.decode()
        live, waker = _record_grant(member)
        if not live:
            give_back(member)
        elif waker is not None:  # its waiter is blocked: wake it alone
            waker()
        else:  # its waiter is between waits (it finds the grant) or in a plain wait
            waiters.wake_paired(channel(member))

    return policy


def _record_grant(member: str) -> tuple[bool, Callable[[], None] | None]:
    """Record the grant to ``member`` on its wait (its message, or its direct push, came);
    ``False`` when no wait takes it any more (it is to be given back). With ``True``, what
    wakes the waiter alone while it is blocked (:meth:`LockCore._wait_for_grant`), if it is."""
    with _GRANT_MUTEX:
        wait = _GRANT_WAITS.get(member)
        live = wait is not None and not wait.claimed and member in (wait.member, wait.next)
        if wait is not None and live:
            wait.granted = member
            wait.since = wait.next_sent if member == wait.next else wait.floor
            return True, wait.waker
    return False, None


ONE_WAKE_ENTRY_MS = 10_000  # a waiting client's registration lives this long (NX: not renewed)
ONE_WAKE_SLICE_MS = 1_000  # a registered waiter attempts (and re-registers) at least this often
ONE_WAKE_RESERVATION_MS = 100  # a released lock waits this long, at most, for the named client
GRANT_MIN_LEASE_MS = 2 * ONE_WAKE_SLICE_MS  # shorter leases are not granted (_GrantWait)
GRANTED = -3  # an acquire reply: a release granted this wait the lock, and the attempt claimed it


def _max_hold(lease_time: object, max_hold: object) -> float:
    """A ``max_hold`` argument in seconds (it bounds the watchdog: no ``lease_time``).

    Raises:
        TypeError, ValueError: not a positive duration, or given with a ``lease_time``.
    """
    if lease_time is not None:
        raise ValueError(
            "max_hold bounds the watchdog's renewals: pass it with lease_time=None (a lease "
            "time is never renewed, so it is its own bound)"
        )
    return lease_ms(max_hold, "max_hold") / 1000


class _GrantWait:
    """One owner's wait that a release may hand the lock to (the one-hop grant,
    ``lock_unlock_one.lua``; docs/design.md, "The one-hop grant"). A FairLock's waits are
    the same, registered in its own registry and granted by ``fair_unlock.lua`` when they
    reach the head of the queue (:class:`~syncprims._core.fair.FairLockCore`).

    The wait is registered as ``member`` (``g|<lease ms>|<wait id>|<owner field>``); a release
    that grants it writes the owner's hold, sets the grant marker to ``member`` and publishes
    ``member`` on the client's grant channel, whose rule (:func:`grant_policy`) records it
    here and wakes the waiter, which then returns without a script. An attempt that finds
    the marker naming its member claims the grant instead (the message was lost, or is late).

    A ``direct`` wait (the blocking face, ``Config.lock_grant_direct``) is registered as
    ``b|...``: the release checks that the client's grant channel has a subscriber (``PUBSUB
    NUMSUB``) and pushes ``member`` on the wait's own list, ``key``, which the waiting thread
    pops (``BLPOP``) instead of waiting for the reader thread: no thread hop. No message
    reaches the reader, so a direct wait that gives up removes its registration itself and
    gives back a grant made meanwhile (:meth:`LockCore._leave_grant_wait`).

    When the lease started: Redis wrote it after the member was registered and after every
    attempt that found the member still registered, so ``floor``, the send time of the last
    such attempt (for a member registered by the attempt still in flight, ``next``: that
    attempt's, ``next_sent``), is never later than the lease's start (the waiter attempts at
    least every second, so ``floor`` is recent; leases under :data:`GRANT_MIN_LEASE_MS` are
    not granted, so that this bound is well inside the lease). An attempt that finds its
    member gone (a release popped it, or it expired) registers a new one: a grant to the old
    member is then over (its marker was replaced) and is never claimed, only given back.

    All fields are read and written under :data:`_GRANT_MUTEX` (the rule runs on the
    subscriber's thread).
    """

    __slots__ = (
        "claimed",
        "field",
        "floor",
        "granted",
        "ids",
        "key",
        "member",
        "members",
        "next",
        "next_sent",
        "prefix",
        "since",
        "waker",
    )

    def __init__(self, lease: int, field: str, direct_prefix: str | None = None) -> None:
        wait_id = next(_WAIT_IDS)
        direct = direct_prefix is not None
        self.prefix = f"{'b' if direct else 'g'}|{lease}|{wait_id}."
        self.key = f"{direct_prefix}{wait_id}|{field}" if direct else ""  # its list, if direct
        self.field = field
        self.ids = itertools.count()
        self.member = self.next_member()  # not registered until the first attempt
        self.next = ""  # the member an attempt in flight may register instead of ``member``
        self.next_sent = 0.0  # when that attempt was sent (at the earliest)
        self.members: set[str] = set()  # the members mapped to it (that it may have registered)
        self.floor = 0.0
        self.granted: str | None = None  # the member whose grant's message arrived
        self.since = 0.0  # ``floor`` when it arrived
        self.claimed = False  # a grant was taken (by its message or by an attempt)
        self.waker: Callable[[], None] | None = None  # wakes the waiter alone while blocked

    @property
    def direct(self) -> bool:
        """Whether the waiting thread pops its grant from its own list, :attr:`key`."""
        return bool(self.key)

    def next_member(self) -> str:
        """A member name this wait has not used yet."""
        return f"{self.prefix}{next(self.ids)}|{self.field}"


_WAIT_IDS = itertools.count(1)
_GRANT_MUTEX = threading.Lock()
_GRANT_WAITS: dict[str, _GrantWait] = {}  # every member of every wait in progress -> its wait


def _forget_grant_waits() -> None:
    """In a forked child: the parent's waits are not its own (and the mutex may be taken)."""
    global _GRANT_MUTEX
    _GRANT_MUTEX = threading.Lock()
    _GRANT_WAITS.clear()


os.register_at_fork(after_in_child=_forget_grant_waits)


def _lock_renew_command(lease: int, batch: list[tuple[str, str]]) -> tuple[list[str], list[Arg]]:
    args: list[Arg] = [lease]
    args.extend(field for _, field in batch)
    return [name for name, _ in batch], args


LOCK_RENEWAL = RenewalKind("lock", scripts.LOCK_RENEW, _lock_renew_command)
"""Plain lock holds (RLock, FairLock, FencedLock, the write side of a read-write lock)."""


class _Release:
    """One unlock call, idempotent by its latch key, so retried; remembers whether a copy of
    it was sent without its reply being read (:attr:`unknown`: it may still run later)."""

    def __init__(self, ex: Executor, context: str) -> None:
        self._ex = ex
        self._context = context
        self.unknown = False

    async def run(self, call: ScriptCall) -> Any:
        """Run ``call`` with retries. Raises as ``with_retry`` (and ``ServerReplyError``)."""
        ex = self._ex
        try:  # the first attempt here: no closure and no retry coroutine unless it fails
            return await ex.eval(call.script, call.keys, call.args, context=self._context)
        except TransportError as error:
            self.unknown = self.unknown or error.maybe_executed
            first = error
        except ServerReplyError:  # nothing ran
            raise
        except BaseException:  # cancelled in flight: it may run
            self.unknown = True
            raise

        async def once() -> Any:
            try:
                return await ex.eval(call.script, call.keys, call.args, context=self._context)
            except TransportError as error:
                self.unknown = self.unknown or error.maybe_executed
                raise
            except ServerReplyError:  # nothing ran
                raise
            except BaseException:  # cancelled in flight: it may run
                self.unknown = True
                raise

        return await with_retry(ex, once, idempotent=True, failed=first)


class LockCore(ExpirableCore):
    """The RLock algorithms, for any owner id chosen by a face."""

    kind = "lock"
    info_layout = "lock"  # how info() reads it (syncprims._core.info.LOCK_KINDS)
    renewal: RenewalKind = LOCK_RENEWAL
    # One wake-up per release (the waiting clients' registry and the herald channel): the
    # RLock's own scripts only; kinds with scripts of their own turn it off.
    one_wake = True
    # (client id, lock name) -> tokens of this process's callers waiting for it now
    _local_waiters: ClassVar[dict[tuple[str, str], set[object]]] = {}
    # clients whose Redis user may not touch the one-wake keys (an ACL written for
    # Redisson's keys): they use Redisson's scripts and wake-ups
    _one_wake_refused: ClassVar[set[str]] = set()
    # Late releases (module docstring). Keyed by (client id, lock name, owner id):
    # holds its callers have (acquires returned minus unlocks called, on any object of the
    # name: both sides of a read-write lock count together), and its field's incarnation.
    _holds: ClassVar[dict[tuple[str, str, int], int]] = {}
    _incarnations: ClassVar[dict[tuple[str, str, int], int]] = {}
    # (lock name, field) of releases whose outcome is unknown and may have ended a last hold
    _tainted: ClassVar[set[tuple[str, str]]] = set()

    def _one_wake(self) -> bool:
        """Whether this lock uses the one wake-up per release (see :attr:`one_wake`)."""
        return self.one_wake and self._ex.client_id not in self._one_wake_refused

    def _own_keys(self) -> bool:
        """Whether this lock's scripts use syncprims' own keys beside Redisson's layout (the
        one wake-up per release, the one-hop grant), which an ACL written for Redisson's
        keys refuses (then :meth:`_refuses_one_wake` falls back for the client)."""
        return self._one_wake()

    def _refuses_one_wake(self, error: ServerReplyError, *, tried: bool | None = None) -> bool:
        """After a ``NOPERM`` on a one-wake script: fall back for this client (logged once);
        ``True`` when the call should be made again with Redisson's script. ``tried``:
        whether the failed call was a one-wake script (default: whether it would be now)."""
        if not (self._own_keys() if tried is None else tried) or error.code != "NOPERM":
            return False
        if self._ex.client_id in self._one_wake_refused:
            return True  # another call of this client found it first
        self._one_wake_refused.add(self._ex.client_id)
        log.warning(
            "the Redis user may not use the keys of the one wake-up per release and the "
            "one-hop grant (%s...): falling back to Redisson's wake-ups (for an RLock, a "
            "waiter in every waiting client per release); grant ~syncprims_lock_* keys and "
            "&syncprims_lock_herald:* and "
            "&syncprims_lock_grant:* channels "
            "to get it back (docs/configuration.md)",
            self.waiters,
        )
        return True

    def __init__(self, executor: Executor, name: str) -> None:
        super().__init__(executor, name)
        self.channel = lock_channel(self.name)
        self.waiters = lock_waiters_name(self.name)
        self.herald = lock_herald_channel(self.name)
        self.reservation = lock_reservation_name(self.name)
        self.grant_marker = lock_grant_marker_name(self.name)
        self._grant_prefix = lock_grant_channel_prefix(self.name)
        self._handoff_prefix = lock_handoff_list_prefix(self.name)
        self._rules: tuple[WakePolicy, tuple[str, WakePolicy]] | None = None
        self._grant_rules: tuple[str, tuple[str, WakePolicy]] | None = None
        # owner field -> lease (ms) of that owner's last acquire, re-armed by a partial unlock
        self._leases: dict[str, int] = {}
        # Lock-loss notification (see the module docstring).
        self.on_lost: Callable[[str, LossReason], None] | None = None
        # Whether leaving ``with lock:`` raises when the hold was gone; ``None``: the
        # client's ``Config.raise_on_release_error``.
        self.raise_on_release_error: bool | None = None
        self._lost: dict[str, LossReason] = {}  # owner field -> why its hold was lost
        self._held_since: dict[str, float] = {}  # owner field -> first hold (monotonic s)
        self._expires: dict[str, float] = {}  # owner field -> when its explicit lease ends
        self._caps: dict[str, float] = {}  # owner field -> its max_hold, seconds (try_lock)
        self._listeners: dict[str, list[Callable[[LossReason], None]]] = {}

    def field(self, owner: int) -> str:
        """The hash field that names ``owner`` of this client (``<client uuid>:<owner id>``,
        with ``.<n>`` after a release whose outcome was unknown: module docstring)."""
        client = self._ex.client_id
        n = self._incarnations.get((client, self.name, owner)) if self._incarnations else None
        field = owner_field(client, owner)
        return field if n is None else f"{field}.{n}"

    def _owner_fields(self, owner: int) -> list[str]:
        """Every field ``owner`` can hold the lock's hash with (a read-write lock: both
        sides); a new incarnation replaces them all."""
        return [self.field(owner)]

    def count_hold(self, owner: int, delta: int) -> None:
        """Count a hold ``owner``'s callers took (+1) or gave back (-1, whatever the
        unlock's outcome)."""
        key = (self._ex.client_id, self.name, owner)
        held = self._holds.get(key, 0) + delta
        if held > 0:
            self._holds[key] = held
        else:
            self._holds.pop(key, None)

    def fresh_field(self, owner: int) -> None:
        """Before ``owner`` acquires: if it holds nothing and a release of its field had an
        unknown outcome, or a renewal of its last hold may still run (Redisson #7272's
        family: ``syncprims._services.watchdog``), give it a new field (module docstring)."""
        watchdog = self._ex.watchdog
        if not self._tainted and not watchdog.may_renew_late(self.name, self.field(owner)):
            return
        key = (self._ex.client_id, self.name, owner)
        if key in self._holds:
            return
        fields = self._owner_fields(owner)
        tainted = any((self.name, field) in self._tainted for field in fields)
        late = [field for field in fields if watchdog.may_renew_late(self.name, field)]
        if not tainted and not late:
            return
        for field in fields:
            self._tainted.discard((self.name, field))
            watchdog.forget_late(self.name, field)
        self._incarnations[key] = self._incarnations.get(key, 0) + 1
        log.log(
            logging.INFO if tainted else logging.DEBUG,
            "%s: a %s of owner %s may still run; its next hold uses the field %s",
            self.context("acquiring"),
            "call with an unknown outcome" if tainted else "renewal of its last hold",
            owner,
            self.field(owner),
        )

    def _taint(self, field: str) -> None:
        """An acquire of ``field`` may have run and its reply is still to come: when it
        comes, ``on_abandoned_attempt`` undoes it by unlocking ``field``. The owner's next
        hold takes a new field (:meth:`fresh_field`), or that undo would release it (found
        by the chaos campaign's asyncio kind: a task re-acquired after its attempt timed
        out on a black-holed shared connection, and the late reply's undo freed the new
        hold: two tasks held the lock)."""
        self._tainted.add((self.name, field))

    def settle_release(self, field: str, reply: Any, latch: str, *, unknown: bool) -> None:
        """Book-keeping after a release call: ``reply`` (its reply, the error it ended with,
        or ``PENDING`` while a fan-out finishes it in the background); ``unknown``: a copy of
        it was sent and no reply read for it."""
        if unknown:  # a copy may still run: keep the latch; maybe a new field (docstring)
            if reply != 0:
                self._tainted.add((self.name, field))
        else:
            self._ex.janitor.discard(latch)
        if reply is PENDING or isinstance(reply, BaseException):
            return  # no reply (yet): the outcome is booked when it comes
        if reply != 0:  # released, or not held: forget this owner's lease
            self._leases.pop(field, None)
        self._note_release(field, reply)

    def _lease(self, lease_time: object) -> tuple[int, bool]:
        """(lease ms, watchdog?) for a ``lease_time`` argument."""
        if lease_time is None:
            return self._watchdog_ms(), True
        return lease_ms(lease_time), False

    def _watchdog_ms(self) -> int:
        return round(self._ex.config.lock_watchdog_timeout * 1000)

    # -- hooks a lock kind overrides ------------------------------------------------------------

    def acquire_command(self, field: str, lease: int, wait: float) -> ScriptCall:
        """The acquire script call for ``field`` (``wait``: the caller's wait time, seconds)."""
        if not self._one_wake():
            return ScriptCall(scripts.LOCK_ACQUIRE, [self.name], [lease, field])
        client = self._ex.client_id
        waiting = len(self._local_waiters.get((client, self.name), ()))
        others = waiting - 1 if wait > 0 else waiting  # a waiting caller counts itself
        return self._acquire_one_command(
            field, lease, "1" if wait > 0 else "0", "1" if others > 0 else "0", member="", fresh=""
        )

    def _acquire_one_command(
        self, field: str, lease: int, waits: str, others: str, *, member: str, fresh: str
    ) -> ScriptCall:
        """``lock_acquire_one.lua``; ``member``/``fresh``: a one-hop grant's registrations."""
        return ScriptCall(
            scripts.LOCK_ACQUIRE_ONE,
            [self.name, self.waiters, self.reservation, self.grant_marker],
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

    def wait_channel(self, field: str) -> str:
        """The channel that announces a release to ``field``'s waits."""
        return self.channel

    # -- hooks of the one-hop grant (a kind that grants: RLock, FairLock) ----------------------

    def grant_acquire_command(
        self, field: str, lease: int, wait: float, *, waits: str, member: str, fresh: str
    ) -> ScriptCall:
        """An attempt of a grant wait (:class:`_GrantWait`): it claims a grant to ``member``
        (reply ``-3``), or keeps ``member`` registered (``fresh`` when it is gone) while
        ``waits == "1"``; a failed attempt replies ``{ms, 1 if fresh was registered}``."""
        return self._acquire_one_command(field, lease, waits, "0", member=member, fresh=fresh)

    def give_back_command(self, field: str, latch: str, member: str) -> ScriptCall:
        """The release of ``field``'s hold, only while the grant marker names ``member``."""
        return self._unlock_one_command(field, self._watchdog_ms(), latch, member)

    async def unregister(self, member: str, wait: float) -> int:
        """Remove a grant wait's registration ``member`` (when it gives up); 1 when it was
        still registered (no release took it), 0 when it was not.

        Raises:
            TransportError: Redis failed.
        """
        return int(
            await self._ex.command(
                "ZREM",
                self.waiters,
                member,
                context=self.context("giving up the wait for"),
                route=self.name,
            )
        )

    def grant_wait_rule(self, field: str) -> tuple[str, WakePolicy]:
        """The channel a grant wait of ``field`` listens on, beside its client's grant
        channel, and that channel's rule."""
        return self.channel, self._one_wake_rules()[0]

    def grant_wake_channel(self, member: str) -> str:
        """The local channel whose waiters a grant to ``member`` wakes."""
        return self.channel

    async def wait_for(
        self, attempt: Callable[[], Awaitable[int | None]], field: str, wait: float
    ) -> bool:
        """Acquire with ``attempt`` within ``wait`` seconds, woken by pub/sub (SpinLock polls);
        with :attr:`one_wake`, through the herald of the RLock's one wake-up per release."""
        return await self._wait_for(attempt, field, wait)

    async def _wait_for(
        self,
        attempt: Callable[[], Awaitable[int | None]],
        field: str,
        wait: float,
        first: int | None = None,
        started: float | None = None,
    ) -> bool:
        """:meth:`wait_for`; ``first``/``started``: see :func:`acquire_loop`."""
        one_wake = self._one_wake() and wait > 0
        rules = self._one_wake_rules() if one_wake else None
        return await acquire_loop(
            self._ex,
            attempt,
            channel=self.wait_channel(field),
            policy=rules[0] if rules is not None else lock_policy,
            wait=wait,
            on_give_up=self.give_up(field, wait),
            route=self.name,
            herald=rules[1] if rules is not None else None,
            first=first,
            started=started,
        )

    async def _wait_for_grant(
        self,
        attempt: Callable[[], Awaitable[int | None]],
        wait: float,
        grant: _GrantWait,
        first: int | None = None,
        started: float | None = None,
    ) -> bool:
        """:meth:`wait_for` for a wait that may be granted the lock: woken by this client's
        grant channel (and by the lock channel's ``0`` as any waiter); a direct wait pops its
        grant from its own list instead (:class:`_GrantWait`)."""
        block = None
        channel, policy = self.grant_wait_rule(grant.field)
        if grant.direct:
            ex = self._ex

            async def block(sub: Subscription, pause: float) -> None:
                popped = await ex.wait_pushed(sub, grant.key, pause, self.name)
                if isinstance(popped, bytes) and popped != WAKE_TOKEN:
                    member = popped.decode()
                    if not _record_grant(member)[0]:
                        self._give_back_later(member)

        else:
            # A grant's message wakes this waiter alone (the grant channel's rule calls its
            # waker), not every local waiter of the lock (several threads or tasks of one
            # client would all run an attempt for one grant: a herd within the client).
            ex = self._ex

            def arm(wake: Callable[[], None]) -> None:
                with _GRANT_MUTEX:
                    ready = grant.granted is not None and not grant.claimed
                    if not ready:
                        grant.waker = wake
                if ready:  # came while it was not blocked: do not block
                    wake()

            async def block(sub: Subscription, pause: float) -> None:
                try:
                    await ex.wait(sub, pause, arm)
                finally:
                    with _GRANT_MUTEX:
                        grant.waker = None

        return await acquire_loop(
            self._ex,
            attempt,
            channel=channel,
            policy=policy,
            wait=wait,
            on_give_up=self._leave_grant_wait(grant, wait),
            route=self.name,
            herald=self._grant_channel_rule(),
            first=first,
            started=started,
            block=block,
        )

    def _grant_channel_rule(self) -> tuple[str, WakePolicy]:
        """This client's grant channel of the lock and its rule (made once per client)."""
        client = self._ex.client_id
        rules = self._grant_rules
        if rules is None or rules[0] != client:  # a forked child has a new client id
            channel = self._grant_prefix + client
            rules = self._grant_rules = (
                client,
                (channel, grant_policy(self.grant_wake_channel, self._give_back_later)),
            )
        return rules[1]

    async def _grant_eligible(self, lease: int, wait: float) -> bool:
        """Whether a wait of this caller may be granted the lock (``Config.lock_grant_handoff``)."""
        if wait <= 0 or lease < GRANT_MIN_LEASE_MS or not self._own_keys():
            return False
        if not self._ex.config.lock_grant_handoff:
            return False
        if self._ex.config.lock_synced_aof is not None:
            return False  # a grant skips WAITAOF
        return await self._replicas_required() == 0  # a grant skips WAIT

    def _take_grant(self, grant: _GrantWait) -> float | None:
        """Claim the grant whose message arrived for ``grant`` (``None``: none): when its
        lease started, at the latest."""
        if grant.granted is None:  # the usual case, read without the mutex
            return None
        with _GRANT_MUTEX:
            if grant.granted is None or grant.claimed:
                return None
            grant.claimed = True
            return grant.since

    async def _granted(
        self, field: str, lease: int, watchdog: bool, grant: _GrantWait, since: float
    ) -> int | None:
        """Take a grant whose message arrived; as an attempt's reply (``None``: acquired)."""
        if await self._gave_back_late(field, lease, since, grant):
            return 0
        self.acquired(field, lease, watchdog, None, since=since)
        return None

    async def _gave_back_late(
        self, field: str, lease: int, since: float, grant: _GrantWait | None
    ) -> bool:
        """Whether a grant whose lease started no earlier than ``since`` (monotonic seconds)
        came past that lease: then it is given back (the lock may be someone else's by now)
        and ``grant``'s wait goes on with a new registration. Found by the chaos campaign: a
        client paused 2.4-3.3 s mid-acquire entered a 2 s lease."""
        ex = self._ex
        late = ex.monotonic() - since
        if late < lease / 1000:
            return False
        log.warning(
            "%s: the grant came %.3f s after it was asked for, past its %.3f s lease: not taken",
            self.context("acquiring"),
            late,
            lease / 1000,
        )
        try:
            await self._unlock_field(field, lease)
        except SyncPrimsError as error:  # its lease bounds it
            log.debug("%s: giving back a late grant failed: %r", self.name, error)
        if grant is not None:
            self._renew_grant_wait(grant)
        return True

    @staticmethod
    def _renew_grant_wait(grant: _GrantWait) -> None:
        """After a grant was claimed and given back (too late), wait for a new one."""
        with _GRANT_MUTEX:
            grant.claimed = False
            grant.granted = None
            grant.member = grant.next_member()

    def _end_grant_wait(self, grant: _GrantWait) -> None:
        """The wait is over: forget it; a grant it did not take is given back."""
        if not grant.members:  # never registered (acquired at once, or no wait)
            return
        with _GRANT_MUTEX:
            for member in grant.members:
                _GRANT_WAITS.pop(member, None)
            pending = grant.granted if not grant.claimed else None
            grant.claimed = True  # a message read from now on is given back
        if pending is not None:
            self._give_back_later(pending)

    def _leave_grant_wait(self, grant: _GrantWait, wait: float) -> Callable[[], Awaitable[None]]:
        """The ``on_give_up`` of a wait that may be granted: leave the registry."""

        async def leave() -> None:
            with _GRANT_MUTEX:
                member = grant.member
            try:
                await self._leave_registry(member, grant.direct, wait)
            except TransportError:
                if not grant.direct:
                    raise
                # a grant to it would reach nobody: try again in the background, until
                # the registration has expired (its lifetime)
                self._ex.background(lambda: self._leave_later(member, wait))
                raise

        return leave

    async def _leave_registry(self, member: str, direct: bool, wait: float) -> None:
        """Remove a grant wait's registration; for a direct one already popped (by a
        release, whose grant no message announces), give that grant back."""
        try:
            removed = await self.unregister(member, wait)
        except ServerReplyError as error:  # the entry expires by itself
            log.debug("%s: leaving the waiters' registry failed: %s", self.name, error)
            return
        if direct and removed == 0:  # popped by a grant (or expired): give it back
            await self._give_back(member)

    async def _leave_later(self, member: str, wait: float) -> None:
        """:meth:`_leave_registry` of a direct wait, retried until it succeeds or the
        registration has expired (background, after Redis failed the waiter's own try)."""
        ex = self._ex
        end = ex.monotonic() + ONE_WAKE_ENTRY_MS / 1000
        attempt = 0
        while True:
            await ex.sleep(ex.retry_delay(min(attempt, 10)))
            attempt += 1
            try:
                await self._leave_registry(member, True, wait)
                return
            except TransportError as error:
                if ex.monotonic() >= end:
                    log.warning("%s: leaving a direct grant wait failed: %r", self.name, error)
                    return

    def _give_back_later(self, member: str) -> None:
        """Release, in the background, the grant to ``member`` if no attempt claimed it
        (its waiter stopped waiting first); called by the grant channel's rule. Counted as
        a release in flight from now on, so that shutdown lets it finish."""
        ex = self._ex
        ex.release_started()

        async def give_back() -> None:
            try:
                await self._give_back(member)
            finally:
                ex.release_ended()

        try:
            ex.background(give_back)
        except BaseException:
            ex.release_ended()
            raise

    async def _give_back(self, member: str) -> None:
        field = member.split("|", 3)[3]
        ex = self._ex
        latch = unlock_latch_key(self.name, new_request_id())
        release = _Release(ex, self.context("giving back a grant of"))
        try:
            reply = await release.run(self.give_back_command(field, latch, member))
        except SyncPrimsError as error:
            log.warning(
                "%s: giving back a grant nobody took failed (%r); its lease bounds it",
                self.name,
                error,
            )
            return
        finally:
            if not release.unknown:
                ex.janitor.discard(latch)
        log.debug("%s: gave back a grant nobody took (%r): %s", self.name, member, reply)

    def _one_wake_rules(self) -> tuple[WakePolicy, tuple[str, WakePolicy]]:
        """The lock channel's and the herald's wake-up rules (made once per lock object)."""
        rules = self._rules
        if rules is None:
            rules = self._rules = (
                one_wake_policy(self._ex.client_id),
                (self.herald, herald_policy(self.channel)),
            )
        return rules

    def give_up(self, field: str, wait: float) -> Callable[[], Awaitable[None]] | None:
        """What to run when ``field`` stops waiting without the lock (``None``: nothing)."""
        if not (self._one_wake() and wait > 0):
            return None

        async def leave() -> None:  # unless other callers of this client still wait
            ex = self._ex
            if not self._one_wake():  # fell back to Redisson's scripts meanwhile (ACL)
                return
            if len(self._local_waiters.get((ex.client_id, self.name), ())) <= 1:
                try:
                    await ex.command(
                        "ZREM",
                        self.waiters,
                        ex.client_id,
                        context=self.context("giving up the wait for"),
                        route=self.name,
                    )
                except ServerReplyError as error:  # the entry expires by itself
                    log.debug("%s: leaving the waiters' registry failed: %s", self.name, error)

        return leave

    async def on_abandoned_attempt(self, field: str, wait: float, late_reply: Any) -> None:
        """The late reply of an attempt whose caller went away: undo what it did."""
        if self.reply_ttl(late_reply) is None:  # the abandoned attempt did acquire: undo it
            await self._unlock_field(field, self._leases.get(field, self._watchdog_ms()))

    def unlock_command(self, field: str, lease: int, latch: str) -> ScriptCall:
        """The unlock script call; its reply: nil (not held), 0 (still held), 1 (released)."""
        if self._one_wake():
            return self._unlock_one_command(field, lease, latch, "")
        return self._plain_unlock_command(field, lease, latch)

    def _plain_unlock_command(self, field: str, lease: int, latch: str) -> ScriptCall:
        """Redisson's unlock script (``lock_unlock.lua``): the ``0`` on the lock channel."""
        args: list[Arg] = [
            UNLOCK_MESSAGE,
            lease,
            field,
            self.publish,
            self._ex.bounds.unlock_latch_ttl_ms,
        ]
        return ScriptCall(scripts.LOCK_UNLOCK, [self.name, self.channel, latch], args)

    def _unlock_one_command(self, field: str, lease: int, latch: str, give_back: str) -> ScriptCall:
        """``lock_unlock_one.lua``; ``give_back``: the member of a grant to give back."""
        return ScriptCall(
            scripts.LOCK_UNLOCK_ONE,
            [
                self.name,
                self.channel,
                latch,
                self.waiters,
                self.herald,
                self.reservation,
                self.grant_marker,
                self._handoff_prefix,
            ],
            [
                UNLOCK_MESSAGE,
                lease,
                field,
                self.publish,
                self._ex.bounds.unlock_latch_ttl_ms,
                ONE_WAKE_RESERVATION_MS,
                self._grant_prefix,
                give_back,
            ],
        )

    def force_unlock_command(self) -> ScriptCall:
        """The force-unlock script call; its reply: 1 when a lock was deleted."""
        return ScriptCall(
            scripts.LOCK_FORCE_UNLOCK,
            [self.name, self.channel],
            [UNLOCK_MESSAGE, self.publish],
        )

    # -- acquire ------------------------------------------------------------------------------

    def attempt(
        self,
        field: str,
        lease: int,
        watchdog: bool,
        wait: float,
        grant: _GrantWait | None = None,
    ) -> Coroutine[Any, Any, int | None]:
        """One run of the acquire script; ``None`` when acquired, else how long to wait (ms).
        A ``NOPERM`` on the one-wake script (nothing ran) falls back to Redisson's. A
        coroutine: :meth:`_attempt`'s own (no layer around it on the hot path)."""
        return self._attempt(field, lease, watchdog, wait, grant)

    async def _attempt(
        self,
        field: str,
        lease: int,
        watchdog: bool,
        wait: float,
        grant: _GrantWait | None = None,
    ) -> int | None:
        """One run of the acquire script; ``None`` when acquired, else how long to wait (ms).

        With replicas to wait for (``lock_synced_replicas``), ``WAIT`` goes in the same write
        as the script (one round trip, as Redisson's batch); its reply only counts when the
        script acquired. With ``grant`` (a wait that may be granted the lock, see
        :class:`_GrantWait`), the attempt keeps the wait registered and may claim a grant.
        """
        ex = self._ex
        tried = self._own_keys()  # for the NOPERM fall-back (attempt's docstring)
        # registered only while the grant channel is confirmed: a grant to a member whose
        # channel is not subscribed yet would find no subscriber and skip it
        if grant is not None and not tried:
            grant = None  # fell back to Redisson's scripts (ACL)
        if grant is None:
            call = self.acquire_command(field, lease, wait)
        elif not grant.members and not ex.subscribed(self._grant_channel_rule()[0], self.name):
            grant = None  # nothing registered yet, nor now: a single attempt
            call = self.acquire_command(field, lease, 0.0)
        else:
            fresh = grant.next_member()
            waits = "1" if ex.subscribed(self._grant_channel_rule()[0], self.name) else "0"
            with _GRANT_MUTEX:
                member, floor = grant.member, grant.floor
                if waits == "1":  # a grant to either may come before this attempt's reply
                    grant.next, grant.next_sent = fresh, ex.monotonic()
                    grant.members.update((member, fresh))
                    _GRANT_WAITS[member] = _GRANT_WAITS[fresh] = grant
            call = self.grant_acquire_command(
                field, lease, wait, waits=waits, member=member, fresh=fresh
            )
        required = await self._replicas_required()
        sent = ex.monotonic()  # the lease starts no earlier than this, in Redis
        context = self.context("acquiring")

        def orphan(late: Any) -> Awaitable[None]:
            return self.on_abandoned_attempt(field, wait, late)

        acknowledged: Any = None
        aof = ex.config.lock_synced_aof
        try:
            if required or aof is not None:
                sync_timeout = ex.config.replica_sync_timeout
                then: tuple[str | int, ...] = (
                    ("WAIT", required, round(sync_timeout * 1000))
                    if aof is None
                    else ("WAITAOF", aof[0], max(aof[1], required), round(sync_timeout * 1000))
                )
                reply, acknowledged = await with_retry(
                    ex,
                    lambda: ex.eval_then(
                        call.script,
                        call.keys,
                        call.args,
                        then,
                        then_timeout=sync_timeout,
                        context=context,
                        on_orphan=orphan,
                    ),
                    idempotent=False,
                )
            else:
                try:  # the first attempt here: no closure and no retry coroutine unless it fails
                    reply = await ex.eval(
                        call.script, call.keys, call.args, context=context, on_orphan=orphan
                    )
                except TransportError as error:
                    if error.maybe_executed:
                        raise
                    reply = await with_retry(
                        ex,
                        lambda: ex.eval(
                            call.script, call.keys, call.args, context=context, on_orphan=orphan
                        ),
                        idempotent=False,
                        failed=error,
                    )
        except TransportError as error:
            if error.maybe_executed:
                self._taint(field)
            raise
        except ServerReplyError as error:  # Redis answered (an error reply): nothing comes later
            if self._refuses_one_wake(error, tried=tried):  # NOPERM: Redisson's scripts now
                return await self._attempt(field, lease, watchdog, wait)
            raise
        except SyncPrimsError:
            raise
        except BaseException:  # cancelled in flight
            self._taint(field)
            raise
        if grant is not None and isinstance(reply, list):  # waits, registered (see the script)
            with _GRANT_MUTEX:
                unused = fresh
                if reply[1] == 1:  # ``member`` was gone: registered as ``fresh``
                    if grant.granted == member:  # that grant is over (never claimed)
                        grant.granted = None
                    grant.member, unused = fresh, member
                # a message for the member not in use now finds no wait: it is given back
                grant.members.discard(unused)
                _GRANT_WAITS.pop(unused, None)
                grant.next = ""
                grant.floor = sent  # registered when this ran: no grant before it
            # attempts at least every slice, so that ``floor`` stays recent (_GrantWait)
            return min(int(reply[0]), ONE_WAKE_SLICE_MS)
        ttl = self.reply_ttl(reply)
        if ttl is not None:
            return ttl
        if grant is not None and reply == GRANTED:
            with _GRANT_MUTEX:
                grant.claimed = True
            sent = floor  # the grant came after the last attempt that found none
        if await self._gave_back_late(field, lease, sent, grant):
            return 0
        if required or aof is not None:
            await self._check_replicas(field, lease, required, acknowledged)
        self.acquired(field, lease, watchdog, reply, since=sent)
        return None

    async def _replicas_required(self) -> int:
        """How many replicas an acquisition must reach (``"auto"``: the master's)."""
        setting = self._ex.config.lock_synced_replicas
        if setting == "auto":
            return await self._ex.replicas(self.name)
        return setting

    async def _check_replicas(self, field: str, lease: int, required: int, reply: Any) -> None:
        """Judge the ``WAIT`` reply of an acquisition; undo it and raise if too few replicas
        acknowledged (or ``WAIT`` failed). A ``WAIT`` that Redis ended because the master
        became a replica (``UNBLOCKED``, a failover) is raised, once undone, as a
        ``TransportError`` that did not run: the wait goes on, against the new master."""
        ex = self._ex
        aof = ex.config.lock_synced_aof
        if isinstance(reply, SyncPrimsError):
            await self._unlock_field(field, lease)
            if isinstance(reply, ServerReplyError) and reply.code == "UNBLOCKED":
                raise TransportError(
                    f"{self.context('acquiring')}: the master became a replica while its "
                    f"WAIT ran ({reply}); the acquisition was undone",
                    maybe_executed=False,
                ) from reply
            if isinstance(reply, ServerReplyError) and aof is not None:
                raise ServerReplyError(
                    f"{self.context('acquiring')}: the server refused WAITAOF "
                    f"(lock_synced_aof={aof!r} needs Redis 7.2+ or Valkey 7.2+, and "
                    f"appendonly yes for numlocal 1); the acquisition was undone: {reply}",
                    code=reply.code,
                ) from reply
            raise reply
        if aof is not None:
            await self._check_aof(field, lease, aof, max(aof[1], required), reply)
            return
        acknowledged = int(reply)
        if ex.config.lock_synced_replicas == "auto" and acknowledged != required:
            # A replica joined (counted at once) or left (counted only after a hold down:
            # a demoted master in a split brain also reports fewer): count again.
            required = await ex.replicas(self.name, recheck=True)
        if acknowledged >= required:
            return
        await self._unlock_field(field, lease)
        raise ReplicaSyncError(
            f"only {acknowledged} of {required} replicas acknowledged {self.kind} {self.name!r} "
            f"within {ex.config.replica_sync_timeout:g} s; the acquisition was undone",
            name=self.name,
            acknowledged=acknowledged,
            required=required,
        )

    async def _check_aof(
        self, field: str, lease: int, aof: tuple[int, int], replicas: int, reply: Any
    ) -> None:
        """Judge the ``WAITAOF`` reply (``[local fsynced, replicas fsynced]``); undo the
        acquisition and raise ``ReplicaSyncError`` if fewer fsynced it than required."""
        local, acknowledged = int(reply[0]), int(reply[1])
        if local >= aof[0] and acknowledged >= replicas:
            return
        await self._unlock_field(field, lease)
        raise ReplicaSyncError(
            f"{self.kind} {self.name!r} was fsynced by {local} of {aof[0]} local and "
            f"{acknowledged} of {replicas} replica append-only files within "
            f"{self._ex.config.replica_sync_timeout:g} s (lock_synced_aof); the acquisition "
            "was undone",
            name=self.name,
            acknowledged=acknowledged,
            required=replicas,
        )

    def reply_ttl(self, reply: Any) -> int | None:
        """Decode an acquire reply: ``None`` when acquired (or a grant claimed), else how long
        to wait (ms)."""
        if reply is None or reply == GRANTED:
            return None
        if isinstance(reply, list):  # a grant wait's {ms, fresh}
            return int(reply[0])
        return int(reply)

    def acquired(
        self,
        field: str,
        lease: int,
        watchdog: bool,
        reply: Any = None,
        since: float | None = None,
    ) -> None:
        """Book-keeping after a successful acquire: lease memory and watchdog registration.

        ``since`` (monotonic seconds) is when the acquiring call was first sent: Redis set the
        lease no earlier, so a lease counted from it ends no later here than in Redis.
        """
        start = self._ex.monotonic() if since is None else since
        self._leases[field] = lease
        self._held_since.setdefault(field, start)
        self._lost.pop(field, None)
        if watchdog:
            self._expires.pop(field, None)
            cap = self._caps.get(field) if self._caps else None
            self._ex.watchdog.register(
                self.name,
                field,
                self._watchdog_lost,
                kind=self.renewal,
                since=start,
                until=None if cap is None else start + cap - drift(cap),
            )
        else:
            self._expires[field] = start + lease / 1000 - drift(lease / 1000)

    # -- lock-loss notification ---------------------------------------------------------------

    def _watchdog_lost(self, name: str, field: str, reason: LossReason) -> None:
        """Called by the watchdog (services thread) when ``field``'s hold is gone."""
        self._lost[field] = reason
        self._held_since.pop(field, None)
        _observe.lost(self.kind, reason)
        for listener in list(self._listeners.get(field, ())):
            listener(reason)
        if self.on_lost is not None:
            self.on_lost(name, reason)

    def add_loss_listener(self, owner: int, listener: Callable[[LossReason], None]) -> None:
        """Call ``listener(reason)`` (on the services thread) if ``owner``'s hold is lost."""
        self._listeners.setdefault(self.field(owner), []).append(listener)

    def remove_loss_listener(self, owner: int, listener: Callable[[LossReason], None]) -> None:
        """Undo :meth:`add_loss_listener`."""
        listeners = self._listeners.get(self.field(owner), [])
        if listener in listeners:
            listeners.remove(listener)
        if not listeners:
            self._listeners.pop(self.field(owner), None)

    def lease_end(self, owner: int) -> float | None:
        """When ``owner``'s explicit lease ends (monotonic seconds); ``None`` for the watchdog."""
        return self._expires.get(self.field(owner))

    def lost_reason(self, owner: int) -> LossReason | None:
        """Why ``owner``'s hold is known to be lost, or ``None`` (no Redis call is made)."""
        field = self.field(owner)
        reason = self._lost.get(field)
        if reason is not None:
            return reason
        now = self._ex.monotonic()
        end = self._expires.get(field)
        if end is not None and now >= end:
            return LossReason.LEASE_EXPIRED
        renewed_until = self._ex.watchdog.lease_end(self.name, field)
        if renewed_until is not None and now >= renewed_until:
            return LossReason.RENEWAL_FAILED
        return None

    async def ensure_held(self, owner: int) -> None:
        """Check, in Redis, that ``owner`` still holds the lock.

        Raises:
            LockLostError: the hold was lost (the watchdog saw it go, its lease ran out, or
                Redis no longer has it).
            LockNotHeldError: ``owner`` never acquired it (or released it).
        """
        field = self.field(owner)
        reason = self.lost_reason(owner)
        if reason is None and await self.is_held_by(owner):
            return
        if field in self._leases or reason is not None:
            raise LockLostError(
                f"{self.kind} {self.name!r} held by owner {owner} was lost: "
                f"{reason or 'Redis no longer has it'}",
                name=self.name,
                owner=field,
            )
        raise LockNotHeldError(
            f"{self.kind} {self.name!r} is not held by owner {owner} of client "
            f"{self._ex.client_id}",
            name=self.name,
            owner=field,
        )

    async def try_lock(
        self, owner: int, wait_time: object, lease_time: object, max_hold: object = None
    ) -> bool:
        """Acquire within ``wait_time`` seconds (``None``/0: one attempt; ``math.inf``: forever).

        Raises:
            TypeError, ValueError: bad durations (nothing is sent).
            TransportError: Redis failed; an acquire that may have run is not retried.
        """
        wait = wait_seconds(wait_time)
        lease, watchdog = self._lease(lease_time)
        cap = None if max_hold is None else _max_hold(lease_time, max_hold)
        self._ex.refuse_if_closing(self.context("acquiring"))
        self.fresh_field(owner)
        field = self.field(owner)
        if cap is not None:  # the watchdog renews it up to max_hold after the grant
            lease = min(lease, max(1, round(cap * 1000)))
            self._caps[field] = cap
        elif self._caps:
            self._caps.pop(field, None)
        probe = _observe.AcquireProbe(self.kind, self.name, wait)
        first: int | None = None  # the reply of a plain first attempt (see below)
        started: float | None = None  # and when it was sent: the wait counts from then
        if wait > 0 and self._one_wake() and not self._ex.subscribed(self.channel, self.name):
            # No wait of this client on the lock moments ago (its channel would linger):
            # most likely free. A plain attempt first, without setting up a wait (a grant
            # wait, the waiters' count, the wait loop: about 10 % of an uncontended pair's
            # CPU; docs/design.md). Taken, the wait loop starts from its reply; its next
            # attempt, once subscribed, registers the wait.
            started = self._ex.monotonic()
            try:
                first = await self.attempt(field, lease, watchdog, 0.0)
            except TransportError as error:
                if error.maybe_executed:
                    probe.finish("error")
                    raise
                # not sent: the wait loop tries again and rides out the outage
            except BaseException:
                probe.finish("error")
                raise
            else:
                if first is None:
                    self.count_hold(owner, 1)
                    probe.finish("acquired")
                    return True
                probe.busy(first)
        try:
            grant = (
                _GrantWait(lease, field, self._handoff_prefix if self._ex.claim_pop() else None)
                if await self._grant_eligible(lease, wait)
                else None
            )
        except BaseException:
            probe.finish("error")
            raise

        async def attempt() -> int | None:
            if grant is not None:
                since = self._take_grant(grant)
                if since is not None:
                    return await self._granted(field, lease, watchdog, grant, since)
            ttl = await self.attempt(field, lease, watchdog, wait, grant)
            if ttl is not None:
                probe.busy(ttl)
            return ttl

        one_wake = self._one_wake() and wait > 0
        waiting_key = (self._ex.client_id, self.name)
        token = object()
        if one_wake:
            self._local_waiters.setdefault(waiting_key, set()).add(token)
        self._ex.release_started()  # a wait may be granted the lock: shutdown lets it end
        try:
            if grant is not None:
                acquired = await self._wait_for_grant(attempt, wait, grant, first, started)
            elif started is not None:  # after the plain attempt: the one-wake RLock's loop
                acquired = await self._wait_for(attempt, field, wait, first, started)
            else:
                acquired = await self.wait_for(attempt, field, wait)
        except BaseException:
            probe.finish("error")
            raise
        finally:
            if grant is not None:
                self._end_grant_wait(grant)
                if grant.direct:
                    self._ex.free_pop()
            if one_wake:
                tokens = self._local_waiters.get(waiting_key)
                if tokens is not None:
                    tokens.discard(token)
                    if not tokens:
                        self._local_waiters.pop(waiting_key, None)
            self._ex.release_ended()
        if acquired:
            self.count_hold(owner, 1)
        probe.finish("acquired" if acquired else "timeout")
        return acquired

    def lock(
        self, owner: int, lease_time: object, max_hold: object = None
    ) -> Coroutine[Any, Any, bool]:
        """Acquire, waiting as long as it takes: :meth:`try_lock`'s coroutine itself (no
        layer of its own on the hot path). Raises as :meth:`try_lock`."""
        return self.try_lock(owner, math.inf, lease_time, max_hold)

    async def acquire(self, owner: int, blocking: object, timeout: object) -> bool:
        """The ``threading.Lock.acquire(blocking, timeout)`` protocol.

        Raises:
            ValueError: a timeout with ``blocking=False``, or a negative timeout other than -1.
        """
        return await self.try_lock(owner, threading_wait(blocking, timeout), None)

    # -- parts for a fan-out over several locks (MultiLock, RedLock) ---------------------------

    def fan_out_own_keys(self) -> bool:
        """Whether this lock's fan-out calls use syncprims' own keys (see :meth:`_own_keys`).

        An RLock's do not: a MultiLock or RedLock waits in a loop of its own and never
        registers its waits, so nothing of the one wake-up per release is there to keep, and
        its sub-locks run Redisson's plain scripts, as the raw fan-out it is measured against
        (a release's ``0`` still wakes an RLock waiter registered on one of the masters).
        Kinds with scripts of their own (a FairLock's grant) keep theirs."""
        return not self.one_wake and self._own_keys()

    def acquire_call(self, field: str, lease: int) -> Call:
        """A single acquire attempt (never queues) as a fan-out call."""
        command = (
            ScriptCall(scripts.LOCK_ACQUIRE, [self.name], [lease, field])
            if self.one_wake
            else self.acquire_command(field, lease, 0.0)
        )
        return Call(
            self._ex,
            command,
            self.context("acquiring"),
            lambda late: self.on_abandoned_attempt(field, 0.0, late),
            skip_if_busy=True,
        )

    def release_call(self, field: str) -> tuple[Call, str]:
        """An unlock of one hold of ``field`` as a fan-out call, and its latch key."""
        latch = unlock_latch_key(self.name, new_request_id())
        lease = self._leases.get(field, self._watchdog_ms())

        async def late(reply: Any) -> None:  # finished after the fan-out had its quorum
            self.settle_release(field, reply, latch, unknown=False)

        command = (
            self._plain_unlock_command(field, lease, latch)
            if self.one_wake
            else self.unlock_command(field, lease, latch)
        )
        return Call(self._ex, command, self.context("releasing"), late), latch

    async def retry_release(self, call: Call) -> tuple[Any, bool]:
        """Retry a release call alone (idempotent: the same latch key); its reply (or the
        transport error it ended with) and whether an attempt's outcome was unknown."""
        release = _Release(self._ex, call.context)
        try:
            return await release.run(call.call), release.unknown
        except TransportError as error:
            return error, release.unknown

    # -- release ------------------------------------------------------------------------------

    async def _unlock_field(self, field: str, lease: int) -> Any:
        ex = self._ex
        latch = unlock_latch_key(self.name, new_request_id())
        context = self.context("releasing")
        tried = self._own_keys()
        release = _Release(ex, context)
        try:
            try:
                reply = await release.run(self.unlock_command(field, lease, latch))
            except ServerReplyError as error:  # a NOPERM: nothing ran; Redisson's script then
                if not self._refuses_one_wake(error, tried=tried):
                    raise
                reply = await release.run(self.unlock_command(field, lease, latch))
        except BaseException as error:
            self.settle_release(field, error, latch, unknown=release.unknown)
            raise
        self.settle_release(field, reply, latch, unknown=release.unknown)
        return reply

    def _note_release(self, field: str, reply: Any) -> None:
        """Log (and measure) a release reply: 1 released, 0 still held, else not held."""
        since = None if reply == 0 else self._held_since.pop(field, None)
        _observe.released(self.kind, self.name, reply, since)

    def unlock(self, owner: int) -> Coroutine[Any, Any, None]:
        """Release one hold of ``owner`` (a shutdown meanwhile lets it finish): a coroutine,
        ``releasing``'s itself (no layer of its own on the hot path).

        Raises (when awaited):
            LockNotHeldError: ``owner`` does not hold the lock (never did, or it expired).
            TransportError: Redis failed (after retries); the lock expires by its lease.
        """
        return releasing(self._ex, self._unlock(owner))

    async def _unlock(self, owner: int) -> None:
        field = self.field(owner)
        self.count_hold(owner, -1)
        self._ex.watchdog.cancel(self.name, field)
        self._lost.pop(field, None)
        reply = await self._unlock_field(field, self._leases.get(field, self._watchdog_ms()))
        if reply != 0:
            self._expires.pop(field, None)
        if reply not in (0, 1):
            raise LockNotHeldError(
                f"{self.kind} {self.name!r} is not held by owner {owner} of client "
                f"{self._ex.client_id}",
                name=self.name,
                owner=field,
            )

    def raises_on_release_error(self) -> bool:
        """Whether leaving ``with lock:`` raises when the hold was gone: the lock's
        ``raise_on_release_error``, else the client's."""
        own = self.raise_on_release_error
        return self._ex.config.raise_on_release_error if own is None else own

    async def unlock_on_exit(self, owner: int) -> None:
        """The release that ends ``with lock:``: :meth:`unlock`, whose ``LockNotHeldError``
        is logged instead of raised when :meth:`raises_on_release_error` is off.

        Raises:
            LockNotHeldError: the hold was gone (its lease ran out, or it was lost), unless
                ``raise_on_release_error`` is off.
            TransportError: Redis failed (after retries); the lock expires by its lease.
        """
        await release_on_exit(self.unlock(owner), raises=self.raises_on_release_error())

    async def force_unlock(self) -> bool:
        """Delete the lock whoever holds it and wake waiters; ``True`` if it was held."""
        self._ex.watchdog.cancel_all(self.name)
        call = self.force_unlock_command()
        reply = await self.run_script(call, action="force-unlocking")
        return bool(reply == 1)

    async def delete(self) -> bool:
        """A lock's ``delete`` is :meth:`force_unlock` (Redisson)."""
        return await self.force_unlock()

    # -- queries ------------------------------------------------------------------------------

    async def is_locked(self) -> bool:
        """Whether anyone holds the lock."""
        return await self.is_exists()

    async def is_held_by(self, owner: int) -> bool:
        """Whether ``owner`` of this client holds the lock."""
        return bool(await self.read("HEXISTS", self.name, self.field(owner), action="checking"))

    async def get_hold_count(self, owner: int) -> int:
        """How many holds ``owner`` of this client has (0 when none)."""
        count = await self.read("HGET", self.name, self.field(owner), action="reading")
        return 0 if count is None else int(count)

    async def statistics(self, owner: int) -> LockStatistics:
        """A snapshot for ``owner`` (three reads, not atomic together)."""
        return LockStatistics(
            name=self.name,
            kind=self.kind,
            locked=await self.is_locked(),
            owner=self.field(owner),
            hold_count=await self.get_hold_count(owner),
            lease_remaining=await self.remain_time_to_live(),
            waiters=waiters(self._ex, self.name),
        )

    async def info(self) -> LockInfo:
        """What the lock keeps in Redis: holders, TTL, waiters, subscribers
        (``syncprims._core.info``)."""
        return await lock_info(self, self.info_layout)


async def release_on_exit(release: Awaitable[None], *, raises: bool) -> None:
    """Await ``release``, the unlock that ends a ``with`` block; with ``raises`` off
    (``raise_on_release_error=False``), its ``LockNotHeldError`` (the hold ran out or was lost
    inside the block) becomes a WARNING on the ``syncprims.lock`` logger, naming the lock (as
    redis-py's ``Lock(raise_on_release_error=False)``)."""
    try:
        await release
    except LockNotHeldError as error:
        if raises:
            raise
        log.warning(
            "%r was no longer held when its with-block ended (its lease ran out or it was "
            "lost); not raising, as raise_on_release_error is off: %s",
            error.name,
            error,
        )
