"""syncprims: typed distributed synchronization primitives on Redis, Redisson compatible.

This package is the blocking (sync) face; :mod:`syncprims.asyncio` has the same classes for
asyncio. Start with :func:`connect`::

    import syncprims

    with syncprims.connect("redis://127.0.0.1:6379") as client:
        with client.get_lock("orders:42"):
            ...  # one owner at a time, across processes and hosts
"""

from syncprims import errors
from syncprims._sync._client import Client, MasterSet, connect, connect_many
from syncprims._sync._lock import FairLock, FencedLock, ReadLock, ReadWriteLock, RLock, WriteLock
from syncprims._sync._multi import MultiLock, RedLock
from syncprims._sync._objects import RExpirable, RObject
from syncprims._sync._semaphore import CountDownLatch, PermitExpirableSemaphore, Semaphore
from syncprims.config import TLS, ClusterServers, Config, SentinelServers, SingleServer
from syncprims.errors import (
    AuthenticationError,
    ClientClosedError,
    LockError,
    LockLostError,
    LockNotHeldError,
    PermitNotHeldError,
    RedisConnectionError,
    RedisTimeoutError,
    ReplicaSyncError,
    ServerReplyError,
    SyncPrimsError,
    TransportError,
)

__version__ = "0.1.0"

__all__ = [
    "TLS",
    "Client",
    "ClientClosedError",
    "Config",
    "ClusterServers",
    "CountDownLatch",
    "FairLock",
    "FencedLock",
    "LockError",
    "LockLostError",
    "LockNotHeldError",
    "MasterSet",
    "MultiLock",
    "PermitExpirableSemaphore",
    "PermitNotHeldError",
    "ReplicaSyncError",
    "RExpirable",
    "RLock",
    "RObject",
    "RedLock",
    "ReadLock",
    "ReadWriteLock",
    "WriteLock",
    "RedisConnectionError",
    "RedisTimeoutError",
    "ServerReplyError",
    "AuthenticationError",
    "Semaphore",
    "SentinelServers",
    "SingleServer",
    "SyncPrimsError",
    "TransportError",
    "__version__",
    "connect",
    "connect_many",
    "errors",
]
