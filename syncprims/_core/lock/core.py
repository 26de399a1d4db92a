"""RLock: the reentrant, non-fair lock (Redisson ``RedissonLock``; redisson-spec.md 2 and 3).

Layout (interoperable with Redisson): a hash at the lock's name with one field
``<client uuid>:<owner id>`` whose value is the hold count, with a TTL equal to the lease.
Unlock publishes ``0`` on ``redisson_lock__channel:{name}``. One script call to acquire and
one to release when uncontended. The decisions (leases and the watchdog, the TTL an unlock
re-arms, what is never re-sent, abandoned acquires, late releases) are in ``docs/locks.md``;
beside them, the watchdog registration is made before the acquire returns and dropped at
the start of unlock, whatever the unlock's outcome.

The mechanisms around the algorithm are parts the lock owns, each a module of this package:
the one wake-up per release and the lock channels' wake-up rules (``wakeup.py``,
:class:`~syncprims._core.lock.wakeup.OneWake`), the one-hop grant (``grant.py``), the release
and its late-release safety (``release.py``), the memory of holds and their loss
(``holds.py``), replica sync (``replica_sync.py``) and the calls encoded once (``kept.py``).
Each part sees the lock through :class:`~syncprims._core.lock.view.LockView` and is handed the
parts it works with; none imports this module. A kind says which parts it uses by the part
classes it names (:attr:`LockCore.one_wake_part`, :attr:`LockCore.grant_part`); what a
client's locks share is kept per client (``clientstate.py``).
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, ClassVar

import attrs

from syncprims import _observe
from syncprims._core.info import lock_info
from syncprims._core.lock.clientstate import client_locks
from syncprims._core.lock.grant import GRANTED, Grant, GrantWait
from syncprims._core.lock.holds import Holds, max_hold_seconds
from syncprims._core.lock.release import Releases, past_lease, release_on_exit
from syncprims._core.lock.replica_sync import ReplicaSync
from syncprims._core.lock.wakeup import UNLOCK_MESSAGE, OneWake, wait_plan
from syncprims._core.objects import ExpirableCore
from syncprims._core.retry import retry_eval
from syncprims._core.waiting import Attempt, acquire_loop, waiters
from syncprims._protocol import scripts
from syncprims._protocol.contracts import Arg, Executor, RenewalKind, ScriptCall
from syncprims._protocol.ids import owner_field
from syncprims._protocol.info import LockInfo
from syncprims._protocol.kinds import KINDS
from syncprims._protocol.names import (
    lock_channel,
    lock_grant_channel_prefix,
    lock_grant_marker_name,
    lock_handoff_list_prefix,
    lock_herald_channel,
    lock_reservation_name,
    lock_waiters_name,
)
from syncprims._protocol.statistics import LockStatistics
from syncprims._protocol.timing import lease_ms, threading_wait, wait_seconds
from syncprims.errors import (
    LockLostError,
    LockNotHeldError,
    ServerReplyError,
    SyncPrimsError,
    TransportError,
)

__all__ = ["LOCK_RENEWAL", "AttemptUndo", "LockCore"]


def _lock_renew_command(lease: int, batch: list[tuple[str, str]]) -> tuple[list[str], list[Arg]]:
    args: list[Arg] = [lease]
    args.extend(field for _, field in batch)
    return [name for name, _ in batch], args


LOCK_RENEWAL = RenewalKind("lock", scripts.LOCK_RENEW, _lock_renew_command)
"""Plain lock holds (RLock, FairLock, FencedLock, the write side of a read-write lock)."""


class LockCore(ExpirableCore):
    """The RLock algorithms, for any owner id chosen by a face."""

    KIND = KINDS["lock"]
    renewal: RenewalKind = LOCK_RENEWAL
    # Whether a single attempt's call (single_acquire_command) carries the time, so that
    # it is made afresh for each attempt (a FairLock's purges its queue by it); a MultiLock
    # keeps the others' calls between attempts (syncprims._core.multi).
    timed_attempt: ClassVar[bool] = False
    # The parts a kind uses beside Redisson's layout (module docstring): the RLock's own
    # scripts have both; a kind with scripts of its own names ``None`` for what they lack.
    one_wake_part: ClassVar[type[OneWake] | None] = OneWake
    grant_part: ClassVar[type[Grant] | None] = Grant
    # A watchdog lease of the kind's own, seconds (a leader election's), else ``None``:
    # the client's ``lock_watchdog_timeout`` (:meth:`watchdog_ms` says it in ms).
    own_lease: float | None = None

    def __init__(self, executor: Executor, name: str) -> None:
        super().__init__(executor, name)
        self.client_state = client_locks(executor)
        self.channel = lock_channel(self.name)
        self.waiters_key = lock_waiters_name(self.name)
        self.herald = lock_herald_channel(self.name)
        self.reservation = lock_reservation_name(self.name)
        self.grant_marker = lock_grant_marker_name(self.name)
        self.grant_prefix = lock_grant_channel_prefix(self.name)
        self.handoff_prefix = lock_handoff_list_prefix(self.name)
        self.kept = self.client_state.kept  # calls encoded once, per client (kept.py)
        self.holds = Holds(self)
        self.releases = Releases(self, self.holds)
        self.replicas = ReplicaSync(self, self.releases)
        one_wake, grant = self.one_wake_part, self.grant_part
        self.one_wake = None if one_wake is None else one_wake(self)
        self.grant = (
            None if grant is None else grant(self, self.one_wake, self.releases, self.replicas)
        )
        # Whether leaving ``with lock:`` raises when the hold was gone; ``None``: the
        # client's ``Config.raise_on_release_error``.
        self.raise_on_release_error: bool | None = None

    # -- the ACL fall-back ---------------------------------------------------------------------

    def uses_own_keys(self) -> bool:
        """Whether this lock's scripts use syncprims' own keys beside Redisson's layout (the
        one wake-up per release, the one-hop grant), which an ACL written for Redisson's
        keys refuses (then :meth:`refuses_own_keys` falls back for the client)."""
        return self.one_wake is not None and not self.client_state.own_keys_refused

    def refuses_own_keys(self, error: ServerReplyError, *, tried: bool) -> bool:
        """After ``error`` on a call: whether to make it again with Redisson's script (a
        ``NOPERM`` on syncprims' own keys; decided once per client,
        :meth:`~syncprims._core.lock.clientstate.ClientLocks.refuses_own_keys`). ``tried``:
        whether the failed call used them."""
        return self.client_state.refuses_own_keys(error, tried=tried, where=self.waiters_key)

    # -- owners -------------------------------------------------------------------------------

    def field(self, owner: int) -> str:
        """The hash field that names ``owner`` of this client (``<client uuid>:<owner id>``,
        with ``.<n>`` after a release whose outcome was unknown: ``release.py``)."""
        incarnations = self.client_state.incarnations
        n = incarnations.get((self.name, owner)) if incarnations else None
        field = owner_field(self._ex.client_id, owner)
        return field if n is None else f"{field}.{n}"

    def owner_fields(self, owner: int) -> list[str]:
        """Every field ``owner`` can hold the lock's hash with (a read-write lock: both
        sides); a new incarnation replaces them all."""
        return [self.field(owner)]

    def not_held(self, owner: int, field: str) -> LockNotHeldError:
        """The error of a call that needs ``owner``'s hold, which it does not have."""
        return LockNotHeldError(
            f"{self.kind} {self.name!r} is not held by owner {owner} of client "
            f"{self._ex.client_id}",
            name=self.name,
            owner=field,
        )

    def lease_of(self, lease_time: object) -> tuple[int, bool]:
        """(lease ms, watchdog?) for a ``lease_time`` argument."""
        if lease_time is None:
            return self.watchdog_ms(), True
        return lease_ms(lease_time), False

    def watchdog_ms(self) -> int:
        """The watchdog's lease, ms (:attr:`own_lease`, else ``Config.lock_watchdog_timeout``)."""
        lease = self.own_lease
        return round((self._ex.config.lock_watchdog_timeout if lease is None else lease) * 1000)

    # -- hooks a lock kind overrides ------------------------------------------------------------

    def acquire_command(self, field: str, lease: int, wait: float) -> ScriptCall:
        """The acquire script call for ``field`` (``wait``: the caller's wait time, seconds)."""
        one_wake = self.one_wake
        if one_wake is None or self.client_state.own_keys_refused:
            return ScriptCall(scripts.LOCK_ACQUIRE, [self.name], [lease, field])
        return one_wake.first_command(field, lease, wait)

    def wait_channel(self, field: str) -> str:
        """The channel that announces a release to ``field``'s waits."""
        return self.channel

    def grant_acquire_command(
        self, field: str, lease: int, wait: float, *, waits: str, member: str, fresh: str
    ) -> ScriptCall:
        """An attempt of a grant wait (``syncprims._core.lock.grant``): it claims a grant to
        ``member`` (``GRANTED``) or keeps it registered (``fresh`` when gone) while
        ``waits == "1"``; a failed attempt replies ``{ms, 1 if fresh was registered}``."""
        assert self.one_wake is not None  # a grant is made only with the RLock's own keys
        return self.one_wake.acquire_command(field, lease, waits, "0", member=member, fresh=fresh)

    def give_up(self, field: str, wait: float) -> Callable[[], Awaitable[None]] | None:
        """What to run when ``field`` stops waiting without the lock (``None``: nothing)."""
        one_wake = self.one_wake
        if one_wake is None or wait <= 0 or self.client_state.own_keys_refused:
            return None
        return one_wake.give_up()

    async def on_abandoned_attempt(self, field: str, wait: float, late_reply: Any) -> None:
        """The late reply of an attempt whose caller went away: undo what it did."""
        if self.reply_ttl(late_reply) is None:  # the abandoned attempt did acquire: undo it
            await self.releases.unlock_field(field, self.holds.lease(field))

    def unlock_command(self, field: str, lease: int, unlock_key: str) -> ScriptCall:
        """The unlock script call; its reply: nil (not held), 0 (still held), 1 (released)."""
        one_wake = self.one_wake
        if one_wake is None or self.client_state.own_keys_refused:
            return self.plain_unlock_command(field, lease, unlock_key)
        return one_wake.unlock_command(field, lease, unlock_key, "")

    def plain_unlock_command(self, field: str, lease: int, unlock_key: str) -> ScriptCall:
        """Redisson's unlock script (``lock_unlock.lua``): the ``0`` on the lock channel."""
        publish, ttl = self.publish, self._ex.bounds.unlock_key_ttl_ms
        args: list[Arg] = [UNLOCK_MESSAGE, lease, field, publish, ttl]
        key = ("unlock", self.name, self.channel, field, lease, publish, ttl)  # kept.py
        return self.kept.spliced(
            key, scripts.LOCK_UNLOCK, [self.name, self.channel, unlock_key], args, 2
        )

    def force_unlock_command(self) -> ScriptCall:
        """The force-unlock script call; its reply: 1 when a lock was deleted."""
        return ScriptCall(
            scripts.LOCK_FORCE_UNLOCK,
            [self.name, self.channel],
            [UNLOCK_MESSAGE, self.publish],
        )

    async def wait_for(
        self, attempt: Attempt, field: str, wait: float, plain: tuple[int | None, float | None]
    ) -> bool:
        """Acquire with ``attempt`` within ``wait`` seconds, woken by pub/sub (SpinLock polls),
        as the lock's wake-up part plans it (``wakeup.wait_plan``: with :attr:`one_wake`,
        through the herald of the RLock's one wake-up per release). ``plain``: a plain first
        attempt's reply and its send time, or ``None``s."""
        give_up = self.give_up(field, wait)
        channel = self.wait_channel(field)
        plan = wait_plan(self, self.one_wake, channel, wait, give_up=give_up, plain=plain)
        return await acquire_loop(self._ex, attempt, plan)

    # -- acquire ------------------------------------------------------------------------------

    async def attempt(
        self, field: str, lease: int, watchdog: bool, wait: float, grant: GrantWait | None = None
    ) -> int | None:
        """One run of the acquire script: ``None`` when acquired, else how long to wait (ms).

        A ``NOPERM`` on syncprims' own keys (nothing ran) falls back to Redisson's script
        (``clientstate.py``). With replicas to wait for (``lock_synced_replicas``), ``WAIT``
        goes in the same write as the script (one round trip, as Redisson's batch;
        ``replica_sync.py``). With ``grant`` (a wait that may be granted the lock,
        ``grant.py``), the attempt keeps the wait registered and may claim a grant."""
        ex = self._ex
        tried = self.uses_own_keys()  # for the NOPERM fall-back (docstring)
        member = fresh = ""
        floor = 0.0
        single = wait  # the wait the call says (0: a single attempt)
        parts = self.grant
        if grant is not None:
            # registered only while the grant channel is confirmed: a grant to a member
            # whose channel is not subscribed yet would find no subscriber and skip it
            if not tried or parts is None:
                grant = None  # fell back to Redisson's scripts (ACL)
            elif not grant.members and not ex.subscribed(parts.channel_rule()[0], self.name):
                grant = None  # nothing registered yet, nor now: a single attempt
                single = 0.0
        if grant is None or parts is None:
            call = self.acquire_command(field, lease, single)
        else:
            call, member, fresh, floor = parts.register(grant, field, lease, wait)
        required = self.replicas.known_required()  # no coroutine unless a look is due
        if required is None:
            required = await self.replicas.required()
        sent = ex.monotonic()  # the lease starts no earlier than this, in Redis
        context = self.context("acquiring")
        orphan = AttemptUndo(self, field, single)  # the wait the call said (a single: none)
        acknowledged: Any = None
        aof = ex.config.lock_synced_aof
        try:
            if required or aof is not None:
                reply, acknowledged = await self.replicas.run(call, required, context, orphan)
            else:
                try:  # the first attempt here: no closure and no retry coroutine unless it fails
                    reply = await ex.eval(call, context=context, on_orphan=orphan)
                except TransportError as error:
                    if error.maybe_executed:
                        raise
                    reply = await retry_eval(ex, call, context, orphan, error)
        except TransportError as error:
            if error.maybe_executed:
                self.releases.taint(field)
            raise
        except ServerReplyError as error:  # Redis answered (an error reply): nothing comes later
            if self.refuses_own_keys(error, tried=tried):  # NOPERM: Redisson's scripts now
                return await self.attempt(field, lease, watchdog, wait)
            raise
        except SyncPrimsError:
            raise
        except BaseException:  # cancelled in flight
            self.releases.taint(field)
            raise
        if grant is not None and parts is not None:
            if isinstance(reply, list):  # waits, registered (see the script)
                return parts.settle(grant, reply, member, fresh, sent)
            if reply == GRANTED:
                parts.claimed(grant)
                sent = floor  # the grant came after the last attempt that found none
        ttl = self.reply_ttl(reply)
        if ttl is not None:
            return ttl
        if past_lease(ex, lease, sent) and await self.releases.give_back_late(field, lease, sent):
            if grant is not None and parts is not None:  # its wait goes on: a new grant
                parts.late(grant)
            return 0  # past its lease: given back
        if required or aof is not None:
            await self.replicas.check(field, lease, required, acknowledged)
        self.acquired(field, lease, watchdog, reply, since=sent)
        return None

    def reply_ttl(self, reply: Any) -> int | None:
        """Decode an acquire reply: ``None`` when acquired (or a grant claimed), else how long
        to wait (ms)."""
        if reply is None or reply == GRANTED:
            return None
        if isinstance(reply, list):  # a grant wait's {ms, fresh}
            return int(reply[0])
        return int(reply)

    def acquired(self, field: str, lease: int, watchdog: bool, reply: Any, since: float) -> None:
        """Book-keeping after a successful acquire: lease memory and watchdog registration
        (``syncprims._core.lock.holds``).

        ``since`` (monotonic seconds) is when the acquiring call was first sent: Redis set the
        lease no earlier, so a lease counted from it ends no later here than in Redis.
        """
        self.holds.acquired(field, lease, watchdog, since)

    async def try_lock(
        self, owner: int, wait_time: object, lease_time: object, max_hold: object = None
    ) -> bool:
        """Acquire within ``wait_time`` seconds (``None``/0: one attempt; ``math.inf``: forever).

        Raises:
            TypeError, ValueError: bad durations (nothing is sent).
            TransportError: Redis failed; an acquire that may have run is not retried.
        """
        wait = wait_seconds(wait_time)
        lease, watchdog = self.lease_of(lease_time)
        cap = None if max_hold is None else max_hold_seconds(lease_time, max_hold)
        ex = self._ex
        ex.refuse_if_closing(self.context("acquiring"))
        self.releases.fresh_field(owner)
        field = self.field(owner)
        if cap is not None:  # the watchdog renews it up to max_hold after the grant
            lease = min(lease, max(1, round(cap * 1000)))
        self.holds.cap(field, cap)
        probe = _observe.acquire_probe(self.kind, self.name, wait)
        one_wake = self.one_wake if wait > 0 and not self.client_state.own_keys_refused else None
        first: int | None = None  # the reply of a plain first attempt (see below)
        started: float | None = None  # and when it was sent: the wait counts from then
        if one_wake is not None and not ex.subscribed(self.channel, self.name):
            # No wait of this client on the lock moments ago (its channel would linger):
            # most likely free: a plain attempt before a wait is set up [hot-10]. Taken, the
            # wait loop starts from its reply; its next attempt, once subscribed, registers
            # the wait.
            started = ex.monotonic()
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
                    self.releases.count_hold(owner, 1)
                    probe.finish("acquired")
                    return True
                probe.busy(first)
        attempts = _Attempts(self, field, lease, watchdog, wait=wait, probe=probe)
        return await self._wait(owner, attempts, one_wake, (first, started))

    async def _wait(
        self,
        owner: int,
        attempts: _Attempts,
        one_wake: OneWake | None,
        plain: tuple[int | None, float | None],
    ) -> bool:
        """:meth:`try_lock`'s wait, with its ``attempts`` (a method of its own, and an
        object, not a closure: [hot-3]). ``plain``: the reply of a plain first attempt and
        when it was sent, or ``None``s."""
        ex = self._ex
        parts, probe, wait = self.grant, attempts.probe, attempts.wait
        try:
            grant = (
                None if parts is None else await parts.start(attempts.lease, attempts.field, wait)
            )
        except BaseException:
            probe.finish("error")
            raise
        attempts.grant = grant
        token = None if one_wake is None else one_wake.enter()
        ex.release_started()  # a wait may be granted the lock: shutdown lets it end
        try:
            if grant is not None and parts is not None:
                acquired = await acquire_loop(ex, attempts, parts.plan(grant, wait, plain))
            else:  # after a plain attempt (``started``): the one-wake RLock's loop from it
                acquired = await self.wait_for(attempts, attempts.field, wait, plain)
        except BaseException:
            probe.finish("error")
            raise
        finally:
            if grant is not None and parts is not None:
                parts.end_wait(grant)
            if one_wake is not None:
                one_wake.leave(token)
            ex.release_ended()
        if acquired:
            self.releases.count_hold(owner, 1)
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

    def single_acquire_command(self, field: str, lease: int) -> ScriptCall:
        """A single attempt that never queues nor registers a wait (a MultiLock's or
        RedLock's: an RLock runs Redisson's plain script, as ``docs/multi-lock.md`` says)."""
        if self.one_wake is not None:
            return ScriptCall(scripts.LOCK_ACQUIRE, [self.name], [lease, field])
        return self.acquire_command(field, lease, 0.0)

    def single_unlock_command(self, field: str, lease: int, unlock_key: str) -> ScriptCall:
        """The release of a :meth:`single_acquire_command`'s hold (Redisson's plain script
        for an RLock)."""
        if self.one_wake is not None:
            return self.plain_unlock_command(field, lease, unlock_key)
        return self.unlock_command(field, lease, unlock_key)

    # -- release ------------------------------------------------------------------------------

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

    async def unlock(self, owner: int) -> None:
        """Release one hold of ``owner``, counted as a release in flight, which a shutdown
        lets finish (``syncprims._core.retry.releasing``, written in place: [hot-1]).

        Raises:
            LockNotHeldError: ``owner`` does not hold the lock (never did, or it expired).
            TransportError: Redis failed (after retries); the lock expires by its lease.
        """
        ex = self._ex
        ex.release_started()
        try:
            field = self.field(owner)
            holds = self.holds
            self.releases.count_hold(owner, -1)
            ex.watchdog.cancel(self.name, field)
            holds.lost.pop(field, None)
            reply = await self.releases.unlock_field(field, holds.lease(field))
            if reply != 0:
                holds.expires.pop(field, None)
            if reply not in (0, 1):
                raise self.not_held(owner, field)
        finally:
            ex.release_ended()

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

    async def ensure_held(self, owner: int) -> None:
        """Check, in Redis, that ``owner`` still holds the lock.

        Raises:
            LockLostError: the hold was lost (the watchdog saw it go, its lease ran out, or
                Redis no longer has it).
            LockNotHeldError: ``owner`` never acquired it (or released it).
        """
        field = self.field(owner)
        holds = self.holds
        reason = holds.field_lost(field)
        if reason is None and await self.is_held_by(owner):
            return
        if field in holds.leases or reason is not None:
            raise LockLostError(
                f"{self.kind} {self.name!r} held by owner {owner} was lost: "
                f"{reason or 'Redis no longer has it'}",
                name=self.name,
                owner=field,
            )
        raise self.not_held(owner, field)

    async def statistics(self, owner: int) -> LockStatistics:
        """A snapshot for ``owner`` (three reads, not atomic together; the waiters are this
        process's)."""
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
        return await lock_info(self, self.KIND.layout)


