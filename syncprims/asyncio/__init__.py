"""The asyncio face of syncprims: the same classes and names, as coroutines.

Ownership is per asyncio *task*: two tasks on one thread exclude each other. ::

    import syncprims.asyncio

    async with await syncprims.asyncio.connect() as client:
        async with client.get_lock("orders:42"):
            ...

A client belongs to the event loop that uses it; used from a new loop (a second
``asyncio.run()``), it opens new connections for that loop.
"""

from syncprims.asyncio._client import Client, MasterSet, connect, connect_many
from syncprims.asyncio._lock import FairLock, FencedLock, ReadLock, ReadWriteLock, RLock, WriteLock
from syncprims.asyncio._multi import MultiLock, RedLock
from syncprims.asyncio._objects import RExpirable, RObject
from syncprims.asyncio._semaphore import CountDownLatch, PermitExpirableSemaphore, Semaphore
from syncprims.config import TLS, Config, SingleServer

__all__ = [
    "TLS",
    "Client",
    "Config",
    "CountDownLatch",
    "FairLock",
    "FencedLock",
    "MasterSet",
    "MultiLock",
    "PermitExpirableSemaphore",
    "RExpirable",
    "RLock",
    "RObject",
    "RedLock",
    "ReadLock",
    "ReadWriteLock",
    "WriteLock",
    "Semaphore",
    "SingleServer",
    "connect",
    "connect_many",
]
