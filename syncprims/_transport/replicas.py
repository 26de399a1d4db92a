"""How many replicas a master has: what ``lock_synced_replicas="auto"`` waits for.

Redisson waits for the replicas its connection manager knows of; here each server (a single
master, a Sentinel-managed master, a cluster node) remembers how many replicas in sync
(``state=online``) its last ``INFO replication`` listed: read when the client connects (a
cluster node: on first use), again when it is older than :data:`RECHECK` seconds (by the
acquire that finds it stale, once: the others keep the old count meanwhile), and at once
when a ``WAIT`` reply disagrees with it. A higher count is taken at once (a replica joined),
and so is any count of another master (its ``master_replid`` changed: a promoted replica, or
a restart). A lower count of the same master only after :data:`HOLD_DOWN` seconds of lower
readings: taking it at once was unsafe (the chaos campaign found it): after a failover the
demoted master, still taking writes from clients that had not moved yet, reported no
replica, the client stopped waiting, and that master granted locks that the promoted one
never saw. Until a missing replica is back (or the hold down has passed), acquisitions there
fail with ``ReplicaSyncError``, as with a fixed number. An ``INFO`` refused by an ACL counts
0 (a warning says so once): give such a user ``+info``, or set a number.
"""

from __future__ import annotations

import logging
import math
import re
from typing import Any, Protocol

from syncprims.errors import ServerReplyError, TransportError

__all__ = [
    "HOLD_DOWN",
    "RECHECK",
    "ReplicaCount",
    "connected_replicas",
    "replica_count",
    "replication_id",
]

log = logging.getLogger("syncprims")

RECHECK = 5.0
"""Seconds a replica count is trusted before ``INFO replication`` is read again."""

HOLD_DOWN = 60.0
"""Seconds of lower readings before a replica count falls (Redis's own ``repl-timeout``)."""

_ONLINE = re.compile(rb"^slave\d+:.*\bstate=online\b", re.MULTILINE)
_REPLID = re.compile(rb"^master_replid:(\w+)\s*$", re.MULTILINE)


class ReplicaCount:
    """One master's replicas as last seen."""

    __slots__ = ("checked", "count", "fewer_since", "refused", "replid")

    def __init__(self) -> None:
        self.count = 0
        self.checked = -math.inf  # monotonic seconds of the last look
        self.fewer_since: float | None = None  # since when the looks found fewer
        self.refused = False  # INFO refused (logged once)
        self.replid: bytes | None = None  # the master's replication id at the last look

    def seen(self, count: int, now: float, replid: bytes | None = None) -> None:
        """A look found ``count`` replicas of the master with ``replid``: more, or those of
        another master, count at once; fewer of the same master after the hold down."""
        if replid != self.replid:
            self.replid = replid
            self.count, self.fewer_since = count, None
        elif count >= self.count:
            self.count, self.fewer_since = count, None
        elif self.fewer_since is None:
            self.fewer_since = now
        elif now - self.fewer_since >= HOLD_DOWN:
            self.count, self.fewer_since = count, None


class _Server(Protocol):
    replicas: ReplicaCount

    async def command(self, *args: str | int, context: str) -> Any: ...


def connected_replicas(info: bytes) -> int:
    """The replicas of an ``INFO replication`` reply that are in sync (``state=online``; one
    still loading its first copy cannot acknowledge a ``WAIT`` yet)."""
    return len(_ONLINE.findall(info))


def replication_id(info: bytes) -> bytes | None:
    """``master_replid`` of an ``INFO replication`` reply (``None`` when absent)."""
    match = _REPLID.search(info)
    return match.group(1) if match else None


async def replica_count(server: _Server, now: float, *, recheck: bool = False) -> int:
    """The replicas of ``server``'s master: the remembered count, read again (``INFO
    replication``) when it is older than :data:`RECHECK` or ``recheck`` is set (a lower
    reading counts only after :data:`HOLD_DOWN`).

    A transport failure keeps the old count (the next look is :data:`RECHECK` later).
    """
    known = server.replicas
    if not recheck and now - known.checked < RECHECK:
        return known.count
    known.checked = now  # concurrent callers keep the old count meanwhile
    try:
        info = await server.command("INFO", "replication", context="counting the replicas")
    except ServerReplyError as error:
        if "unknown command" in str(error).lower():  # a server without replication (fakeredis)
            known.count = 0
            return 0
        if not known.refused:
            known.refused = True
            log.warning(
                "INFO replication was refused (%s): lock_synced_replicas='auto' counts 0 "
                "replicas; grant +info or set lock_synced_replicas to a number",
                error,
            )
        known.count = 0
        return 0
    except TransportError:
        return known.count
    text = bytes(info)
    known.seen(connected_replicas(text), now, replication_id(text))
    return known.count
