"""Redis keyspace notifications, as object listeners use them: channel names, the
``notify-keyspace-events`` flags they need, and the events they react to. Pure.

Redis publishes an event on ``__keyspace@<db>__:<key>`` (flag ``K``) for each command that
touches the key, where the event's class is enabled: ``g`` (generic commands: ``del`` for
``DEL`` and ``UNLINK``) and ``x`` (``expired``, when Redis removes a key whose time to live
ran out). See https://redis.io/docs/latest/develop/use/keyspace-notifications/.
"""

from __future__ import annotations

__all__ = [
    "DELETED",
    "EXPIRED",
    "NEEDED_FLAGS",
    "config_value",
    "is_keyspace_channel",
    "keyspace_channel",
    "missing_flags",
]

NEEDED_FLAGS = "Kgx"
"""``K``: keyspace channels; ``g``: generic events (``del``); ``x``: ``expired``."""
ALL_CLASSES = "g$lshzxetd"
"""What the alias ``A`` stands for (``m`` and ``n`` are never in it)."""
DELETED = b"del"
"""The event of ``DEL`` and ``UNLINK`` on the key."""
EXPIRED = b"expired"
"""The event of the key's removal by its time to live."""
PREFIX = "__keyspace@"


def keyspace_channel(database: int, name: str) -> str:
    """``__keyspace@<database>__:<name>``: where Redis publishes the events of key ``name``."""
    return f"{PREFIX}{database}__:{name}"


def is_keyspace_channel(channel: str) -> bool:
    """Whether ``channel`` is a keyspace notification channel (never sharded pub/sub)."""
    return channel.startswith(PREFIX)


def missing_flags(current: str) -> str:
    """The flags of :data:`NEEDED_FLAGS` that ``current`` (a ``notify-keyspace-events``
    value) lacks, in that order; ``""`` when it has them all (``A`` counts as its classes)."""
    have = set(current)
    if "A" in have:
        have.update(ALL_CLASSES)
    return "".join(flag for flag in NEEDED_FLAGS if flag not in have)


def config_value(reply: object) -> str:
    """The value in a ``CONFIG GET <parameter>`` reply: ``[name, value]`` (RESP2) or
    ``{name: value}`` (RESP3), as bytes or text; ``""`` when the reply has none.

    Raises:
        TypeError: the reply has another shape.
    """
    if isinstance(reply, dict):
        values = list(reply.values())
    elif isinstance(reply, (list, tuple)):
        values = list(reply[1::2])
    else:
        raise TypeError(f"unexpected CONFIG GET reply: {reply!r}")
    if not values:
        return ""
    value = values[0]
    return value.decode() if isinstance(value, bytes) else str(value)
