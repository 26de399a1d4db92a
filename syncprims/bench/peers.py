"""The libraries compared by ``syncprims bench``, behind one small blocking interface.

A :class:`Peer` is named by a string so that worker processes (spawned) can build their own
clients. Each peer's lock is used the way its documentation suggests, with a 30 s expiry:

* ``syncprims``: ``RLock.lock()`` / ``unlock()`` (watchdog lease), pub/sub wake-ups;
  ``syncprims FairLock``: the same calls on a ``FairLock`` (scenarios 1-3);
  ``syncprims RedLock`` (x5): a ``RedLock`` over 1 (5) masters from ``connect_many``;
* ``redis-py Lock``: ``Redis.lock(name, timeout=30)``, default ``sleep=0.1`` polling;
* ``python-redis-lock``: ``redis_lock.Lock(conn, name, expire=30)``, BLPOP wake-ups;
* ``pottery Redlock``: ``Redlock(key=name, masters=..., auto_release_time=30)``, polling;
* floors: two EVALSHA round trips (the raw cost of a script acquire + release), the same
  written to 5 masters before reading (RedLock's floor), two PINGs, and a one-token
  BLPOP/LPUSH list (the least any handoff through Redis can cost).
"""

from __future__ import annotations

import importlib.util
import itertools
import os
from collections.abc import Callable
from functools import partial
from typing import Any, Protocol

import attrs
import redis

from syncprims._protocol import scripts

__all__ = ["PEERS", "BenchLock", "Peer", "available", "open_peer"]


class BenchLock(Protocol):
    """One lock of one peer, used by one thread."""

    def acquire(self) -> object: ...

    def release(self) -> object: ...


@attrs.frozen
class Session:
    """A peer's clients in one process; ``lock(name)`` makes a lock, ``close()`` ends it."""

    lock: Callable[[str], BenchLock]
    close: Callable[[], None]


@attrs.frozen
class Peer:
    """A library (or a floor) to measure."""

    name: str
    requires: str | None
    masters: int = 1


PEERS = {
    p.name: p
    for p in [
        Peer("syncprims", None),
        Peer("syncprims FairLock", None),
        Peer("syncprims RedLock", None),
        Peer("syncprims RedLock x5", None, masters=5),
        Peer("redis-py Lock", None),
        Peer("python-redis-lock", "redis_lock"),
        Peer("pottery Redlock", "pottery"),
        Peer("pottery Redlock x5", "pottery", masters=5),
        Peer("raw EVALSHA floor", None),
        Peer("raw EVALSHA fan-out x1", None),
        Peer("raw EVALSHA fan-out x5", None, masters=5),
        Peer("PING floor", None),
        Peer("BLPOP floor", None),
    ]
}


def available(name: str) -> bool:
    """Whether the peer's library is installed (the ``[bench]`` extra)."""
    required = PEERS[name].requires
    return required is None or importlib.util.find_spec(required) is not None


@attrs.frozen
class _Calls:
    """A lock as two calls, for a library whose lock names them otherwise."""

    acquire: Callable[[], object]
    release: Callable[[], object]


class _PythonRedisLock:
    def __init__(self, client: redis.Redis, name: str) -> None:
        self._client = client
        self._name = name
        self._lock: Any = None

    def acquire(self) -> None:
        import redis_lock

        self._lock = redis_lock.Lock(self._client, self._name, expire=30)
        self._lock.acquire()

    def release(self) -> None:
        self._lock.release()


def _pottery(masters: list[redis.Redis], name: str) -> BenchLock:
    from pottery import Redlock

    lock: BenchLock = Redlock(key=name, masters=set(masters), auto_release_time=30)
    return lock


