"""Client options: what syncprims itself needs to know, validated at construction.

Where Redis is, and how to reach it (host, credentials, TLS, database, client name, socket
timeouts, pool size), is redis-py's business: pass [`syncprims.connect`][syncprims.connect] a
configured ``redis.Redis`` (or a pool, a ``RedisCluster``, a Sentinel ``master_for`` client, a
``fakeredis.FakeRedis``), or a URL that redis-py understands. The options here are the ones
only syncprims has: lease and wait behaviour, how its own calls are bounded and retried, and
replica synchronisation.

Durations are seconds (``int``/``float``) or ``datetime.timedelta``, stored as ``float``
seconds. Defaults follow Redisson's ``Config`` where a Redisson setting exists
(``lockWatchdogTimeout`` 30 s, ``subscriptionTimeout`` 7.5 s, ``fairLockWaitTimeout`` 300 s,
``lockWatchdogBatchSize`` 100, ``retryAttempts`` 4); the retry delays are ours.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from datetime import timedelta
from typing import Any, Literal, TypedDict

import attrs

from syncprims._protocol.timing import MAX_LEASE_SECONDS, Duration

__all__ = ["Config", "ConnectOptions", "Duration", "DEFAULT_TIMEOUT"]

DEFAULT_TIMEOUT = 3.0
"""The reply timeout, seconds, when neither the option nor the redis-py client sets one
(Redisson's ``timeout``)."""


class ConnectOptions(TypedDict, total=False):
    """The keyword options of [`syncprims.connect`][syncprims.connect] (and of the asyncio face's).

    Every key is optional; see [`Config`][syncprims.Config] for each one's meaning and default. A
    misspelt key or a wrong type is an error for ``mypy --strict`` and a ``TypeError`` at
    run time.
    """

    lock_watchdog_timeout: Duration
    watchdog_batch_size: int
    timeout: Duration
    retry_attempts: int
    retry_delay: tuple[Duration, Duration]
    subscription_timeout: Duration
    wait_recheck_interval: Duration
    fair_lock_wait_timeout: Duration
    lock_synced_replicas: int | Literal["auto"]
    replica_sync_timeout: Duration
    lock_grant_handoff: bool
    lock_grant_direct: bool
    raise_on_release_error: bool
    shared_connections: int
    pool_share: int
    lock_grant_direct_limit: int
    lock_synced_aof: tuple[int, int] | None
    client_record: bool


def _seconds(value: Duration) -> float:
    """A duration option to float seconds (the converter of every duration field)."""
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    raise TypeError(f"expected seconds (int or float) or a timedelta, not {type(value).__name__}")


def _positive(instance: object, attribute: attrs.Attribute[float], value: float) -> None:
    if math.isnan(value) or value <= 0 or math.isinf(value):
        raise ValueError(
            f"{attribute.name} must be a positive finite number of seconds, got {value!r}"
        )


def _non_negative_int(instance: object, attribute: attrs.Attribute[int], value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{attribute.name} must be an int, not {type(value).__name__}")
    if value < 0:
        raise ValueError(f"{attribute.name} must not be negative, got {value}")


def _aof(
    instance: object,
    attribute: attrs.Attribute[tuple[int, int] | None],
    value: tuple[int, int] | None,
) -> None:
    raw: object = value
    if raw is None:
        return
    if not isinstance(raw, tuple) or len(raw) != 2:
        raise TypeError(f"{attribute.name} must be None or (numlocal, numreplicas), got {raw!r}")
    local, replicas = raw
    for what, one in (("numlocal", local), ("numreplicas", replicas)):
        if isinstance(one, bool) or not isinstance(one, int):
            raise TypeError(f"{attribute.name}: {what} must be an int, not {type(one).__name__}")
    if local not in (0, 1):
        raise ValueError(f"{attribute.name}: numlocal must be 0 or 1, got {local!r}")
    if replicas < 0 or (local == 0 and replicas == 0):
        raise ValueError(
            f"{attribute.name}: numreplicas must be >= 0, and one of the two above 0, got {raw!r}"
        )


def _aof_pair(value: object) -> object:
    return tuple(value) if isinstance(value, list) else value


def _replicas(
    instance: object,
    attribute: attrs.Attribute[int | Literal["auto"]],
    value: int | Literal["auto"],
) -> None:
    raw: object = value
    if raw == "auto":
        return
    if isinstance(raw, str):
        raise ValueError(f"{attribute.name} must be 'auto' or an int >= 0, got {raw!r}")
    if isinstance(raw, bool) or not isinstance(raw, int):
        raise TypeError(f"{attribute.name} must be 'auto' or an int, not {type(raw).__name__}")
    if raw < 0:
        raise ValueError(f"{attribute.name} must not be negative, got {value}")


def _at_most_max_lease(instance: object, attribute: attrs.Attribute[float], value: float) -> None:
    if value > MAX_LEASE_SECONDS:
        raise ValueError(f"{attribute.name} must be at most {MAX_LEASE_SECONDS:g} s, got {value!r}")


def _positive_int(instance: object, attribute: attrs.Attribute[int], value: int) -> None:
    _non_negative_int(instance, attribute, value)
    if value < 1:
        raise ValueError(f"{attribute.name} must be at least 1, got {value}")


_is_bool = attrs.validators.instance_of(bool)


def _delay_pair(value: tuple[Duration, Duration]) -> tuple[float, float]:
    if not (isinstance(value, (tuple, list)) and len(value) == 2):
        raise TypeError("retry_delay must be a (base, cap) pair of seconds")
    base, cap = _seconds(value[0]), _seconds(value[1])
    if not (0 < base <= cap) or math.isinf(cap):
        raise ValueError(f"retry_delay must satisfy 0 < base <= cap < inf, got {value!r}")
    return (base, cap)


@attrs.frozen(kw_only=True)
class Config:
    """The options of one client (what [`syncprims.connect`][syncprims.connect] accepts as
    keywords).

    A bad value raises ``ValueError``/``TypeError`` when the object is built, before
    anything is sent to Redis.

    Attributes:
        lock_watchdog_timeout: the lease, seconds, of a lock taken without ``lease_time``;
            the watchdog renews it every third of this while it is held (Redisson
            ``lockWatchdogTimeout``, default 30 s).
        watchdog_batch_size: most locks renewed by one script call (Redisson
            ``lockWatchdogBatchSize``, 100).
        timeout: the longest wait, seconds, for one reply from Redis to a syncprims call; a
            reply that does not come in time fails with ``RedisTimeoutError``. ``None``
            (default): the redis-py client's ``socket_timeout``, or 3 s when it has none.
            ``client.config.timeout`` shows the value in force.
        retry_attempts: how many times an operation is retried after a connection error or
            timeout (Redisson ``retryAttempts``, 4). Idempotent operations (reads, unlock,
            renewals) are retried after any such error; acquire scripts only when they
            certainly did not reach Redis, never after they may have run.
        retry_delay: the back-off between retries, seconds: equal jitter growing from
            ``retry_delay[0]`` up to ``retry_delay[1]`` (redis-py's ``EqualJitterBackoff``,
            as Redisson's ``EqualJitterDelay``); the defaults ride out about 1.5 s of
            unavailability.
        subscription_timeout: the longest wait, seconds, for Redis to confirm a pub/sub
            subscription before a waiter falls back to polling (Redisson
            ``subscriptionTimeout``, 7.5 s).
        wait_recheck_interval: the longest a waiter sleeps, seconds, before it re-checks
            the lock even without a wake-up (a lost message cannot stall it longer). An
            RLock or FairLock waiter registered for the one wake-up per release (or a
            grant) re-checks at least every second anyway, when it renews its registration
            (``ONE_WAKE_SLICE_MS``): it notices a release that published nothing (a plain
            ``DEL`` by another client) within about a second. A SpinLock polls with a
            back-off and listens to no message.
        fair_lock_wait_timeout: a fair-lock waiter's slot, seconds (Redisson
            ``fairLockWaitTimeout``, 300 s).
        lock_synced_replicas: after each lock acquisition, wait (``WAIT``, sent in the same
            write as the acquire: one round trip) until this many replicas have the lock; if
            fewer acknowledge within ``replica_sync_timeout``, the acquisition is undone and
            ``ReplicaSyncError`` raised (Redisson ``checkLockSyncedSlaves``). ``"auto"``
            (default, as Redisson): every replica the master has (``INFO replication``, read
            at connect and every few seconds); a master without replicas gets no ``WAIT`` at
            all, so the default costs nothing there. 0: never wait. It narrows, but cannot
            close, the window in which a failover loses a granted lock (replication stays
            asynchronous).
        replica_sync_timeout: seconds to wait for those replicas (Redisson
            ``slavesSyncTimeout``, 1 s).
        lock_grant_handoff: an RLock release hands the lock straight to the syncprims
            waiter that has waited longest, and a FairLock release to the head of its queue
            when that is a registered syncprims waiter, which then returns without another
            round trip (the one-hop grant, ``docs/locks.md``, ``docs/fair-lock.md``; default
            ``True``). The cost: a waiter that is alive but stopped (a debugger, a long GC
            pause, a partition) when it is granted the lock holds it until its lease runs out
            (30 s under the watchdog), where without grants it costs others 0.1 s. ``False``:
            a release only wakes that waiter, which then takes the lock with its own script.
            Only for leases of 2 s and more (the watchdog's, by default), and where no
            replica must acknowledge an acquisition (``lock_synced_replicas`` 0, or
            ``"auto"`` on a master without replicas): a grant skips ``WAIT``.
        lock_grant_direct: with ``lock_grant_handoff``, in the blocking face: a waiting
            thread takes its grant from a list of its own (``BLPOP`` on a connection it holds
            while it waits), which the release pushes the grant to, instead of from a pub/sub
            message that the client's reader thread reads and passes on (a thread hop,
            ``docs/design.md``). Each such waiting thread holds a connection of syncprims'
            own (opened with the pool's settings, never one of the pool's) while it waits,
            so at most ``lock_grant_direct_limit`` of them wait this way at once; the others
            take their grant by message. Default ``True``; the asyncio face always takes the
            message (its reader runs on the waiter's own loop: no hop to save).
        lock_grant_direct_limit: how many threads of a client wait for a direct grant at
            once (each on a connection of its own, above). Default 16; 0 is
            ``lock_grant_direct=False``.
        raise_on_release_error: whether leaving ``with lock:`` (or ``async with``) raises
            ``LockNotHeldError`` when the lock was no longer held there: its lease ran out
            or it was lost (force-unlocked, deleted, renewals failed) inside the block.
            ``True`` (default). ``False``: the exit logs a WARNING on the ``syncprims.lock``
            logger, naming the lock, and does not raise; for holders told of a loss
            another way (``on_lost``, ``is_lost``, ``hold_or_cancel()``). Only the
            context manager's (and the decorator's) exit is quiet: an explicit
            ``unlock()`` still raises. redis-py's ``Lock`` option of the same name and
            meaning. Per lock: ``get_lock(name, raise_on_release_error=...)`` and the
            other lock getters.
        shared_connections: in the asyncio face, how many connections per server carry
            the commands of every task of the client (Redisson's ``CommandAsyncExecutor``:
            commands queued in one turn of the event loop are written together, replies are
            matched in order). They are syncprims' own, opened with the settings of the
            client's pool, so thousands of waiting and locking tasks never drain the
            application's pool. Blocking commands (a script followed by ``WAIT``) and the
            pub/sub subscription keep connections of their own. Default 1; 0: every command
            takes a connection from the client's pool for its round trip.
            The blocking face always does the latter.
        lock_synced_aof: ``(numlocal, numreplicas)``: after each lock acquisition, wait
            (``WAITAOF``, sent in the same write as the acquire: one round trip) until the
            master (``numlocal`` 1) and ``numreplicas`` replicas have written it to their
            append-only file and fsynced it, within ``replica_sync_timeout``; otherwise the
            acquisition is undone and ``ReplicaSyncError`` raised (Redisson's
            ``syncStrategy``/``WAITAOF``). It takes the place of ``WAIT``: the replicas
            waited for are the larger of ``numreplicas`` and ``lock_synced_replicas``. Needs
            Redis 7.2+ or Valkey 7.2+ and ``appendonly yes`` for ``numlocal`` 1; a server
            that refuses ``WAITAOF`` makes the acquisition fail with a
            ``ServerReplyError`` that says so (undone first). Default ``None``: no fsync
            is waited for. A grant (the one-hop handoff) is not made under it.
        pool_share: in the blocking face, the most connections of the client's pool
            syncprims holds at once per server (in a call, or kept between calls), and never
            more than a quarter of the pool's ``max_connections`` (at least one): the rest
            stay free for the application's own commands, however many threads lock. A
            thread past the share waits for a connection within ``timeout``, as it does for
            a full pool; a wait is never an error on its own. Default 8. Blocking waits
            (the direct grant) and the pub/sub subscription use connections of syncprims'
            own. (The asyncio face carries its commands on ``shared_connections``.)
        client_record: keep a record of this client in Redis (``syncprims_client:{<client
            id>}``: host, pid, client name, version; a ``SET`` at connect, refreshed every
            3 minutes, expiring 10 minutes after its last write, deleted at shutdown), so
            that ``info()`` and ``syncprims inspect`` can say which process holds what.
            Default ``True``. ``False``: write none (a health check, a watcher, a read-only
            tool: ``syncprims inspect`` and ``syncprims unlock`` connect so); this client's
            holds then show without a process.
    """

    lock_watchdog_timeout: float = attrs.field(
        default=30.0, converter=_seconds, validator=[_positive, _at_most_max_lease]
    )
    watchdog_batch_size: int = attrs.field(default=100, validator=_positive_int)
    timeout: float | None = attrs.field(
        default=None,
        converter=attrs.converters.optional(_seconds),
        validator=attrs.validators.optional(_positive),
    )
    retry_attempts: int = attrs.field(default=4, validator=_non_negative_int)
    retry_delay: tuple[float, float] = attrs.field(default=(0.1, 2.0), converter=_delay_pair)
    subscription_timeout: float = attrs.field(default=7.5, converter=_seconds, validator=_positive)
    wait_recheck_interval: float = attrs.field(default=5.0, converter=_seconds, validator=_positive)
    fair_lock_wait_timeout: float = attrs.field(
        default=300.0, converter=_seconds, validator=_positive
    )
    lock_synced_replicas: int | Literal["auto"] = attrs.field(default="auto", validator=_replicas)
    replica_sync_timeout: float = attrs.field(default=1.0, converter=_seconds, validator=_positive)
    lock_grant_handoff: bool = attrs.field(default=True, validator=_is_bool)
    lock_grant_direct: bool = attrs.field(default=True, validator=_is_bool)
    raise_on_release_error: bool = attrs.field(default=True, validator=_is_bool)
    shared_connections: int = attrs.field(default=1, validator=_non_negative_int)
    pool_share: int = attrs.field(default=8, validator=_positive_int)
    lock_synced_aof: tuple[int, int] | None = attrs.field(
        default=None, converter=_aof_pair, validator=_aof
    )
    lock_grant_direct_limit: int = attrs.field(default=16, validator=_non_negative_int)
    client_record: bool = attrs.field(default=True, validator=_is_bool)

    @classmethod
    def from_options(cls, options: Mapping[str, Any]) -> Config:
        """The configuration for ``connect(..., **options)``.

        Raises:
            TypeError: an unknown option (the message lists the known ones), or a bad type.
            ValueError: a bad value.
        """
        known = ConnectOptions.__annotations__
        unknown = sorted(set(options) - set(known))
        if unknown:
            raise TypeError(
                f"unknown option(s) {', '.join(map(repr, unknown))}; the options are "
                f"{', '.join(sorted(known))} (connection settings belong to the redis-py "
                "client: pass connect() a configured redis.Redis)"
            )
        return cls(**options)
