"""The storage side of fencing: refuse a write whose fencing token is lower than the highest
one the storage has seen (Martin Kleppmann, "How to do distributed locking", 2016; the
fencing token of Redisson's ``RFencedLock``).

A [`FencedLock`][syncprims.FencedLock] hands each acquisition a token that grows with every
acquisition. A holder that was paused (a GC pause, a stopped VM) past its lease may wake up
and write after the next holder did; only the storage can refuse that write, by remembering
the highest token it has accepted. This module does it for a value in Redis, atomically
(one Lua script), with the application's own redis-py client (blocking, asyncio, or a
cluster client):

```python
token = lock.lock_and_get_token()
try:
    if not syncprims.fencing.fenced_set(app, "report:42", body, token):
        ...  # a newer holder wrote first: this holder's view is stale
finally:
    lock.unlock()
```

The highest token is kept beside the value, in ``syncprims_fence:{key}`` (the same cluster
slot), with no expiry: [`clear_fence`][syncprims.fencing.clear_fence] deletes it with the
value. Equal tokens are accepted (one holder writing several times). For a SQL database, the
same rule is one conditional ``UPDATE`` (docs/fenced-lock.md, "Fenced writes in SQL").
"""

from __future__ import annotations

import hashlib
from typing import Any

from syncprims._protocol.names import prefix_name
from syncprims._transport.connections import ERRORS

__all__ = ["afenced_set", "aget_fence", "clear_fence", "fence_key", "fenced_set", "get_fence"]

FENCED_SET = """
local last = tonumber(redis.call('GET', KEYS[2]) or '0')
local token = tonumber(ARGV[2])
if token < last then return 0 end
if token > last then redis.call('SET', KEYS[2], ARGV[2]) end
if ARGV[3] == '' then
  redis.call('SET', KEYS[1], ARGV[1])
else
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[3])
end
return 1
"""
"""KEYS: the value, its fence; ARGV: the value, the token, a TTL in ms or ''. 1 written, 0
refused (a higher token was seen)."""

_SHA = hashlib.sha1(FENCED_SET.encode()).hexdigest()


def fence_key(key: str) -> str:
    """Where the highest token accepted for ``key`` is kept (``syncprims_fence:{key}``, or
    ``syncprims_fence:key`` when ``key`` has a hash tag: the same cluster slot)."""
    return prefix_name("syncprims_fence", key)


def _args(key: str, value: object, token: object, px: object) -> tuple[list[str], list[Any]]:
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
    return [key, fence_key(key)], [value, token, ttl]


def fenced_set(
    client: Any, key: str, value: str | bytes | int | float, token: int, *, px: int | None = None
) -> bool:
    """Set ``key`` to ``value`` unless a higher fencing token than ``token`` was accepted for
    it before; remember ``token`` as the highest. One atomic script.

    Args:
        client: a blocking ``redis.Redis`` or ``redis.RedisCluster`` (valkey-py's too).
        key: the value's key.
        value: what to write.
        token: the writer's fencing token (``FencedLock.lock_and_get_token()``), >= 0.
        px: the value's time to live, milliseconds; ``None``: none.

    Returns:
        ``True`` if written; ``False`` if refused (a newer holder wrote first).

    Raises:
        TypeError, ValueError: a bad argument (nothing is sent).
        redis.exceptions.RedisError: from the client, as for any of its commands.
    """
    keys, args = _args(key, value, token, px)
    try:
        return bool(client.evalsha(_SHA, 2, *keys, *args))
    except ERRORS.no_script:  # not loaded yet: EVAL loads it (it did not run)
        return bool(client.eval(FENCED_SET, 2, *keys, *args))


async def afenced_set(
    client: Any, key: str, value: str | bytes | int | float, token: int, *, px: int | None = None
) -> bool:
    """[`fenced_set`][syncprims.fencing.fenced_set] for an asyncio client (``redis.asyncio.Redis``
    or cluster)."""
    keys, args = _args(key, value, token, px)
    try:
        return bool(await client.evalsha(_SHA, 2, *keys, *args))
    except ERRORS.no_script:
        return bool(await client.eval(FENCED_SET, 2, *keys, *args))


def get_fence(client: Any, key: str) -> int:
    """The highest token accepted for ``key`` (0 when none was)."""
    value = client.get(fence_key(key))
    return 0 if value is None else int(value)


async def aget_fence(client: Any, key: str) -> int:
    """[`get_fence`][syncprims.fencing.get_fence] for an asyncio client."""
    value = await client.get(fence_key(key))
    return 0 if value is None else int(value)


def clear_fence(client: Any, key: str) -> int:
    """Delete ``key`` and its fence (blocking client); the number of keys deleted."""
    return int(client.delete(key, fence_key(key)))
