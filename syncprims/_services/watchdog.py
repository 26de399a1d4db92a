"""The watchdog: renews the leases of locks held without an explicit lease time.

docs/design.md, "The watchdog": one timing wheel per client, batched renewals (Redisson
``LockRenewalScheduler``, 3.44+; redisson-spec.md section 3), when a hold is lost, holds lost
with the server's data (``renew=False`` holds, ``INFO`` every :data:`CHECK_INTERVAL`,
``holds_check.lua``) and late renewals (:meth:`Watchdog.may_renew_late`). The loop is the
sync face's services thread, or the asyncio face's own event loop
(:mod:`syncprims._services.loop`).
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from syncprims import _observe
from syncprims._protocol import scripts
from syncprims._protocol.contracts import HoldLostCallback, RenewalKind, ScriptCall, Then
from syncprims._protocol.loss import LossReason
from syncprims._protocol.replication import acknowledged
from syncprims._protocol.serverinfo import ServerLife, info_fields
from syncprims._protocol.timing import LATE_COPY, clock, drift, notice_margin
from syncprims._protocol.wheel import TimerHandle, TimingWheel
from syncprims._services.loop import Scheduler
from syncprims._services.record import CommandRunner

__all__ = ["CHECK_INTERVAL", "ScriptRunner", "Watchdog"]

log = logging.getLogger("syncprims.watchdog")

CHECK_INTERVAL = 1.0
"""Seconds between two readings of a server's ``INFO`` while the client holds anything."""


class ScriptRunner(CommandRunner, Protocol):
    """What the watchdog needs from the transport: a script call and a plain command (routed
    by a key in a cluster) on the services loop."""

    async def eval(self, call: ScriptCall, *, context: str) -> object: ...

    async def eval_then(self, call: ScriptCall, then: Then, *, context: str) -> tuple[Any, Any]: ...


SyncOf = Callable[[str, bool], Awaitable[Then | None]]
"""``sync(route, recheck)``: the ``WAIT``/``WAITAOF`` a renewal of a hold on ``route`` is
written with, or ``None`` (the executor's ``renewal_sync``)."""


class _Renewal:
    __slots__ = (
        "count",
        "dropped",
        "field",
        "final",
        "handle",
        "kind",
        "lease",
        "name",
        "on_lost",
        "registered",
        "renew",
        "renewed",
        "unanswered",
        "until",
        "valid",
    )

    def __init__(
        self,
        name: str,
        field: str,
        now: float,
        kind: RenewalKind,
        lease: float,
        *,
        valid: float | None = None,
    ) -> None:
        self.name = name
        self.field = field
        self.kind = kind
        self.lease = lease  # seconds: the client's, or the hold's own (a leader election's)
        # seconds of ``lease`` counted valid here (:func:`_valid`; the watchdog's is kept)
        self.valid = _valid(lease) if valid is None else valid
        self.renew = True  # False: an explicit lease, kept until ``until``, never renewed
        self.count = 1
        self.dropped = 0.0  # when it was dropped (``_late``'s age)
        self.registered = now
        self.renewed = now  # when the lease was last set (acquire or renewal)
        # max_hold: renewed until then (clock()), and no longer; ``final`` once a
        # lease set (the acquire's, or a last renewal's) ends at ``until``.
        self.until: float | None = None
        self.final = False
        self.on_lost: tuple[HoldLostCallback, ...] = ()  # a tuple: no list per hold
        # Renewal calls collected for this hold whose reply was not read (one that failed
        # stays counted: a copy of it may still run).
        self.unanswered = 0
        self.handle: TimerHandle[_Renewal] | None = None  # its wheel entry (loop only)


def _valid(lease: float) -> float:
    """How long a lease of ``lease`` seconds is counted valid here: less the drift allowance,
    and less the margin that a late timer of a loaded host must not carry a loss notice past
    Redis's expiry."""
    return lease - drift(lease) - notice_margin(lease)


