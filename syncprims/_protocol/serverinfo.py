"""What a server's ``INFO`` reply says of its data's life: which process answers
(``run_id``, new at every start), how many keys it evicted, and its eviction policy.

A lock kept in Redis is lost without a word when the server restarts without its data (a
cache without persistence, a crash, a failover to a replica that had not received it) or
evicts the key (any ``maxmemory-policy`` but ``noeviction``; ``volatile-ttl`` evicts lease
keys first). A holder learns of it only by asking the server: the watchdog reads ``INFO``
while the client holds anything and re-checks every hold when the ``run_id`` changed or the
eviction count grew (``syncprims._services.watchdog``). Pure: no I/O.
"""

from __future__ import annotations

import attrs

__all__ = ["ServerLife", "info_fields"]


def info_fields(reply: object) -> dict[str, str]:
    """The ``field:value`` lines of an ``INFO`` reply (bytes, text, or the dict a
    ``decode_responses`` client's parser may make), as text."""
    if isinstance(reply, dict):
        return {str(key): str(value) for key, value in reply.items()}
    if isinstance(reply, (bytes, bytearray, memoryview)):
        text = bytes(reply).decode("utf-8", "replace")
    else:
        text = str(reply)
    fields: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and not line.startswith("#"):
            fields[key.strip()] = value.strip()
    return fields


@attrs.frozen
class ServerLife:
    """One reading of a server: its process and its evictions so far.

    Attributes:
        run_id: the server process's id (``None``: the server does not say, as fakeredis).
        evicted: keys it evicted since it started (``None``: not said).
    """

    run_id: str | None
    evicted: int | None

    @classmethod
    def of(cls, fields: dict[str, str]) -> ServerLife:
        """The reading in an ``INFO`` reply's fields."""
        evicted = fields.get("evicted_keys")
        return cls(
            run_id=fields.get("run_id") or None,
            evicted=int(evicted) if evicted is not None and evicted.isdigit() else None,
        )

    def lost_since(self, before: ServerLife) -> str | None:
        """Why holds taken before ``before`` may be gone now, or ``None``: another process
        answers (a restart, a failover), or it evicted keys since."""
        if self.run_id is not None and before.run_id is not None and self.run_id != before.run_id:
            return "the server restarted or failed over (a new run_id)"
        evicted, earlier = self.evicted, before.evicted
        if evicted is not None and earlier is not None and evicted > earlier:
            return f"the server evicted {evicted - earlier} key(s)"
        return None
