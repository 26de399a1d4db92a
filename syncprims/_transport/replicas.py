"""How many replicas a master has: what ``lock_synced_replicas="auto"`` waits for.

Redisson waits for the replicas its connection manager knows of; here each server (a single
master, a Sentinel-managed master, a cluster node) remembers how many replicas in sync
(``state=online``) its last ``INFO replication`` listed: read when the client connects (a
cluster node: on first use), again when it is older than :data:`RECHECK` seconds (by the
acquire that finds it stale, once: the others keep the old count meanwhile), and at once
when a ``WAIT`` reply disagrees with it. A higher count is taken at once (a replica joined);
a lower one only after :data:`HOLD_DOWN` seconds of lower readings. Taking it at once is
unsafe: after a failover the demoted master, still reached by connections of the pool that
had not moved yet, reports no replica, the client stops waiting, and that master grants
locks the promoted one never sees. Nor can the count follow the master's replication id (a
promoted replica has a new one): in that split brain one pool's connections reach both
masters, so the looks alternate between them. Until a missing replica is back in sync (or
the hold down has passed), acquisitions fail with ``ReplicaSyncError``, as with a fixed
number. An ``INFO`` refused by an ACL counts 0 (a warning says so once): give such a user
``+info``, or set a number.
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
    "remembered_count",
    "replica_count",
]

log = logging.getLogger("syncprims")

RECHECK = 5.0
"""Seconds a replica count is trusted before ``INFO replication`` is read again."""

HOLD_DOWN = 60.0
"""Seconds of lower readings before a replica count falls (Redis's own ``repl-timeout``)."""

_ONLINE = re.compile(rb"^slave\d+:.*\bstate=online\b", re.MULTILINE)


class ReplicaCount:
    """One master's replicas as last seen."""

    __slots__ = ("checked", "count", "fewer_since", "refused")

    def __init__(self) -> None:
        self.count = 0
        self.checked = -math.inf  # monotonic seconds of the last look
        self.fewer_since: float | None = None  # since when the looks found fewer
        self.refused = False  # INFO refused (logged once)

    def seen(self, count: int, now: float) -> None:
        """A look found ``count`` replicas: more count at once, fewer after the hold down."""
        if count >= self.count:
            self.count, self.fewer_since = count, None
            return
        if self.fewer_since is None:
            self.fewer_since = now
        if now - self.fewer_since >= HOLD_DOWN:
            self.count, self.fewer_since = count, None


class _Server(Protocol):
    replicas: ReplicaCount

    async def command(self, *args: str | int, context: str) -> Any: ...


def connected_replicas(info: bytes | str) -> int:
    """The replicas of an ``INFO replication`` reply that are in sync (``state=online``; one
    still loading its first copy cannot acknowledge a ``WAIT`` yet). The reply is text where
    the parser decodes every reply (redis-py 5.0 with hiredis and ``decode_responses=True``)."""
    return len(_ONLINE.findall(info.encode() if isinstance(info, str) else bytes(info)))


def remembered_count(server: _Server, now: float) -> int | None:
    """The replicas of ``server``'s master as remembered, while younger than :data:`RECHECK`;
    ``None`` when a look is due (no I/O: the hot path asks this first)."""
    known = server.replicas
    return known.count if now - known.checked < RECHECK else None


async def replica_count(server: _Server, now: float, *, recheck: bool = False) -> int:
    """The replicas of ``server``'s master: the remembered count, read again (``INFO
    replication``) when it is older than :data:`RECHECK` or ``recheck`` is set (a lower
    reading counts only after :data:`HOLD_DOWN`).

    A transport failure keeps the old count (the next look is :data:`RECHECK` later).
    """
    if not recheck:
        remembered = remembered_count(server, now)
        if remembered is not None:
            return remembered
    known = server.replicas
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
    known.seen(connected_replicas(info), now)
    return known.count
