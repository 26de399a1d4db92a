"""The one-hop grant (syncprims; docs/design.md, "The one-hop grant"): a release hands the
lock to a registered waiter itself (``lock_unlock_one.lua``, ``fair_unlock.lua``), writing its
hold, instead of publishing a message for it to try again. A lock kind that grants owns one
:class:`Grant`: the RLock this one, the FairLock its ``FairGrant``, whose hooks
(``give_back_command``, ``unregister``, ``wait_rule``, ``wake_channel``) say what its scripts
and channels are; the attempt's script is the lock's ``grant_acquire_command``.
"""

from __future__ import annotations

import itertools
import logging
import os
import threading
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from syncprims._core.onewake import ONE_WAKE_ENTRY_MS, ONE_WAKE_SLICE_MS
from syncprims._core.release import Release
from syncprims._core.waiting import acquire_loop
from syncprims._protocol.contracts import WAKE_TOKEN, ScriptCall, Subscription, Wakeable, WakePolicy
from syncprims._protocol.ids import new_request_id
from syncprims._protocol.names import unlock_latch_key
from syncprims.errors import ServerReplyError, SyncPrimsError, TransportError

if TYPE_CHECKING:
    from syncprims._core.lock import LockCore

__all__ = [
    "GRANTED",
    "GRANT_MIN_LEASE_MS",
    "Grant",
    "GrantWait",
    "gave_back_late",
    "grant_policy",
    "past_lease",
]

log = logging.getLogger("syncprims.lock")

GRANT_MIN_LEASE_MS = 2 * ONE_WAKE_SLICE_MS  # shorter leases are not granted (GrantWait)
GRANTED = -3  # an acquire reply: a release granted this wait the lock, and the attempt claimed it


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
    wakes the waiter alone while it is blocked (:meth:`Grant.wait_for`), if it is."""
    with _GRANT_MUTEX:
        wait = _GRANT_WAITS.get(member)
        live = wait is not None and not wait.claimed and member in (wait.member, wait.next)
        if wait is not None and live:
            wait.granted = member
            wait.since = wait.next_sent if member == wait.next else wait.floor
            return True, wait.waker
    return False, None


class GrantWait:
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
    gives back a grant made meanwhile (:meth:`Grant.leave_wait`).

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
_GRANT_WAITS: dict[str, GrantWait] = {}  # every member of every wait in progress -> its wait


def _forget_grant_waits() -> None:
    """In a forked child: the parent's waits are not its own (and the mutex may be taken)."""
    global _GRANT_MUTEX
    _GRANT_MUTEX = threading.Lock()
    _GRANT_WAITS.clear()


os.register_at_fork(after_in_child=_forget_grant_waits)


def past_lease(lock: LockCore, lease: int, since: float) -> bool:
    """Whether an acquisition of ``lock`` whose ``lease`` (ms) started no earlier than
    ``since`` (monotonic seconds) came past that lease: :func:`gave_back_late`'s test,
    without a coroutine (an acquire asks it first)."""
    return lock._ex.monotonic() - since >= lease / 1000


async def gave_back_late(
    lock: LockCore, field: str, lease: int, since: float, grant: GrantWait | None
) -> bool:
    """Whether an acquisition of ``lock`` whose lease started no earlier than ``since``
    (monotonic seconds) came past that lease (:func:`past_lease`): then it is given back
    (the lock may be someone else's by now) and ``grant``'s wait goes on with a new
    registration. Found by the chaos campaign: a client paused 2.4-3.3 s mid-acquire entered
    a 2 s lease."""
    if not past_lease(lock, lease, since):
        return False
    late = lock._ex.monotonic() - since
    log.warning(
        "%s: the grant came %.3f s after it was asked for, past its %.3f s lease: not taken",
        lock.context("acquiring"),
        late,
        lease / 1000,
    )
    try:
        await lock.unlock_field(field, lease)
    except SyncPrimsError as error:  # its lease bounds it
        log.debug("%s: giving back a late grant failed: %r", lock.name, error)
    if grant is not None:
        with _GRANT_MUTEX:  # wait for a new grant
            grant.claimed = False
            grant.granted = None
            grant.member = grant.next_member()
    return True