@attrs.define(eq=False)
class AttemptUndo:
    """An acquire attempt's ``on_orphan``: its late reply, after its caller went away, goes
    to the lock's ``on_abandoned_attempt`` (which releases what it took). An object, not a
    closure: [hot-3], [hot-4]."""

    lock: LockCore
    field: str
    wait: float

    def __call__(self, late: Any) -> Awaitable[None]:
        return self.lock.on_abandoned_attempt(self.field, self.wait, late)


@attrs.define(eq=False)
class _Attempts:
    """One ``try_lock`` wait's attempts (the wait loop's ``attempt``): a grant announced for
    its grant wait is taken without a script; else the lock's attempt, whose TTL the probe
    sees. An object, not a closure: [hot-3]."""

    lock: LockCore
    field: str
    lease: int
    watchdog: bool
    wait: float = attrs.field(kw_only=True)
    probe: _observe.Probe = attrs.field(kw_only=True)
    grant: GrantWait | None = attrs.field(default=None, init=False)  # once it may be granted

    async def __call__(self) -> int | None:
        lock, grant = self.lock, self.grant
        parts = lock.grant
        if grant is not None and parts is not None:
            since = parts.take(grant)
            if since is not None:
                return await parts.granted(self.field, self.lease, self.watchdog, grant, since)
        ttl = await lock.attempt(self.field, self.lease, self.watchdog, self.wait, grant)
        if ttl is not None:
            self.probe.busy(ttl)
        return ttl
