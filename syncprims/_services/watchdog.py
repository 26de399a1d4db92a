"""The watchdog: renews the leases of locks held without an explicit lease time.

One timing wheel per client (not a thread or a task per lock). A lock acquired with the
watchdog is due for renewal a third of ``lock_watchdog_timeout`` after it was acquired, and
every third after that. Each tick collects the due locks and renews them with one script
call per batch of at most ``watchdog_batch_size`` names (Redisson ``LockRenewalScheduler``,
3.44+; redisson-spec.md section 3), so 10,000 held locks cost 100 round trips per period.

Request threads only touch a dict under a mutex (:meth:`Watchdog.register` and
:meth:`Watchdog.cancel` never block and never wake the services loop, except to start
ticking after an idle period). Renewals run as separate tasks, so a stalled one does not
delay the others. The loop is the sync face's services thread, or the asyncio face's own
event loop (:mod:`syncprims._services.loop`).

When a renewal finds the owner's field gone (the lock expired, was force-unlocked or
deleted), the lock is lost: renewal stops, a WARNING is logged, and the next ``unlock()``
raises ``LockNotHeldError``. A renewal that fails (connection error, timeout) is retried soon;
if the lease runs out before one succeeds, the lock is reported lost too, at the moment the
lease ends here. Leases are counted from when the acquiring or renewing call was *sent*, so
the holder is told no later than Redis lets the key expire (a hung call does not delay it).

A renewal already collected for a batch when its hold is unlocked may still run in Redis after
the unlock's reply (Redisson #7272's family: the watchdog outliving ``unlock()``). It renews
only while the owner's field is in the hash, so it cannot touch a deleted key or another
owner's hold; but the *same* owner's next hold would have the same field, and the late
``PEXPIRE`` would set that hold's TTL to the watchdog timeout (cutting short an explicit
lease). So a hold dropped (:meth:`Watchdog.cancel`, :meth:`Watchdog.cancel_all`, a loss)
while a renewal call for it is unanswered is remembered until that call's reply
(:meth:`Watchdog.may_renew_late`), and the lock then gives the owner's next hold a new field
(``Releases.fresh_field``), which the late renewal does not name.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable
from typing import Protocol

from syncprims import _observe
from syncprims._protocol.contracts import HoldLostCallback, RenewalKind, ScriptCall
from syncprims._protocol.loss import LossReason
from syncprims._protocol.timing import drift
from syncprims._protocol.wheel import TimerHandle, TimingWheel
from syncprims._services.loop import Scheduler

__all__ = ["ScriptRunner", "Watchdog"]

log = logging.getLogger("syncprims.watchdog")


class ScriptRunner(Protocol):
    """What the watchdog needs from the transport: one script call on the services loop."""

    async def eval(self, call: ScriptCall, *, context: str) -> object: ...


class _Renewal:
    __slots__ = (
        "count",
        "field",
        "final",
        "handle",
        "kind",
        "name",
        "on_lost",
        "registered",
        "renewed",
        "unanswered",
        "until",
    )

    def __init__(self, name: str, field: str, now: float, kind: RenewalKind) -> None:
        self.name = name
        self.field = field
        self.kind = kind
        self.count = 1
        self.registered = now
        self.renewed = now  # when the lease was last set (acquire or renewal)
        # max_hold: renewed until then (time.monotonic()), and no longer; ``final`` once a
        # lease set (the acquire's, or a last renewal's) ends at ``until``.
        self.until: float | None = None
        self.final = False
        self.on_lost: tuple[HoldLostCallback, ...] = ()  # a tuple: no list per hold
        # Renewal calls collected for this hold whose reply was not read (one that failed
        # stays counted: a copy of it may still run).
        self.unanswered = 0
        self.handle: TimerHandle[_Renewal] | None = None  # its wheel entry (loop only)


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
    ) -> None:
        self._services = services
        self._slot_of = slot_of or (lambda key: 0)
        self._runner = runner
        self._lease = lease
        self._period = lease / 3
        self._valid = lease - drift(lease)  # how long a lease is counted valid here
        self._batch_size = batch_size
        self._retry_delay = retry_delay
        self._tick = min(0.1, self._period / 5)
        self._mutex = threading.Lock()
        self._renewals: dict[tuple[str, str], _Renewal] = {}
        self._new: list[_Renewal] = []
        # Dropped holds whose wheel entry the next tick removes: an unlocked hold leaves the
        # wheel then, not a renewal period later (under thousands of tasks, dead entries
        # kept that long were most of the objects the collector walked: docs/design.md).
        self._dropped: list[_Renewal] = []
        # Dropped holds with a renewal call unanswered (module docstring): it may still run.
        self._late: dict[tuple[str, str], _Renewal] = {}
        self._ticking = False
        # Loop-only state.
        self._wheel: TimingWheel[_Renewal] = TimingWheel(self._tick, 512, time.monotonic())
        self._timer: asyncio.TimerHandle | None = None
        # Statistics (read without the mutex: approximate).
        self.renewed = 0
        self.round_trips = 0
        self.lost = 0

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
    ) -> None:
        """Keep ``name`` alive while ``field`` holds it; call once per watchdog acquire.

        ``since`` (``time.monotonic()`` seconds) is when the acquiring call was sent: the
        lease is counted from it, so that it never ends later here than in Redis. ``until``
        (``max_hold``, ``time.monotonic()`` seconds): renew up to then and no longer; the
        last renewal sets the lease to end then, and the hold is reported lost
        (``LossReason.MAX_HOLD``) at that moment. A reentrant hold keeps the earliest.
        """
        with self._mutex:
            renewal = self._renewals.get((name, field))
            if renewal is None:
                renewal = _Renewal(name, field, time.monotonic() if since is None else since, kind)
                renewal.until = until
                self._renewals[(name, field)] = renewal
                self._new.append(renewal)
            else:
                renewal.count += 1
                if until is not None and (renewal.until is None or until < renewal.until):
                    renewal.until = until
            if on_lost is not None:
                renewal.on_lost += (on_lost,)
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
            self._late[key] = renewal

    def lease_end(self, name: str, field: str) -> float | None:
        """Until when (``time.monotonic()`` seconds) ``field``'s hold on ``name`` is known to
        be valid: the send time of its last confirmed renewal (or acquire) plus the lease;
        ``None`` when it is not being renewed. Less the clock drift allowance
        (:func:`~syncprims._protocol.timing.drift`)."""
        with self._mutex:
            renewal = self._renewals.get((name, field))
            if renewal is None:
                return None
            end = renewal.renewed + self._valid
            return end if renewal.until is None else min(end, renewal.until)

    def __len__(self) -> int:
        return len(self._renewals)

    def forget(self) -> None:
        """After ``os.fork()``, in the child: the parent's holds are not ours."""
        self._mutex = threading.Lock()
        self._renewals = {}
        self._new = []
        self._dropped = []
        self._late = {}
        self._ticking = False
        self._wheel = TimingWheel(self._tick, 512, time.monotonic())
        self._timer = None

    # -- services loop ----------------------------------------------------------------------

    def _active(self, renewal: _Renewal) -> bool:
        return self._renewals.get((renewal.name, renewal.field)) is renewal

    def _arm(self, renewal: _Renewal, due: float) -> None:
        """Put ``renewal`` on the wheel, due at ``due`` (``time.monotonic()`` seconds)."""
        renewal.handle = self._wheel.add(renewal, due)

    def _schedule(self) -> None:
        if self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(self._tick, self._on_tick)

    def _on_tick(self) -> None:
        self._timer = None
        now = time.monotonic()
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
        lease_ms = round(self._lease * 1000)
        for renewal in fresh:
            until = renewal.until
            if until is not None and until <= renewal.registered + self._lease:
                renewal.final = True  # the acquire's lease already ends at max_hold
                self._arm(renewal, until)
            else:
                self._arm(renewal, renewal.registered + self._period)
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
                    lease = lease_ms
                    until = renewal.until
                    if until is not None:
                        if renewal.final or until - now <= 0.001:
                            capped.append(renewal)
                            continue
                        if now + self._lease >= until:  # the last renewal: up to max_hold
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
        self._schedule()

    async def _renew(self, batch: list[_Renewal], lease_ms: int) -> None:
        started = time.monotonic()
        kind = batch[0].kind
        keys, args = kind.command(lease_ms, [(r.name, r.field) for r in batch])
        # Should no reply come before the first lease of the batch runs out, report the loss
        # then (at the lease's end here, which is no later than in Redis), not when the call
        # finally fails.
        first_end = min(r.renewed for r in batch) + self._valid
        guard = asyncio.get_running_loop().call_later(
            max(0.0, first_end - started), self._expire_overdue, batch
        )
        try:
            self.round_trips += 1
            reply = await self._runner.eval(
                ScriptCall(kind.script, keys, args),
                context=f"renewing {len(batch)} {kind.name} hold(s)",
            )
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
                    self._arm(renewal, started + self._period)
            else:
                self._lose(renewal, LossReason.NOT_HELD)
        self.renewed += renewed
        _observe.renewed(kind.name, renewed, time.monotonic() - started)

    def _renew_failed(self, batch: list[_Renewal], error: Exception) -> None:
        now = time.monotonic()
        # WARNING for the first failure of a batch whose leases were fresh; then DEBUG.
        fresh = any(now - r.renewed < self._period * 1.5 for r in batch)
        log.log(
            logging.WARNING if fresh else logging.DEBUG,
            "watchdog: renewing %d lock(s) failed: %s",
            len(batch),
            error,
        )
        for renewal in batch:
            renewal.final = False  # a failed last renewal before max_hold: try it again
            left = renewal.renewed + self._valid - now
            if left <= 0:
                self._lose(renewal, LossReason.RENEWAL_FAILED, f" ({error})")
            elif self._active(renewal):  # not unlocked while the call was out
                self._arm(renewal, now + min(self._retry_delay, left / 2))

    def _expire_overdue(self, batch: list[_Renewal]) -> None:
        now = time.monotonic()
        for renewal in batch:
            if now >= renewal.renewed + self._valid:
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
