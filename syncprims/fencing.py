"""The storage side of fencing: refuse a write whose fencing token is lower than the highest
one the storage has seen (Martin Kleppmann, "How to do distributed locking", 2016; the
fencing token of Redisson's ``RFencedLock``), for a value in Redis, atomically (one Lua
script), with the application's own redis-py client (blocking, asyncio, or a cluster client).

An equal token is refused unless it comes from the same ``writer=`` (tokens repeat after the
lock's Redis lost its counter). The highest token is kept beside the value, with the writer
that set it and no expiry ([`fence_key`][syncprims.fencing.fence_key]). How to use it, and
why: docs/fenced-lock.md, "Fenced writes in Redis" (and "Fenced writes in SQL" for a
database).
"""

from __future__ import annotations

import hashlib
from typing import Any

from syncprims._protocol.names import prefix_name
from syncprims._transport.compat import ERRORS

__all__ = ["afenced_set", "aget_fence", "clear_fence", "fence_key", "fenced_set", "get_fence"]

FENCED_SET = """
local stored = redis.call('GET', KEYS[2])
local token = tonumber(ARGV[2])
if stored then
  local last, by = string.match(stored, '^(%d+):?(.*)$')
  last = tonumber(last or '0')
  if token < last then return 0 end
  if token == last and (ARGV[4] == '' or ARGV[4] ~= by) then return 0 end
end
if ARGV[4] == '' then
  redis.call('SET', KEYS[2], ARGV[2])
else
  redis.call('SET', KEYS[2], ARGV[2] .. ':' .. ARGV[4])
end
if ARGV[3] == '' then
  redis.call('SET', KEYS[1], ARGV[1])
else
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[3])
end
return 1
"""
"""KEYS: the value, its fence; ARGV: the value, the token, a TTL in ms or '', the writer or
''. 1 written, 0 refused (a higher token was accepted, or the same one from another writer
or from no named writer)."""

_SHA = hashlib.sha1(FENCED_SET.encode()).hexdigest()


def fence_key(key: str) -> str:
    """Where the highest token accepted for ``key`` is kept (``syncprims_fence:{key}``, or
    ``syncprims_fence:key`` when ``key`` has a hash tag: the same cluster slot)."""
    return prefix_name("syncprims_fence", key)


def _args(
    key: str, value: object, token: object, px: object, writer: object
) -> tuple[list[str], list[Any]]:
    if not isinstance(key, str) or not key:
        raise TypeError("key must be a non-empty str")
    if isinstance(token, bool) or not isinstance(token, int):
        raise TypeError(f"token must be an int (a FencedLock's), not {type(token).__name__}")
    if token < 0:
        raise ValueError(f"token must not be negative, got {token}")
    if not isinstance(value, (str, bytes, int, float)) or isinstance(value, bool):
        raise TypeError(f"value must be str, bytes, int or float, not {type(value).__name__}")
    ttl = ""
    if px is not None:
        if isinstance(px, bool) or not isinstance(px, int) or px <= 0:
            raise ValueError(f"px must be a positive int (milliseconds), got {px!r}")
        ttl = str(px)
    if writer is None:
        writer = ""
    elif not isinstance(writer, str) or not writer:
        raise TypeError(f"writer must be a non-empty str or None, not {writer!r}")
    return [key, fence_key(key)], [value, token, ttl, writer]


def fenced_set(
    client: Any,
    key: str,
    value: str | bytes | int | float,
    token: int,
    *,
    writer: str | None = None,
    px: int | None = None,
) -> bool:
    """Set ``key`` to ``value`` unless a higher fencing token than ``token`` was accepted for
    it before, or the same token from another writer; remember ``token`` (and ``writer``) as
    the highest. One atomic script.

    Args:
        client: a blocking ``redis.Redis`` or ``redis.RedisCluster`` (valkey-py's too).
        key: the value's key.
        value: what to write.
        token: the writer's fencing token (``FencedLock.lock_and_get_token()``), >= 0.
        writer: an id of the hold that writes (e.g. ``uuid.uuid4().hex``, made after the
            acquisition): a write with the token accepted last is accepted again only from
            the same writer. ``None``: only a token higher than every accepted one is
            written.
        px: the value's time to live, milliseconds; ``None``: none.

    Returns:
        ``True`` if written; ``False`` if refused (a newer holder wrote first, or the token
        was accepted already from another writer).

    Raises:
        TypeError, ValueError: a bad argument (nothing is sent).
        redis.exceptions.RedisError: from the client, as for any of its commands.
    """
    keys, args = _args(key, value, token, px, writer)
    try:
        return bool(client.evalsha(_SHA, 2, *keys, *args))
    except ERRORS.no_script:  # not loaded yet: EVAL loads it (it did not run)
        return bool(client.eval(FENCED_SET, 2, *keys, *args))


async def afenced_set(
    client: Any,
    key: str,
    value: str | bytes | int | float,
    token: int,
    *,
    writer: str | None = None,
    px: int | None = None,
) -> bool:
    """[`fenced_set`][syncprims.fencing.fenced_set] for an asyncio client (``redis.asyncio.Redis``
    or cluster)."""
    keys, args = _args(key, value, token, px, writer)
    try:
        return bool(await client.evalsha(_SHA, 2, *keys, *args))
    except ERRORS.no_script:
        return bool(await client.eval(FENCED_SET, 2, *keys, *args))


def _token(value: object) -> int:
    if value is None:
        return 0
    text = value.decode() if isinstance(value, bytes) else str(value)
    return int(text.split(":", 1)[0])


def get_fence(client: Any, key: str) -> int:
    """The highest token accepted for ``key`` (0 when none was)."""
    return _token(client.get(fence_key(key)))


async def aget_fence(client: Any, key: str) -> int:
    """[`get_fence`][syncprims.fencing.get_fence] for an asyncio client."""
    return _token(await client.get(fence_key(key)))


def clear_fence(client: Any, key: str) -> int:
    """Delete ``key`` and its fence (blocking client); the number of keys deleted."""
    return int(client.delete(key, fence_key(key)))