class Watchdog:
    """Lease renewal for one client."""

    def __init__(
        self,
        services: Scheduler,
        runner: ScriptRunner,
        *,
        lease: float,
        batch_size: int,
        retry_delay: float,
        slot_of: Callable[[str], int] | None = None,
        node_of: Callable[[str], object] | None = None,
        sync: SyncOf | None = None,
    ) -> None:
        self._services = services
        self._sync = sync
        self._slot_of = slot_of or (lambda key: 0)
        self._node_of = node_of or (lambda key: None)
        self._runner = runner
        self._lease = lease
        self._valid = _valid(lease)
        self._batch_size = batch_size
        self._retry_delay = retry_delay
        self._tick = min(0.1, lease / 15)  # a fifth of a renewal period
        self._next_check = 0.0
        # Statistics (read without the mutex: approximate).
        self.renewed = 0
        self.round_trips = 0
        self.lost = 0
        self.forget()

    def forget(self) -> None:
        """The state a new watchdog starts with; after ``os.fork()``, in the child: the
        parent's holds are not ours."""
        self._mutex = threading.Lock()
        self._renewals: dict[tuple[str, str], _Renewal] = {}
        self._new: list[_Renewal] = []
        # Dropped holds whose wheel entry the next tick removes: an unlocked hold leaves the
        # wheel then, not a renewal period later (docs/measurements.md, "the collector").
        self._dropped: list[_Renewal] = []
        # Dropped holds with a renewal call unanswered (module docstring): it may still run.
        self._late: dict[tuple[str, str], _Renewal] = {}
        self._ticking = False
        # Loop-only state.
        self._wheel: TimingWheel[_Renewal] = TimingWheel(self._tick, 512, clock())
        self._timer: asyncio.TimerHandle | None = None
        # The servers' last readings (module docstring), by node (None: the one server).
        self.lives: dict[object, ServerLife] = {}
        self._checking = False

    # -- request threads ------------------------------------------------------------------

    def register(
        self,
        name: str,
        field: str,
        on_lost: HoldLostCallback | None = None,
        *,
        kind: RenewalKind,
        since: float | None = None,
        until: float | None = None,
        renew: bool = True,
        lease: float | None = None,
    ) -> None:
        """Keep ``name`` alive while ``field`` holds it; call once per acquire.

        ``since`` (:func:`~syncprims._protocol.timing.clock` seconds) is when the acquiring
        call was sent: the lease is counted from it, so that it never ends later here than
        in Redis. ``until`` (the same clock): renew up to then and no longer (``max_hold``);
        the last renewal sets the lease to end then, and the hold is reported lost
        (``LossReason.MAX_HOLD``) at that moment; a reentrant hold keeps the earliest.
        ``renew=False``: an explicit lease ending at ``until``, never renewed, kept only
        to be checked when its server loses data (module docstring) and forgotten at its
        end; a later watchdog acquire of the hold makes it renewed. ``lease``: the hold's
        own lease, seconds, renewed every third of it (a leader election's); ``None``: the
        client's ``lock_watchdog_timeout``.
        """
        with self._mutex:
            renewal = self._renewals.get((name, field))
            if renewal is None:
                start = clock() if since is None else since
                if lease is None:
                    renewal = _Renewal(name, field, start, kind, self._lease, valid=self._valid)
                else:
                    renewal = _Renewal(name, field, start, kind, lease)
                renewal.until = until
                renewal.renew = renew
                self._renewals[(name, field)] = renewal
                self._new.append(renewal)
            else:
                renewal.count += 1
                if not renew and not renewal.renew:  # the last acquire's lease: its end
                    renewal.until = until
                    self._new.append(renewal)  # armed again
                elif renew and not renewal.renew:  # renewed from now on, from its lease
                    renewal.renew, renewal.until, renewal.final = True, until, False
                    renewal.registered = renewal.renewed = clock() if since is None else since
                    self._new.append(renewal)
                elif (
                    renew and until is not None and (renewal.until is None or until < renewal.until)
                ):
                    renewal.until = until
            if on_lost is not None and on_lost not in renewal.on_lost:
                renewal.on_lost += (on_lost,)  # one loss, one call: not one per hold count
            start = not self._ticking
            self._ticking = True
        if start:
            self._services.call_soon(self._schedule)

    def cancel(self, name: str, field: str) -> None:
        """Undo one :meth:`register` (called at the start of every unlock)."""
        with self._mutex:
            renewal = self._renewals.get((name, field))
            if renewal is not None:
                renewal.count -= 1
                if renewal.count <= 0:
                    self._drop(renewal)

    def cancel_all(self, name: str) -> None:
        """Stop renewing ``name`` for every owner (force unlock, delete)."""
        with self._mutex:
            for key in [k for k in self._renewals if k[0] == name]:
                self._drop(self._renewals[key])

    def renews_late(self) -> bool:
        """Whether any dropped hold's renewal is unanswered (:meth:`may_renew_late` of some
        field): read without the mutex, as a hint; ``False`` on nearly every call."""
        return bool(self._late)

    def may_renew_late(self, name: str, field: str) -> bool:
        """Whether a renewal of ``field``'s dropped hold on ``name`` was sent (or is being
        sent) and not answered: it may still run in Redis (module docstring)."""
        if not self._late:
            return False
        with self._mutex:
            return (name, field) in self._late

    def forget_late(self, name: str, field: str) -> None:
        """The owner's next hold of ``name`` takes a new field: stop remembering ``field``."""
        with self._mutex:
            self._late.pop((name, field), None)

    def _drop(self, renewal: _Renewal) -> None:
        """Stop renewing ``renewal``'s hold (with the mutex held)."""
        key = (renewal.name, renewal.field)
        del self._renewals[key]
        self._dropped.append(renewal)
        if renewal.unanswered:
            now = renewal.dropped = clock()
            late = self._late
            if late and now - next(iter(late.values())).dropped > LATE_COPY:
                # The oldest first (insertion order): a copy of a failed renewal cannot
                # arrive later than LATE_COPY after it was sent; forget those.
                for old in [k for k, r in late.items() if now - r.dropped > LATE_COPY]:
                    del late[old]
            late.pop(key, None)  # kept in the order dropped
            late[key] = renewal

    def lease_end(self, name: str, field: str) -> float | None:
        """Until when (:func:`~syncprims._protocol.timing.clock` seconds) ``field``'s hold on
        ``name`` is known to be valid: the send time of its last confirmed renewal (or
        acquire) plus the lease; ``None`` when it is not being renewed. Less the clock
        drift allowance (:func:`~syncprims._protocol.timing.drift`) and the notice margin
        (:func:`~syncprims._protocol.timing.notice_margin`)."""
        with self._mutex:
            renewal = self._renewals.get((name, field))
            if renewal is None or not renewal.renew:
                return None
            end = renewal.renewed + renewal.valid
            return end if renewal.until is None else min(end, renewal.until)

    def __len__(self) -> int:
        return len(self._renewals)

    # -- services loop ----------------------------------------------------------------------

    def _active(self, renewal: _Renewal) -> bool:
        return self._renewals.get((renewal.name, renewal.field)) is renewal

    def _arm(self, renewal: _Renewal, due: float) -> None:
        """Put ``renewal`` on the wheel, due at ``due`` (``clock()`` seconds)."""
        renewal.handle = self._wheel.add(renewal, due)

    def _schedule(self) -> None:
        if self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(self._tick, self._on_tick)

    def _on_tick(self) -> None:
        self._timer = None
        now = clock()
        with self._mutex:
            fresh, self._new = self._new, []
            fresh = [r for r in fresh if self._active(r)]
            dropped, self._dropped = self._dropped, []
            wheel = self._wheel
            for renewal in dropped:
                if renewal.handle is not None:
                    wheel.cancel(renewal.handle)
                    renewal.handle = None
            if not self._renewals and not fresh and not len(self._wheel):
                self._ticking = False
                return
        for renewal in fresh:
            if renewal.handle is not None:  # armed again (registered again meanwhile)
                wheel.cancel(renewal.handle)
            until = renewal.until
            if not renewal.renew:  # an explicit lease: forgotten at its end
                self._arm(renewal, now if until is None else until)
            elif until is not None and until <= renewal.registered + renewal.lease:
                renewal.final = True  # the acquire's lease already ends at max_hold
                self._arm(renewal, until)
            else:
                self._arm(renewal, renewal.registered + renewal.lease / 3)
        due = self._wheel.advance(now)
        capped: list[_Renewal] = []
        if due:
            # One script call per kind, slot (a cluster script touches one slot only) and
            # lease (a last renewal before max_hold sets a shorter one).
            by_kind: dict[tuple[str, int, int], list[_Renewal]] = {}
            with self._mutex:
                for renewal in due:
                    if not self._active(renewal):
                        continue
                    if not renewal.renew:  # its lease ended: nothing to check any more
                        self._drop(renewal)
                        continue
                    lease = round(renewal.lease * 1000)
                    until = renewal.until
                    if until is not None:
                        if renewal.final or until - now <= 0.001:
                            capped.append(renewal)
                            continue
                        if now + renewal.lease >= until:  # the last renewal: up to max_hold
                            lease = max(1, int((until - now) * 1000))
                            renewal.final = True
                    key = (renewal.kind.name, self._slot_of(renewal.name), lease)
                    by_kind.setdefault(key, []).append(renewal)
                    renewal.unanswered += 1  # before it can be sent: see cancel()
            for (_, _, lease), batch in by_kind.items():
                for start in range(0, len(batch), self._batch_size):
                    self._services.spawn(
                        self._renew(batch[start : start + self._batch_size], lease)
                    )
        for renewal in capped:
            self._lose(renewal, LossReason.MAX_HOLD)
        if now >= self._next_check and not self._checking and self._renewals:
            self._next_check = now + CHECK_INTERVAL
            self._checking = True
            self._services.spawn(self._check_servers())
        self._schedule()

    def observe(self, node: object, reply: object) -> None:
        """An ``INFO`` reply of ``node`` read elsewhere (at connect): the reading a later
        one is compared with, when there is none yet."""
        self.lives.setdefault(node, ServerLife.of(info_fields(reply)))

    async def _check_servers(self) -> None:
        """Read each server that has holds of the client; where it lost data since the last
        reading, check every hold there (module docstring)."""
        try:
            with self._mutex:
                holds = list(self._renewals.values())
            nodes: dict[object, list[_Renewal]] = {}
            for renewal in holds:
                nodes.setdefault(self._node_of(renewal.name), []).append(renewal)
            for node, there in nodes.items():
                try:
                    reply = await self._runner.command(
                        "INFO",
                        context="checking that the server kept its data",
                        route=there[0].name,
                    )
                except Exception as error:  # unreachable: the renewals say what it means
                    log.debug("watchdog: INFO failed: %r", error)
                    continue
                life = ServerLife.of(info_fields(reply))
                before = self.lives.get(node)
                why = None if before is None else life.lost_since(before)
                if why is None or await self._verify(there, why):
                    self.lives[node] = life  # else read again at the next check
        finally:
            self._checking = False

    async def _verify(self, holds: list[_Renewal], why: str) -> bool:
        """Check ``holds`` in Redis (reads only); report each one gone as lost. ``False``
        if a check failed (the next reading tries again)."""
        log.warning("watchdog: %s: checking %d hold(s) there", why, len(holds))
        by_slot: dict[int, list[_Renewal]] = {}
        for renewal in holds:
            by_slot.setdefault(self._slot_of(renewal.name), []).append(renewal)
        done = True
        for group in by_slot.values():
            for start in range(0, len(group), self._batch_size):
                batch = group[start : start + self._batch_size]
                call = ScriptCall(
                    scripts.HOLDS_CHECK, [r.name for r in batch], [r.field for r in batch]
                )
                try:
                    reply = await self._runner.eval(call, context=f"checking {len(batch)} holds")
                except Exception as error:
                    log.debug("watchdog: checking holds failed: %r", error)
                    done = False
                    continue
                results = reply if isinstance(reply, list) else []
                for renewal, held in zip(batch, results, strict=False):
                    if held == 0:
                        self._lose(renewal, LossReason.DATA_LOST, f" ({why})")
        return done

    async def _renew(self, batch: list[_Renewal], lease_ms: int) -> None:
        started = clock()
        kind = batch[0].kind
        keys, args = kind.command(lease_ms, [(r.name, r.field) for r in batch])
        # Should no reply come before the first lease of the batch runs out, report the loss
        # then (at the lease's end here, which is no later than in Redis), not when the call
        # finally fails.
        first_end = min(r.renewed + r.valid for r in batch)
        guard = asyncio.get_running_loop().call_later(
            max(0.0, first_end - started), self._expire_overdue, batch
        )
        call = ScriptCall(kind.script, keys, args)
        context = f"renewing {len(batch)} {kind.name} hold(s)"
        then: Then | None = None
        try:
            self.round_trips += 1
            if self._sync is not None:
                then = await self._sync(batch[0].name, False)
            if then is None:
                reply = await self._runner.eval(call, context=context)
            else:
                reply, acked = await self._runner.eval_then(call, then, context=context)
        except Exception as error:
            self._renew_failed(batch, error)
            return
        finally:
            guard.cancel()
        with self._mutex:
            for renewal in batch:
                renewal.unanswered -= 1
                key = (renewal.name, renewal.field)
                if not renewal.unanswered and self._late.get(key) is renewal:
                    del self._late[key]  # it has run: nothing of it is left to come
        results = reply if isinstance(reply, list) else []
        if then is not None and not await self._synced(then, acked, batch[0].name):
            # Renewed on a master whose replicas did not take it (a master cut off from
            # them, as before a failover that would lose it): failed, so that the holder is
            # told when its lease runs out unless a later renewal is synced.
            for renewal, result in zip(batch, results, strict=False):
                if result != 1:
                    self._lose(renewal, LossReason.NOT_HELD)
            sent = " ".join(map(str, then.command))
            self._renew_failed(
                [r for r, result in zip(batch, results, strict=False) if result == 1],
                RuntimeError(f"the replicas did not acknowledge it ({sent}: {acked!r})"),
            )
            return
        renewed = 0
        for renewal, result in zip(batch, results, strict=False):
            if result == 1:
                renewal.renewed = started
                renewed += 1
                if not self._active(renewal):
                    continue  # unlocked while the call was out: not back on the wheel
                if renewal.final and renewal.until is not None:
                    self._arm(renewal, renewal.until)  # then: reported, not renewed
                else:
                    self._arm(renewal, started + renewal.lease / 3)
            else:
                self._lose(renewal, LossReason.NOT_HELD)
        self.renewed += renewed
        _observe.renewed(kind.name, renewed, clock() - started)

    async def _synced(self, then: Then, acked: object, route: str) -> bool:
        """Whether a renewal's ``WAIT``/``WAITAOF`` reply says enough replicas have it (with
        ``lock_synced_replicas="auto"``, a count different from the one waited for is read
        again first, as an acquisition's is)."""
        if isinstance(acked, Exception):
            return False
        if acknowledged(then, acked):
            return True
        assert self._sync is not None
        again = await self._sync(route, True)
        return again is None or acknowledged(again, acked)

    def _renew_failed(self, batch: list[_Renewal], error: Exception) -> None:
        now = clock()
        # WARNING for the first failure of a batch whose leases were fresh; then DEBUG.
        fresh = any(now - r.renewed < r.lease / 2 for r in batch)
        log.log(
            logging.WARNING if fresh else logging.DEBUG,
            "watchdog: renewing %d lock(s) failed: %s",
            len(batch),
            error,
        )
        for renewal in batch:
            renewal.final = False  # a failed last renewal before max_hold: try it again
            left = renewal.renewed + renewal.valid - now
            if left <= 0:
                self._lose(renewal, LossReason.RENEWAL_FAILED, f" ({error})")
            elif self._active(renewal):  # not unlocked while the call was out
                self._arm(renewal, now + min(self._retry_delay, left / 2))

    def _expire_overdue(self, batch: list[_Renewal]) -> None:
        now = clock()
        for renewal in batch:
            if now >= renewal.renewed + renewal.valid:
                self._lose(renewal, LossReason.RENEWAL_FAILED, " (no reply from Redis)")

    def _lose(self, renewal: _Renewal, reason: LossReason, detail: str = "") -> None:
        with self._mutex:
            if not self._active(renewal):
                return  # unlocked meanwhile: nothing was lost
            self._drop(renewal)
        self.lost += 1
        log.warning(
            "lock %r held by %s was lost: %s%s", renewal.name, renewal.field, reason, detail
        )
        for callback in renewal.on_lost:
            try:
                callback(renewal.name, renewal.field, reason)
            except Exception:
                log.exception("lock-lost callback for %r failed", renewal.name)

    def aclose(self) -> None:
        """Stop renewing (on the loop). Locks still held expire after their lease."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        with self._mutex:
            self._renewals.clear()
            self._new = []
            self._dropped = []
            self._late.clear()
            self._ticking = False