class Grant:
    """One lock object's part of the one-hop grant: its waits' registrations, their wake-up
    by the client's grant channel (or a direct push), claiming, leaving and giving back."""

    __slots__ = ("_lock", "_rules")

    def __init__(self, lock: LockCore) -> None:
        self._lock = lock
        self._rules: tuple[str, tuple[str, WakePolicy]] | None = None

    # -- hooks a lock kind's grant overrides (the RLock's here; the FairLock's FairGrant) --

    def give_back_command(self, field: str, latch: str, member: str) -> ScriptCall:
        """The release of ``field``'s hold, only while the grant marker names ``member``."""
        lock = self._lock
        assert lock.one_wake is not None  # the RLock grants only with its own scripts
        return lock.one_wake.unlock_command(field, lock.watchdog_ms(), latch, member)

    async def unregister(self, member: str, wait: float) -> int:
        """Remove a grant wait's registration ``member`` (when it gives up); 1 when it was
        still registered (no release took it), 0 when it was not.

        Raises:
            TransportError: Redis failed.
        """
        lock = self._lock
        return int(
            await lock._ex.command(
                "ZREM",
                lock.waiters,
                member,
                context=lock.context("giving up the wait for"),
                route=lock.name,
            )
        )

    def wait_rule(self, field: str) -> tuple[str, WakePolicy]:
        """The channel a grant wait of ``field`` listens on, beside its client's grant
        channel, and that channel's rule."""
        lock = self._lock
        assert lock.one_wake is not None
        return lock.channel, lock.one_wake.rules()[0]

    def wake_channel(self, member: str) -> str:
        """The local channel whose waiters a grant to ``member`` wakes."""
        return self._lock.channel

    # -- the mechanism ----------------------------------------------------------------------

    def channel_rule(self) -> tuple[str, WakePolicy]:
        """This client's grant channel of the lock and its rule (made once per client)."""
        lock = self._lock
        client = lock._ex.client_id
        rules = self._rules
        if rules is None or rules[0] != client:  # a forked child has a new client id
            channel = lock.grant_prefix + client
            rules = self._rules = (
                client,
                (channel, grant_policy(self.wake_channel, self.give_back_later)),
            )
        return rules[1]

    async def start(self, lease: int, field: str, wait: float) -> GrantWait | None:
        """A wait of this caller that a release may grant the lock to, if it may be granted
        (``Config.lock_grant_handoff``, a lease of ``GRANT_MIN_LEASE_MS`` at least, no
        ``WAIT``/``WAITAOF`` to make: a grant skips them); else ``None``."""
        lock = self._lock
        ex = lock._ex
        if wait <= 0 or lease < GRANT_MIN_LEASE_MS or not lock.uses_own_keys():
            return None
        if not ex.config.lock_grant_handoff or ex.config.lock_synced_aof is not None:
            return None
        if await lock.replicas.required() != 0:
            return None
        return GrantWait(lease, field, lock.handoff_prefix if ex.claim_pop() else None)

    def register(
        self, grant: GrantWait, field: str, lease: int, wait: float
    ) -> tuple[ScriptCall, str, str, float]:
        """An attempt of ``grant``'s wait: it keeps the wait registered (``fresh`` when
        ``member`` is gone) and may claim a grant. Returns the call, ``member``, ``fresh``
        and the wait's ``floor`` (when a grant it claims started, at the latest); see
        :meth:`settle` for a reply that did not acquire."""
        lock = self._lock
        ex = lock._ex
        fresh = grant.next_member()
        waits = "1" if ex.subscribed(self.channel_rule()[0], lock.name) else "0"
        with _GRANT_MUTEX:
            member, floor = grant.member, grant.floor
            if waits == "1":  # a grant to either may come before this attempt's reply
                grant.next, grant.next_sent = fresh, ex.monotonic()
                grant.members.update((member, fresh))
                _GRANT_WAITS[member] = _GRANT_WAITS[fresh] = grant
        call = lock.grant_acquire_command(
            field, lease, wait, waits=waits, member=member, fresh=fresh
        )
        return call, member, fresh, floor

    @staticmethod
    def settle(grant: GrantWait, reply: list[Any], member: str, fresh: str, sent: float) -> int:
        """Book the reply ``{ms, fresh registered}`` of a :meth:`register` attempt that did
        not acquire (``sent``: when it was sent); how long to wait (ms)."""
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
        # attempts at least every slice, so that ``floor`` stays recent (GrantWait)
        return min(int(reply[0]), ONE_WAKE_SLICE_MS)

    @staticmethod
    def claimed(grant: GrantWait) -> None:
        """An attempt claimed a grant (reply ``GRANTED``)."""
        with _GRANT_MUTEX:
            grant.claimed = True

    @staticmethod
    def take(grant: GrantWait) -> float | None:
        """Claim the grant whose message arrived for ``grant`` (``None``: none): when its
        lease started, at the latest."""
        if grant.granted is None:  # the usual case, read without the mutex
            return None
        with _GRANT_MUTEX:
            if grant.granted is None or grant.claimed:
                return None
            grant.claimed = True
            return grant.since

    async def granted(
        self, field: str, lease: int, watchdog: bool, grant: GrantWait, since: float
    ) -> int | None:
        """Take a grant whose message arrived; as an attempt's reply (``None``: acquired)."""
        lock = self._lock
        if await gave_back_late(lock, field, lease, since, grant):
            return 0
        lock.acquired(field, lease, watchdog, None, since=since)
        return None

    async def wait_for(
        self,
        attempt: Callable[[], Awaitable[int | None]],
        wait: float,
        grant: GrantWait,
        first: int | None = None,
        started: float | None = None,
    ) -> bool:
        """``LockCore.wait_for`` for a wait that may be granted the lock: woken by this
        client's grant channel (and by the lock channel's ``0`` as any waiter); a direct
        wait pops its grant from its own list instead (:class:`GrantWait`)."""
        lock = self._lock
        ex = lock._ex
        block = None
        channel, policy = self.wait_rule(grant.field)
        if grant.direct:

            async def block(sub: Subscription, pause: float) -> None:
                popped = await ex.wait_pushed(sub, grant.key, pause, lock.name)
                if isinstance(popped, bytes) and popped != WAKE_TOKEN:
                    member = popped.decode()
                    if not _record_grant(member)[0]:
                        self.give_back_later(member)

        else:
            # A grant's message wakes this waiter alone (the grant channel's rule calls its
            # waker), not every local waiter of the lock (several threads or tasks of one
            # client would all run an attempt for one grant: a herd within the client).

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
            ex,
            attempt,
            channel=channel,
            policy=policy,
            wait=wait,
            on_give_up=self.leave_wait(grant, wait),
            route=lock.name,
            herald=self.channel_rule(),
            first=first,
            started=started,
            block=block,
        )

    def end_wait(self, grant: GrantWait) -> None:
        """The wait is over: forget it; a grant it did not take is given back."""
        if grant.members:  # registered (not acquired at once)
            with _GRANT_MUTEX:
                for member in grant.members:
                    _GRANT_WAITS.pop(member, None)
                pending = grant.granted if not grant.claimed else None
                grant.claimed = True  # a message read from now on is given back
            if pending is not None:
                self.give_back_later(pending)
        if grant.direct:
            self._lock._ex.free_pop()

    def leave_wait(self, grant: GrantWait, wait: float) -> Callable[[], Awaitable[None]]:
        """The ``on_give_up`` of a wait that may be granted: leave the registry."""

        async def leave() -> None:
            with _GRANT_MUTEX:
                member = grant.member
            try:
                await self.leave_registry(member, grant.direct, wait)
            except TransportError:
                if not grant.direct:
                    raise
                # a grant to it would reach nobody: try again in the background, until
                # the registration has expired (its lifetime)
                self._lock._ex.background(lambda: self._leave_later(member, wait))
                raise

        return leave

    async def leave_registry(self, member: str, direct: bool, wait: float) -> None:
        """Remove a grant wait's registration; for a direct one already popped (by a
        release, whose grant no message announces), give that grant back."""
        lock = self._lock
        try:
            removed = await self.unregister(member, wait)
        except ServerReplyError as error:  # the entry expires by itself
            log.debug("%s: leaving the waiters' registry failed: %s", lock.name, error)
            return
        if direct and removed == 0:  # popped by a grant (or expired): give it back
            await self.give_back(member)

    async def _leave_later(self, member: str, wait: float) -> None:
        """:meth:`leave_registry` of a direct wait, retried until it succeeds or the
        registration has expired (background, after Redis failed the waiter's own try)."""
        ex = self._lock._ex
        end = ex.monotonic() + ONE_WAKE_ENTRY_MS / 1000
        attempt = 0
        while True:
            await ex.sleep(ex.retry_delay(min(attempt, 10)))
            attempt += 1
            try:
                await self.leave_registry(member, True, wait)
                return
            except TransportError as error:
                if ex.monotonic() >= end:
                    log.warning(
                        "%s: leaving a direct grant wait failed: %r", self._lock.name, error
                    )
                    return

    def give_back_later(self, member: str) -> None:
        """Release, in the background, the grant to ``member`` if no attempt claimed it
        (its waiter stopped waiting first); called by the grant channel's rule. Counted as
        a release in flight from now on, so that shutdown lets it finish."""
        ex = self._lock._ex
        ex.release_started()

        async def give_back() -> None:
            try:
                await self.give_back(member)
            finally:
                ex.release_ended()

        try:
            ex.background(give_back)
        except BaseException:
            ex.release_ended()
            raise

    async def give_back(self, member: str) -> None:
        """Release the grant to ``member``, only while the grant marker still names it."""
        lock = self._lock
        field = member.split("|", 3)[3]
        ex = lock._ex
        latch = unlock_latch_key(lock.name, new_request_id())
        release = Release(ex, lock.context("giving back a grant of"))
        try:
            reply = await release.run(self.give_back_command(field, latch, member))
        except SyncPrimsError as error:
            log.warning(
                "%s: giving back a grant nobody took failed (%r); its lease bounds it",
                lock.name,
                error,
            )
            return
        finally:
            if not release.unknown:
                ex.janitor.discard(latch)
        log.debug("%s: gave back a grant nobody took (%r): %s", lock.name, member, reply)