class _Floor:
    """Redisson's acquire and unlock scripts loaded on the ``masters``, and their EVALSHA
    arguments for one name. A new unlock latch key per release, as every real unlock needs
    (the unlock script answers a latch's stored reply instead of releasing, so a reused key
    would make releases no-ops), with Redisson's latch lifetime, ``(timeout + retryDelay) *
    retryAttempts`` = 13.5 s; never deleted afterwards (the least a correct unlock costs)."""

    LATCH_TTL_MS = 13_500

    def __init__(self, masters: list[redis.Redis], name: str) -> None:
        for master in masters:
            master.script_load(scripts.LOCK_ACQUIRE.source)
            master.script_load(scripts.LOCK_UNLOCK.source)
        self._name = name
        self._acquire = (scripts.LOCK_ACQUIRE.sha, 1, name, 30_000, "floor:1")
        self._latch = f"redisson_unlock_latch:{{{name}}}:{os.urandom(8).hex()}:"
        self._ids = itertools.count()

    def _release(self) -> tuple[Any, ...]:
        return (
            scripts.LOCK_UNLOCK.sha, 3, self._name, "floor-channel",
            f"{self._latch}{next(self._ids)}", "0", 30_000, "floor:1", "PUBLISH",
            self.LATCH_TTL_MS,
        )  # fmt: skip


class _RawFloor(_Floor):
    """Two EVALSHA round trips with redis-py's client: the raw cost of acquire + release."""

    def __init__(self, client: redis.Redis, name: str) -> None:
        super().__init__([client], name)
        self._client = client

    def acquire(self) -> None:
        self._client.evalsha(*self._acquire)

    def release(self) -> None:
        self._client.evalsha(*self._release())


class _RawFanOut(_Floor):
    """RedLock's floor: the same two scripts on N masters from one thread, each step written
    to every master before any reply is read (redis-py connections, hiredis parser)."""

    def __init__(self, masters: list[redis.Redis], name: str) -> None:
        self._conns: list[Any] = [m.connection_pool.get_connection() for m in masters]
        super().__init__(masters, name)

    def _all(self, args: tuple[Any, ...]) -> None:
        for conn in self._conns:
            conn.send_command("EVALSHA", *args)
        for conn in self._conns:
            conn.read_response()

    def acquire(self) -> None:
        self._all(self._acquire)

    def release(self) -> None:
        self._all(self._release())


def _syncprims(lock: Any) -> BenchLock:
    return _Calls(lock.lock, lock.unlock)


def open_peer(name: str, urls: list[str]) -> Session:
    """Build ``name``'s clients in this process (``urls[0]``; pottery x5 uses five).

    Raises:
        KeyError: unknown peer.
        ImportError: the peer's library is not installed.
    """
    peer = PEERS[name]
    if name.startswith("syncprims"):
        import syncprims

        get: Callable[[str], Any]
        if name.startswith("syncprims RedLock"):
            masters = syncprims.connect_many(urls[: peer.masters])
            get, end = masters.get_red_lock, masters.shutdown
        else:
            client = syncprims.connect(urls[0])
            get = client.get_fair_lock if name == "syncprims FairLock" else client.get_lock
            end = client.shutdown
        return Session(lambda n: _syncprims(get(n)), end)
    raws = [redis.Redis.from_url(u) for u in urls[: peer.masters]]
    if len(raws) < peer.masters:
        raise ValueError(f"{name} needs {peer.masters} Redis masters, got {len(raws)}")

    def close() -> None:
        for r in raws:
            r.close()

    first = raws[0]
    makers: dict[str, Callable[[str], BenchLock]] = {
        "redis-py Lock": lambda n: first.lock(n, timeout=30),
        "python-redis-lock": lambda n: _PythonRedisLock(first, n),
        "pottery Redlock": lambda n: _pottery(raws, n),
        "pottery Redlock x5": lambda n: _pottery(raws, n),
        "raw EVALSHA floor": lambda n: _RawFloor(first, n),
        "raw EVALSHA fan-out x1": lambda n: _RawFanOut(raws[:1], n),
        "raw EVALSHA fan-out x5": lambda n: _RawFanOut(raws, n),
        "PING floor": lambda n: _Calls(first.ping, first.ping),
        "BLPOP floor": lambda n: _Calls(partial(first.blpop, [n], 30), partial(first.lpush, n, 1)),
    }
    return Session(makers[name], close)
