"""Why a held lock was lost. Pure."""

from __future__ import annotations

import enum

__all__ = ["LossReason"]


class LossReason(enum.StrEnum):
    """Why a held lock was lost: the ``reason`` given to an ``on_lost(name, reason)`` callback.

    A ``str`` enum: each member *is* its message, so code that compared or searched the
    reason as a string keeps working (``"lease ran out" in reason``, ``f"{reason}"``), while
    new code can compare members (``reason is LossReason.NOT_HELD``).
    """

    NOT_HELD = "its owner no longer holds it (expired, force-unlocked or deleted)"
    """A renewal found the owner's hold gone from Redis: the lock expired (a pause longer
    than the lease), was force-unlocked or deleted."""

    RENEWAL_FAILED = "it could not be renewed before its lease ran out"
    """Renewals failed (Redis unreachable or not answering) until the lease ran out here."""

    LEASE_EXPIRED = "its lease ran out"
    """A hold taken with an explicit ``lease_time`` outlived it (leases are never renewed)."""

    DATA_LOST = "the server lost it (restarted without its data, failed over, or evicted it)"
    """The server's ``run_id`` changed or it evicted keys, and a check found the owner's
    hold gone (``syncprims._protocol.serverinfo``): reported for watchdog holds and
    explicit leases alike, within about a second of the loss."""

    MAX_HOLD = "it reached its max_hold"
    """A hold taken with ``max_hold`` was renewed by the watchdog until then, and no longer:
    its last renewal set the lease to end at ``max_hold`` after the grant."""
