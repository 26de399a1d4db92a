"""Observability hooks: DEBUG records and optional metrics, called from a few call sites.

The algorithms call the functions here at the moments worth seeing (an acquire ends, a
waiter starts waiting, a hold is released, the watchdog renews or loses a hold). Each one
writes a DEBUG record (``Logger.debug`` returns at once when DEBUG is off) and hands the
numbers to :data:`metrics`, the module-level recorder: ``None`` until
``syncprims.metrics.enable_opentelemetry()`` installs one, so metrics cost one module
attribute load and an ``is None`` test per event while they are off.

The loggers the package creates, and what each says: docs/observability.md, "Logging".
"""

from __future__ import annotations

import logging
import time
from typing import Protocol

from syncprims._protocol.loss import LossReason
from syncprims._protocol.timing import clock

__all__ = ["AcquireProbe", "Metrics", "Probe", "acquire_probe", "metrics"]

lock_log = logging.getLogger("syncprims.lock")
watchdog_log = logging.getLogger("syncprims.watchdog")


class Metrics(Protocol):
    """What a metrics recorder records (``syncprims.metrics`` installs one)."""

    def acquire(self, kind: str, seconds: float, outcome: str, failed_attempts: int) -> None:
        """An acquire ended (``outcome``: ``acquired``, ``timeout`` or ``error``)."""

    def hold(self, kind: str, seconds: float) -> None:
        """An owner's last hold was released after ``seconds``."""

    def renewals(self, kind: str, count: int) -> None:
        """The watchdog renewed ``count`` holds of ``kind``."""

    def loss(self, kind: str, reason: LossReason) -> None:
        """A hold was lost."""


metrics: Metrics | None = None
"""The recorder in use, or ``None`` (metrics off): read on every event, so set it once."""


class AcquireProbe:
    """Times one acquire and counts its failed attempts."""

    __slots__ = ("failed", "kind", "name", "started", "wait")

    def __init__(self, kind: str, name: str, wait: float) -> None:
        self.kind = kind
        self.name = name
        self.wait = wait
        self.failed = 0
        self.started = time.monotonic()

    def busy(self, ttl: int) -> None:
        """An attempt found the resource taken (``ttl``: the holder's TTL, ms; < 0 unknown)."""
        self.failed += 1
        if self.failed == 1 and self.wait > 0:
            lock_log.debug(
                "%s %r is taken (TTL %s): waiting up to %g s",
                self.kind,
                self.name,
                f"{ttl / 1000:.3f} s" if ttl >= 0 else "unknown",
                self.wait,
            )

    def finish(self, outcome: str) -> None:
        """The acquire ended: ``acquired``, ``timeout`` or ``error``."""
        elapsed = time.monotonic() - self.started
        lock_log.debug(
            "%s %r: %s in %.6f s after %d failed attempt(s)",
            self.kind,
            self.name,
            outcome,
            elapsed,
            self.failed,
        )
        recorder = metrics
        if recorder is not None:
            recorder.acquire(self.kind, elapsed, outcome, self.failed)


class _Unobserved:
    """The probe of an acquire nobody observes (metrics off, DEBUG off): no clock read, no
    record, nothing built per acquire."""

    __slots__ = ()

    def busy(self, ttl: int) -> None:
        pass

    def finish(self, outcome: str) -> None:
        pass


_UNOBSERVED = _Unobserved()

Probe = AcquireProbe | _Unobserved  # what acquire_probe returns


def acquire_probe(kind: str, name: str, wait: float) -> Probe:
    """The probe of one acquire: an :class:`AcquireProbe` while metrics are on or the
    ``syncprims.lock`` logger records DEBUG, else a shared probe that does nothing (an
    uncontended acquire builds no metrics event it does not send). The choice is made when
    the acquire starts; the logging module caches ``isEnabledFor``."""
    if metrics is None and not lock_log.isEnabledFor(logging.DEBUG):
        return _UNOBSERVED
    return AcquireProbe(kind, name, wait)


def released(kind: str, name: str, reply: object, held_since: float | None) -> None:
    """An unlock script answered: 1 released, 0 still held, anything else not held."""
    if reply == 0:
        lock_log.debug("%s %r: one hold released, still held", kind, name)
        return
    if reply != 1 or held_since is None:
        return
    recorder = metrics
    if recorder is None and not lock_log.isEnabledFor(logging.DEBUG):
        return  # nobody observes: no clock read, no record (as acquire_probe)
    held = clock() - held_since
    lock_log.debug("%s %r: released after %.6f s held", kind, name, held)
    if recorder is not None:
        recorder.hold(kind, held)


def renewed(kind: str, count: int, seconds: float) -> None:
    """The watchdog renewed ``count`` holds in one call that took ``seconds``."""
    watchdog_log.debug("renewed %d %s hold(s) in %.6f s", count, kind, seconds)
    recorder = metrics
    if recorder is not None and count:
        recorder.renewals(kind, count)


def lost(kind: str, reason: LossReason) -> None:
    """A hold was lost (the watchdog already logged a WARNING naming it)."""
    recorder = metrics
    if recorder is not None:
        recorder.loss(kind, reason)
