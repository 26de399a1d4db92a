"""The asyncio face of syncprims: the same classes and names, as coroutines.

Ownership is per asyncio *task*: two tasks on one thread exclude each other.

```python
import redis.asyncio
import syncprims.asyncio

r = redis.asyncio.Redis(host="localhost")            # the client your application has
async with await syncprims.asyncio.connect(r) as client:
    async with client.get_lock("orders:42"):
        ...
```

A client belongs to the event loop it was created on (as redis-py's asyncio clients do); its
pub/sub reader and watchdog run on that loop, through the pool it was given.
"""

from syncprims import errors
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
from syncprims._transport.sources import async_redis_from_url as redis_from_url
from syncprims.asyncio._client import (
    Client,
    LostCallback,
    MasterSet,
    Source,
    connect,
    connect_many,
)
from syncprims.asyncio._election import LeaderElection
from syncprims.asyncio._fenced import FencedLock
from syncprims.asyncio._latch import CountDownLatch
from syncprims.asyncio._lock import (
    FairLock,
    NonReentrantFairLock,
    NonReentrantLock,
    RLock,
    SpinLock,
)
from syncprims.asyncio._multi import MultiLock, RedLock
from syncprims.asyncio._objects import RExpirable, RObject
from syncprims.asyncio._rwlock import ReadLock, ReadWriteLock, WriteLock
from syncprims.asyncio._semaphore import PermitExpirableSemaphore, Semaphore
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
    "connect",
    "connect_many",
    "errors",
    "redis_from_url",
]
