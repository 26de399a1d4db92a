"""How many replicas a master has: what ``lock_synced_replicas="auto"`` waits for.

Redisson waits for the replicas its connection manager knows of; here each server (a
single master, a Sentinel-managed master, a cluster node) remembers the ``connected_slaves``
of its last ``INFO replication``: read when the client connects (a cluster node: on first
use), again when it is older than :data:`RECHECK` seconds (by the acquire that finds it
stale, once: the others keep the old count meanwhile), and at once when a ``WAIT`` reply
disagrees with it (a replica joined or left). An ``INFO`` refused by an ACL counts 0 (a
warning says so once): give such a user ``+info``, or set a number.
"""

from __future__ import annotations

import logging
import math
import re
from typing import Any, Protocol

from syncprims.errors import ServerReplyError, TransportError

__all__ = ["RECHECK", "ReplicaCount", "connected_replicas", "replica_count"]

log = logging.getLogger("syncprims")

RECHECK = 5.0
"""Seconds a replica count is trusted before ``INFO replication`` is read again."""

_CONNECTED = re.compile(rb"^connected_slaves:(\d+)\s*$", re.MULTILINE)


class ReplicaCount:
    """One master's replicas as last seen."""

    __slots__ = ("checked", "count", "refused")

    def __init__(self) -> None:
        self.count = 0
        self.checked = -math.inf  # monotonic seconds of the last look
        self.refused = False  # INFO refused (logged once)


class _Server(Protocol):
    replicas: ReplicaCount

    async def command(self, *args: str | int, context: str) -> Any: ...


def connected_replicas(info: bytes) -> int:
    """``connected_slaves`` of an ``INFO replication`` reply (0 when absent)."""
    match = _CONNECTED.search(info)
    return int(match.group(1)) if match else 0


async def replica_count(server: _Server, now: float, *, recheck: bool = False) -> int:
    """The replicas of ``server``'s master: the remembered count, read again (``INFO
    replication``) when it is older than :data:`RECHECK` or ``recheck`` is set.

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
    known.count = connected_replicas(bytes(info))
    return known.count
