"""``lock_synced_aof`` (issue 30 item 9): an acquisition waits, with ``WAITAOF`` sent behind
the acquire script, until the master's (and replicas') append-only file has it fsynced; a
server without ``WAITAOF`` (Redis before 7.2) refuses clearly and nothing stays held. Runs on
whichever server the cell uses (``SYNCPRIMS_TEST_SERVER``): the matrix's Valkey 8 cell runs
the fsync path, Redis 7.0 the refusal."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis

import syncprims
from syncprims._embedded import RedisServer

pytestmark = pytest.mark.real


@pytest.fixture(scope="module")
def aof_server() -> Iterator[RedisServer]:
    server = RedisServer(args=["--appendonly", "yes", "--appendfsync", "always"])
    yield server
    server.stop()


def _has_waitaof(raw: Any) -> bool:
    """Redis 7.2+, or any Valkey (forked from 7.2)."""
    info = raw.info("server")
    if info.get("server_name") == "valkey" or "valkey_version" in info:
        return True
    major, minor = (int(part) for part in str(info["redis_version"]).split(".")[:2])
    return (major, minor) >= (7, 2)


def test_an_acquisition_waits_for_its_fsync(aof_server: RedisServer) -> None:
    raw = redis.Redis(port=aof_server.port)
    if not _has_waitaof(raw):
        pytest.skip("this server has no WAITAOF (Redis 7.2+, Valkey 7.2+): see the refusal test")
    name = f"aof:{uuid.uuid4().hex}"
    with syncprims.connect(aof_server.url, lock_synced_aof=(1, 0)) as client:
        lock = client.get_lock(name)
        lock.lock()
        assert raw.exists(name) == 1
        calls = raw.info("commandstats").get("cmdstat_waitaof", {}).get("calls", 0)
        assert calls >= 1
        lock.unlock()
    raw.close()


def test_too_few_replicas_undo_the_acquisition(aof_server: RedisServer) -> None:
    raw = redis.Redis(port=aof_server.port)
    if not _has_waitaof(raw):
        pytest.skip("this server has no WAITAOF (Redis 7.2+, Valkey 7.2+)")
    name = f"aof:{uuid.uuid4().hex}"
    with (
        syncprims.connect(
            aof_server.url, lock_synced_aof=(1, 1), replica_sync_timeout=0.2
        ) as client,
        pytest.raises(syncprims.ReplicaSyncError, match="fsynced by 1 of 1 local and 0 of 1"),
    ):
        client.get_lock(name).try_lock(lease_time=10)
    assert raw.exists(name) == 0  # undone
    raw.close()


def test_a_server_without_waitaof_refuses_clearly(redis_server: RedisServer) -> None:
    raw = redis.Redis(port=redis_server.port)
    name = f"aof:{uuid.uuid4().hex}"
    with syncprims.connect(redis_server.url, lock_synced_aof=(1, 0)) as client:
        lock = client.get_lock(name)
        # appendonly is off on the fixture's server: a server with WAITAOF refuses too
        match = "appendonly" if _has_waitaof(raw) else "needs Redis 7.2"
        with pytest.raises(syncprims.ServerReplyError, match=match):
            lock.try_lock(lease_time=10)
    assert raw.exists(name) == 0  # undone: nothing held
    raw.close()


@pytest.mark.parametrize(
    ("value", "error"),
    [((2, 0), ValueError), ((0, 0), ValueError), ((1, -1), ValueError), ("1,0", TypeError)],
)
def test_the_option_is_checked(value: object, error: type[Exception]) -> None:
    with pytest.raises(error):
        syncprims.Config(lock_synced_aof=value)
