"""The one-hop grant (syncprims; docs/grants.md, "The one-hop grant"): a release hands the
lock to a registered waiter itself (``lock_unlock_one.lua``, ``fair_unlock.lua``), writing its
hold, instead of publishing a message for it to try again. A lock kind that grants owns one
:class:`Grant`: the RLock this one, the FairLock its ``FairGrant``, whose hooks
(``give_back_command``, ``unregister``, ``wait_rule``, ``wake_channel``) say what its scripts
and channels are; the attempt's script is the lock's ``grant_acquire_command``.

A wait's states and transitions are :class:`~syncprims._protocol.grantwait.GrantWait`'s
(pure, with its table); this module applies its events under the client's grant mutex
(``ClientLocks.grant_mutex``: the grant channel's rule runs on the subscriber's thread) and
does the I/O they call for: registering, waking, claiming, leaving and giving back.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from syncprims._core.lock.clientstate import ClientLocks
from syncprims._core.lock.release import Release, Releases
from syncprims._core.lock.replica_sync import ReplicaSync
from syncprims._core.lock.view import LockView
from syncprims._core.lock.wakeup import ONE_WAKE_ENTRY_MS, ONE_WAKE_SLICE_MS, OneWake
from syncprims._core.waiting import WaitPlan
from syncprims._protocol.contracts import WAKE_TOKEN, ScriptCall, Subscription, Wakeable, WakePolicy
from syncprims._protocol.grantwait import GRANTED as GRANTED_STATE
from syncprims._protocol.grantwait import GrantWait
from syncprims._protocol.ids import new_request_id
from syncprims._protocol.names import unlock_key_name
from syncprims.errors import ServerReplyError, SyncPrimsError, TransportError

__all__ = ["GRANTED", "GRANT_MIN_LEASE_MS", "Grant", "GrantWait", "grant_policy"]

log = logging.getLogger("syncprims.lock")

GRANT_MIN_LEASE_MS = 2 * ONE_WAKE_SLICE_MS  # shorter leases are not granted (GrantWait)
GRANTED = -3  # an acquire reply: a release granted this wait the lock, and the attempt claimed it


def grant_policy(
    client: ClientLocks, channel: Callable[[str], str], give_back: Callable[[str], None]
) -> WakePolicy:
    """The rule of a client's grant channel of a lock (the one-hop grant): a grant for
    a wait in progress of ``client`` is recorded on it and wakes the local waiters of the
    channel that ``channel(member)`` names (an RLock's: the lock's, where the granted one
    finds it and any other goes back to sleep after its attempt; a FairLock's: the owner's
    own); a grant that no wait takes any more (it ended, or moved on to a newer
    registration) is handed to ``give_back`` (which releases it in the background, only if
    still unclaimed)."""

    def policy(waiters: Wakeable, message: bytes) -> None:
        member = message.decode()
        live, waker = _record_grant(client, member)
        if not live:
            give_back(member)
        elif waker is not None:  # its waiter is blocked: wake it alone
            waker()
        else:  # its waiter is between waits (it finds the grant) or in a plain wait
            waiters.wake_paired(channel(member))

    return policy


def _record_grant(client: ClientLocks, member: str) -> tuple[bool, Callable[[], None] | None]:
    """The announcement of the grant to ``member`` (its message, or its direct push) came:
    ``False`` when no wait takes it any more (it is to be given back). With ``True``, what
    wakes the waiter alone while it is blocked (:class:`_GrantPark`), if it is."""
    with client.grant_mutex:
        wait = client.grant_waits.get(member)
        if wait is not None and wait.grant_announced(member):
            return True, wait.waker
    return False, None


class Grant:
    """One lock object's part of the one-hop grant: its waits' registrations, their wake-up
    by the client's grant channel (or a direct push), claiming, leaving and giving back.

    Args:
        lock: the lock, as its parts see it.
        one_wake: the RLock's one wake-up per release (its scripts give a grant back), or
            ``None`` (a kind whose scripts grant by themselves: the FairLock's).
        releases: the lock's releases (a grant taken past its lease is given back).
        replicas: the lock's replica sync (a grant skips ``WAIT``: none with replicas).
    """

    __slots__ = ("_client", "_ex", "_lock", "_one_wake", "_releases", "_replicas", "_rules")

    def __init__(
        self,
        lock: LockView,
        one_wake: OneWake | None,
        releases: Releases,
        replicas: ReplicaSync,
    ) -> None:
        self._lock = lock
        self._ex = lock.executor
        self._client = lock.client_state
        self._one_wake = one_wake
        self._releases = releases
        self._replicas = replicas
        self._rules: tuple[str, tuple[str, WakePolicy]] | None = None

    # -- hooks a lock kind's grant overrides (the RLock's here; the FairLock's FairGrant) --

    def give_back_command(self, field: str, unlock_key: str, member: str) -> ScriptCall:
        """The release of ``field``'s hold, only while the grant marker names ``member``."""
        assert self._one_wake is not None  # the RLock grants only with its own scripts
        return self._one_wake.unlock_command(field, self._lock.watchdog_ms(), unlock_key, member)

    async def unregister(self, member: str, wait: float) -> int:
        """Remove a grant wait's registration ``member`` (when it gives up); 1 when it was
        still registered (no release took it), 0 when it was not.

        Raises:
            TransportError: Redis failed.
        """
        lock = self._lock
        return int(
            await self._ex.command(
                "ZREM",
                lock.waiters_key,
                member,
                context=lock.context("giving up the wait for"),
                route=lock.name,
            )
        )

    def wait_rule(self, field: str) -> tuple[str, WakePolicy]:
        """The channel a grant wait of ``field`` listens on, beside its client's grant
        channel, and that channel's rule."""
        assert self._one_wake is not None
        return self._lock.channel, self._one_wake.rules()[0]

    def wake_channel(self, member: str) -> str:
        """The local channel whose waiters a grant to ``member`` wakes."""
        return self._lock.channel

    # -- the mechanism ----------------------------------------------------------------------

    def channel_rule(self) -> tuple[str, WakePolicy]:
        """This client's grant channel of the lock and its rule (made once per client)."""
        client = self._ex.client_id
        rules = self._rules
        if rules is None or rules[0] != client:  # a forked child has a new client id
            channel = self._lock.grant_prefix + client
            rule = grant_policy(self._client, self.wake_channel, self.give_back_later)
            rules = self._rules = (client, (channel, rule))
        return rules[1]

    async def start(self, lease: int, field: str, wait: float) -> GrantWait | None:
        """A wait of this caller that a release may grant the lock to, if it may be granted
        (``Config.lock_grant_handoff``, a lease of ``GRANT_MIN_LEASE_MS`` at least, no
        ``WAIT``/``WAITAOF`` to make: a grant skips them); else ``None``."""
        lock = self._lock
        ex = self._ex
        if wait <= 0 or lease < GRANT_MIN_LEASE_MS or not lock.uses_own_keys():
            return None
        if not ex.config.lock_grant_handoff or ex.config.lock_synced_aof is not None:
            return None
        if await self._replicas.required() != 0:
            return None
        direct = lock.handoff_prefix if ex.claim_pop() else None
        return GrantWait(lease, field, next(self._client.wait_ids), direct)

    def register(
        self, grant: GrantWait, field: str, lease: int, wait: float
    ) -> tuple[ScriptCall, str, str, float]:
        """An attempt of ``grant``'s wait: it keeps the wait registered (``fresh`` when
        ``member`` is gone) and may claim a grant. Returns the call, ``member``, ``fresh``
        and the wait's ``floor`` (when a grant it claims started, at the latest); see
        :meth:`settle` for a reply that did not acquire."""
        ex = self._ex
        client = self._client
        fresh = grant.next_member()
        waits = "1" if ex.subscribed(self.channel_rule()[0], self._lock.name) else "0"
        with client.grant_mutex:
            member, floor = grant.member, grant.floor
            if waits == "1":  # a grant to either may come before this attempt's reply
                for named in grant.attempt_sent(fresh, ex.monotonic()):
                    client.grant_waits[named] = grant
        call = self._lock.grant_acquire_command(
            field, lease, wait, waits=waits, member=member, fresh=fresh
        )
        return call, member, fresh, floor

    def settle(
        self, grant: GrantWait, reply: list[Any], member: str, fresh: str, sent: float
    ) -> int:
        """Book the reply ``{ms, fresh registered}`` of a :meth:`register` attempt that did
        not acquire (``sent``: when it was sent); how long to wait (ms)."""
        client = self._client
        with client.grant_mutex:
            # a message for the member not in use now finds no wait: it is given back
            client.grant_waits.pop(grant.attempt_failed(reply[1] == 1, member, fresh, sent), None)
        # attempts at least every slice, so that ``floor`` stays recent (GrantWait)
        return min(int(reply[0]), ONE_WAKE_SLICE_MS)

    def claimed(self, grant: GrantWait) -> None:
        """An attempt claimed a grant (reply ``GRANTED``)."""
        with self._client.grant_mutex:
            grant.grant_claimed()

    def take(self, grant: GrantWait) -> float | None:
        """Claim the grant whose announcement came for ``grant`` (``None``: none): when its
        lease started, at the latest."""
        if grant.state is not GRANTED_STATE:  # the usual case, read without the mutex
            return None
        with self._client.grant_mutex:
            return grant.grant_taken()

    def late(self, grant: GrantWait) -> None:
        """An acquisition of ``grant``'s wait came past its lease and was given back
        (``Releases.give_back_late``): the wait goes on, for a new grant."""
        with self._client.grant_mutex:
            grant.given_back_late()

    async def granted(
        self, field: str, lease: int, watchdog: bool, grant: GrantWait, since: float
    ) -> int | None:
        """Take a grant whose message arrived; as an attempt's reply (``None``: acquired)."""
        if await self._releases.give_back_late(field, lease, since):
            self.late(grant)
            return 0
        self._lock.acquired(field, lease, watchdog, None, since=since)
        return None

    def plan(
        self, grant: GrantWait, wait: float, plain: tuple[int | None, float | None]
    ) -> WaitPlan:
        """How ``grant``'s wait of ``wait`` seconds waits: woken by this client's grant
        channel (the herald of its plan) and by the lock channel's ``0`` as any waiter; a
        direct wait pops its grant from its own list instead (:class:`_GrantPark`).
        ``plain``: a plain first attempt's reply and its send time, or ``None``s."""
        channel, policy = self.wait_rule(grant.field)
        park = _GrantPark(self, grant, wait, self._lock.name)
        return WaitPlan(
            wait,
            channel,
            policy,
            route=self._lock.name,
            herald=self.channel_rule(),
            give_up=park.leave,
            park=park,
            first=plain[0],
            started=plain[1],
        )

    def end_wait(self, grant: GrantWait) -> None:
        """The wait is over: forget it; a grant it did not take is given back."""
        if grant.members:  # registered (not acquired at once)
            client = self._client
            with client.grant_mutex:
                for member in grant.members:
                    client.grant_waits.pop(member, None)
                pending = grant.ended()  # a message read from now on is given back
            if pending is not None:
                self.give_back_later(pending)
        if grant.direct:
            self._ex.free_pop()

    async def leave_registry(self, member: str, direct: bool, wait: float) -> None:
        """Remove a grant wait's registration; for a direct one already popped (by a
        release, whose grant no message announces), give that grant back."""
        try:
            removed = await self.unregister(member, wait)
        except ServerReplyError as error:  # the entry expires by itself
            log.debug("%s: leaving the waiters' registry failed: %s", self._lock.name, error)
            return
        if direct and removed == 0:  # popped by a grant (or expired): give it back
            await self.give_back(member)

    async def _leave_later(self, member: str, wait: float) -> None:
        """:meth:`leave_registry` of a direct wait, retried until it succeeds or the
        registration has expired (background, after Redis failed the waiter's own try)."""
        ex = self._ex
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
        ex = self._ex
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
        ex = self._ex
        unlock_key = unlock_key_name(lock.name, new_request_id())
        release = Release(ex, lock.context("giving back a grant of"))
        try:
            reply = await release.run(self.give_back_command(field, unlock_key, member))
        except SyncPrimsError as error:
            log.warning(
                "%s: giving back a grant nobody took failed (%r); its lease bounds it",
                lock.name,
                error,
            )
            return
        finally:
            if not release.unknown:
                ex.janitor.discard(unlock_key)
        log.debug("%s: gave back a grant nobody took (%r): %s", lock.name, member, reply)


class _GrantPark:
    """A grant wait's ``park`` and ``give_up`` (its :meth:`Grant.plan`; an object, not
    closures: [hot-3]). A direct wait pops its grant from its own list; any other is woken
    alone by its grant's message (the grant channel's rule calls its waker), not every
    local waiter of the lock: several threads or tasks of one client would all run an
    attempt for one grant (a herd within the client)."""

    __slots__ = ("client", "ex", "grant", "part", "route", "wait")

    def __init__(self, part: Grant, grant: GrantWait, wait: float, route: str) -> None:
        self.part = part
        self.grant = grant
        self.wait = wait
        self.route = route
        self.ex = part._ex
        self.client = part._client

    async def __call__(self, sub: Subscription | None, pause: float) -> None:
        assert sub is not None  # a grant wait's plan names its channel
        grant, ex = self.grant, self.ex
        if grant.direct:
            popped = await ex.wait_pushed(sub, grant.key, pause, self.route)
            if isinstance(popped, bytes) and popped != WAKE_TOKEN:
                member = popped.decode()
                if not _record_grant(self.client, member)[0]:
                    self.part.give_back_later(member)
            return
        try:
            await ex.wait(sub, pause, self.arm)
        finally:
            with self.client.grant_mutex:
                grant.disarmed()

    def arm(self, wake: Callable[[], None]) -> None:
        """The wait is queued on its latch: ``wake`` wakes it alone (``Armed``)."""
        with self.client.grant_mutex:
            ready = self.grant.armed(wake)
        if ready:  # came while it was not blocked: do not block
            wake()

    async def leave(self) -> None:
        """The wait's ``give_up``: leave the registry (a direct wait whose leave Redis
        failed tries again in the background: a grant to it would reach nobody)."""
        grant, part, wait = self.grant, self.part, self.wait
        with self.client.grant_mutex:
            member = grant.member
        try:
            await part.leave_registry(member, grant.direct, wait)
        except TransportError:
            if not grant.direct:
                raise
            # until the registration has expired (its lifetime)
            self.ex.background(lambda: part._leave_later(member, wait))
            raise
