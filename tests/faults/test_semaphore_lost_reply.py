"""A plain semaphore's release whose reply is lost (found by the chaos campaign, issue 17).

``Semaphore.release`` runs ``sem_release.lua`` (``INCRBY``) through the retry path meant for
idempotent scripts (``ObjectCore.run_script``). ``INCRBY`` is not idempotent: when the first
attempt ran and only its reply was lost, the retry gives the permits back a second time, and
the semaphore then admits more holders than it has permits (measured: 3 permits of 2).
Now a release that may have run is not re-sent: it raises ``RedisTimeoutError`` with
``maybe_executed=True`` instead (at worst a permit is kept, never given twice).
"""

from __future__ import annotations

import threading
import uuid

import pytest
import redis

import syncprims
from syncprims._embedded import RedisServer

from .proxy import FaultProxy

pytestmark = [pytest.mark.real, pytest.mark.faults]


def test_a_lost_release_reply_gives_the_permit_back_once(
    proxy: FaultProxy, redis_server: RedisServer
) -> None:
    name = f"sem:{uuid.uuid4().hex[:12]}"
    raw = redis.Redis(port=redis_server.port)
    client = syncprims.connect(proxy.url, timeout=0.5, retry_attempts=3, retry_delay=(0.05, 0.2))
    try:
        sem = client.get_semaphore(name)
        assert sem.try_set_permits(2)
        assert sem.try_acquire(1)
        sem.release(1)  # loads the release script: the next EVALSHA runs at once
        assert sem.try_acquire(1)
        assert raw.get(name) == b"1"
        proxy.blackhole = True  # the release runs; its reply is lost
        threading.Timer(0.3, lambda: setattr(proxy, "blackhole", False)).start()
        with pytest.raises(syncprims.RedisTimeoutError) as caught:
            sem.release(1)
        assert caught.value.maybe_executed
        assert raw.get(name) == b"2"  # given back once (before the fix: 3 permits of 2)
    finally:
        client.shutdown()
        raw.delete(name)
        raw.close()


def test_a_lost_permit_release_reply_is_not_reported_as_not_held(
    proxy: FaultProxy, redis_server: RedisServer
) -> None:
    name = f"pes:{uuid.uuid4().hex[:12]}"
    client = syncprims.connect(proxy.url, timeout=0.5, retry_attempts=2, retry_delay=(0.05, 0.2))
    try:
        sem = client.get_permit_expirable_semaphore(name)
        assert sem.try_set_permits(1)
        first = sem.try_acquire(wait_time=1, lease_time=10)
        assert first is not None
        sem.release(first)  # loads the release script: the next EVALSHA runs at once
        permit = sem.try_acquire(wait_time=1, lease_time=10)
        assert permit is not None
        proxy.drop_replies = 1  # the release runs in Redis; its reply is lost
        sem.release(permit)  # the RLock's unlock, under the same fault, returns
        assert sem.available_permits() == 1
        sem.add_permits(1)
        both = sem.try_acquire_many(2, wait_time=1, lease_time=10)
        assert both is not None
        proxy.drop_replies = 1  # the same for a list of permits, all or none
        sem.release(both)
        assert sem.available_permits() == 2
    finally:
        client.shutdown()
