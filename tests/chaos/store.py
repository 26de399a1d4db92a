"""The store: a separate Redis that critical sections write, as a protected resource would.

The nemesis never touches it. Each resource has a counter that a section reads, then (after
its hold) sets to the value read + 1 with one script that also appends to the resource's
log, in store order: ``commit <sid> <read> <found> <token> <accepted>``. A found value other
than the one read is a lost update: someone else committed inside this section. For a
fenced lock the script is the fence: it refuses a token not above the highest it accepted
(``accepted`` 0). The fenced kind commits through the library's own fence instead
(:meth:`Store.fenced_commit`, given ``syncprims.fencing.fenced_set`` by the worker), in one
``MULTI`` with the log line ``fcommit <sid> <read> <token>``; its outcome is in the worker's
history. Readers of a ReadWriteLock read the counter at the start and end of their
section and log ``read_changed`` when a writer committed in between.

Plain redis-py only: the store must not depend on the library under test.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import redis

__all__ = ["Store", "dump"]

_COMMIT = """
local cur = redis.call('get', KEYS[1]) or '0'
local token = tonumber(ARGV[3])
local accepted = 1
if token > 0 then
  local last = tonumber(redis.call('get', KEYS[3]) or '0')
  if token <= last then accepted = 0 else redis.call('set', KEYS[3], ARGV[3]) end
end
if accepted == 1 then redis.call('set', KEYS[1], tonumber(ARGV[2]) + 1) end
redis.call('rpush', KEYS[2], 'commit ' .. ARGV[1] .. ' ' .. ARGV[2] .. ' ' .. cur .. ' '
  .. ARGV[3] .. ' ' .. accepted)
return {tonumber(cur), accepted}
"""

PREFIX = "chaos"


def _keys(kind: str, res: str) -> tuple[str, str, str]:
    base = f"{PREFIX}:{kind}/{res}"
    return f"{base}:counter", f"{base}:log", f"{base}:fence"


class Store:
    """One connection to the store (thread-safe: redis-py pools its connections)."""

    def __init__(self, url: str) -> None:
        self.redis: Any = redis.Redis.from_url(url, socket_timeout=10)
        self._commit = self.redis.register_script(_COMMIT)

    def read(self, kind: str, res: str) -> int:
        """The counter's value."""
        return int(self.redis.get(_keys(kind, res)[0]) or 0)

    def commit(self, kind: str, res: str, sid: str, read: int, token: int) -> tuple[int, bool]:
        """Set the counter to ``read + 1`` (unless the fence refuses ``token``).

        Returns:
            The value found at commit time, and whether the write was accepted.
        """
        found, accepted = self._commit(keys=list(_keys(kind, res)), args=[sid, read, token])
        return int(found), bool(accepted)

    def fenced_commit(
        self, kind: str, res: str, sid: str, read: int, *, token: int, fence: Callable[..., object]
    ) -> tuple[int, bool]:
        """Set the counter to ``read + 1`` through ``fence(client, key, value, token)``
        (``fenced_set``, its script already loaded), in one transaction with its log line.

        Returns:
            The value found at commit time, and whether the fence accepted the write.
        """
        counter, log, _ = _keys(kind, res)
        pipe = self.redis.pipeline(transaction=True)
        pipe.get(counter)
        fence(pipe, counter, read + 1, token)
        pipe.rpush(log, f"fcommit {sid} {read} {token}")
        found, accepted, _ = pipe.execute()
        return int(found or 0), bool(accepted)

    def note(self, kind: str, res: str, line: str) -> None:
        """Append ``line`` to the resource's log."""
        self.redis.rpush(_keys(kind, res)[1], line)

    # -- the start: the load runs once every client process is ready -----------------------

    def ready(self, who: str) -> None:
        """Say that client process ``who`` is connected and about to wait for the start."""
        self.redis.sadd(f"{PREFIX}:ready", who)

    def ready_count(self) -> int:
        """How many client processes said they are ready."""
        return int(self.redis.scard(f"{PREFIX}:ready"))

    def start_load(self, stop_at: float) -> None:
        """Let every client process go, until ``stop_at`` (``time.monotonic()``)."""
        self.redis.set(f"{PREFIX}:stop_at", repr(stop_at))

    def wait_for_start(self, timeout: float) -> float | None:
        """When the load stops (``None``: not started within ``timeout`` seconds)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = self.redis.get(f"{PREFIX}:stop_at")
            if value is not None:
                return float(value)
            time.sleep(0.05)
        return None

    # -- the semaphore's re-seeding pause (see tests/chaos/runner.py, Reseeder) --------------

    def gate_closed(self, kind: str) -> bool:
        """Whether the runner asks ``kind``'s workers to pause (hold nothing) for a re-seed."""
        return bool(self.redis.exists(f"{PREFIX}:gate:{kind}"))

    def park(self, kind: str, who: str, parked: bool) -> None:
        """Say that worker thread ``who`` of ``kind`` holds nothing and waits (or goes on)."""
        key = f"{PREFIX}:parked:{kind}"
        if parked:
            self.redis.sadd(key, who)
        else:
            self.redis.srem(key, who)

    def close_gate(self, kind: str, closed: bool) -> None:
        """Ask ``kind``'s workers to pause (or go on)."""
        if closed:
            self.redis.set(f"{PREFIX}:gate:{kind}", 1)
        else:
            self.redis.delete(f"{PREFIX}:gate:{kind}")

    def parked(self, kind: str) -> int:
        """How many worker threads of ``kind`` are parked."""
        return int(self.redis.scard(f"{PREFIX}:parked:{kind}"))

    def close(self) -> None:
        """Close the connection pool."""
        self.redis.close()


def dump(url: str) -> dict[str, list[str]]:
    """Every resource's log, ``{"<kind>/<res>": [line, ...]}``, in store order."""
    r: Any = redis.Redis.from_url(url, decode_responses=True)
    try:
        out: dict[str, list[str]] = {}
        for key in sorted(r.scan_iter(match=f"{PREFIX}:*:log", count=1000)):
            out[key[len(PREFIX) + 1 : -len(":log")]] = list(r.lrange(key, 0, -1))
        return out
    finally:
        r.close()
