"""syncprims: typed distributed synchronization primitives on Redis, Redisson compatible.

This package is the blocking (sync) face; [`syncprims.asyncio`][syncprims.asyncio] has the same
classes for asyncio. Start with [`connect`][syncprims.connect], giving it the redis-py client your
application already
has (or a URL):

```python
import redis
import syncprims

r = redis.Redis(host="localhost")
with syncprims.connect(r) as client:
    with client.get_lock("orders:42"):
        ...  # one owner at a time, across processes and hosts
```
"""

import logging

from syncprims import errors, fencing  # noqa: F401 - ``syncprims.fencing`` (not in __all__:

# it is for both faces, and syncprims.asyncio lists the same names)
from syncprims._core.owners import OwnerId
from syncprims._protocol.election import Leader
from syncprims._protocol.info import (
    ClientProcess,
    LatchInfo,
    LockHolder,
    LockInfo,
    LockWaiter,
    PermitLease,
    SemaphoreInfo,
)
from syncprims._protocol.loss import LossReason
from syncprims._protocol.statistics import LatchStatistics, LockStatistics, SemaphoreStatistics
from syncprims._protocol.timing import Duration
from syncprims._sync._client import Client, LostCallback, MasterSet, Source, connect, connect_many
from syncprims._sync._election import LeaderElection
from syncprims._sync._fenced import FencedLock
from syncprims._sync._latch import CountDownLatch
from syncprims._sync._lock import FairLock, NonReentrantFairLock, NonReentrantLock, RLock, SpinLock
from syncprims._sync._multi import MultiLock, RedLock
from syncprims._sync._objects import RExpirable, RObject
from syncprims._sync._rwlock import ReadLock, ReadWriteLock, WriteLock
from syncprims._sync._semaphore import PermitExpirableSemaphore, Semaphore
from syncprims._transport.sources import redis_from_url
from syncprims.config import Config, ConnectOptions
from syncprims.errors import (
    AuthenticationError,
    ClientClosedError,
    LockError,
    LockLostError,
    LockNotHeldError,
    LockReentryError,
    LockTimeoutError,
    MonkeyPatchedError,
    PermitNotHeldError,
    RedisConnectionError,
    RedisTimeoutError,
    ReplicaSyncError,
    ServerReplyError,
    SyncPrimsError,
    TransportError,
)

__version__ = "0.1.0"

logging.getLogger("syncprims").addHandler(logging.NullHandler())

__all__ = [
    "AuthenticationError",
    "Client",
    "ClientClosedError",
    "ClientProcess",
    "Config",
    "ConnectOptions",
    "CountDownLatch",
    "Duration",
    "FairLock",
    "FencedLock",
    "LockError",
    "LockLostError",
    "LockNotHeldError",
    "LockReentryError",
    "LockTimeoutError",
    "MonkeyPatchedError",
    "LatchInfo",
    "LockHolder",
    "LockInfo",
    "LatchStatistics",
    "Leader",
    "LeaderElection",
    "LockStatistics",
    "LockWaiter",
    "LossReason",
    "OwnerId",
    "LostCallback",
    "MasterSet",
    "MultiLock",
    "NonReentrantFairLock",
    "NonReentrantLock",
    "PermitExpirableSemaphore",
    "PermitLease",
    "PermitNotHeldError",
    "RExpirable",
    "RLock",
    "RObject",
    "ReadLock",
    "ReadWriteLock",
    "RedLock",
    "RedisConnectionError",
    "RedisTimeoutError",
    "ReplicaSyncError",
    "Semaphore",
    "SemaphoreInfo",
    "SemaphoreStatistics",
    "ServerReplyError",
    "Source",
    "SpinLock",
    "SyncPrimsError",
    "TransportError",
    "WriteLock",
    "__version__",
    "connect",
    "connect_many",
    "errors",
    "redis_from_url",
]
