"""Replica sync of a write (``Config.lock_synced_replicas``, ``lock_synced_aof``): the
``WAIT`` or ``WAITAOF`` written right behind an acquire or a renewal, and how its reply is
judged. Pure: no I/O."""

from __future__ import annotations

from typing import Any

from syncprims._protocol.contracts import Then

__all__ = ["acknowledged", "sync_then"]


def sync_then(required: int, aof: tuple[int, int] | None, timeout: float) -> Then | None:
    """The ``WAIT required`` (or ``WAITAOF numlocal max(numreplicas, required)``) to write
    behind a write, blocking at most ``timeout`` seconds in Redis; ``None`` when nothing is
    to be waited for (no replica required and no ``WAITAOF``)."""
    ms = round(timeout * 1000)
    if aof is not None:
        return Then(("WAITAOF", aof[0], max(aof[1], required), ms), timeout)
    if required <= 0:
        return None
    return Then(("WAIT", required, ms), timeout)


def acknowledged(then: Then, reply: Any) -> bool:
    """Whether the reply of ``then`` says enough replicas (and, for ``WAITAOF``, the local
    append-only file) have the write."""
    command = then.command
    if command[0] == "WAITAOF":
        return int(reply[0]) >= int(command[1]) and int(reply[1]) >= int(command[2])
    return int(reply) >= int(command[1])
