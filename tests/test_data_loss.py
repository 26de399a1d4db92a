"""A hold lost with the server's data is told: a restart without persistence, or an
eviction, is noticed from the server's ``INFO`` (a new ``run_id``, a grown eviction count)
and every hold there is checked at once, explicit leases included (issue 39)."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from typing import Any

import pytest

import syncprims
from syncprims import LossReason
from syncprims._embedded import RedisServer
from tests.harness import Face, raw_redis

pytestmark = pytest.mark.real


class Told:
    """Records ``on_lost`` calls, and when each came."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, float]] = []
        self.event = threading.Event()

    def __call__(self, name: str, reason: str) -> None:
        self.calls.append((name, reason, time.monotonic()))
        self.event.set()

    async def wait(self, count: int, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while len(self.calls) < count and time.monotonic() < deadline:
            await asyncio.sleep(0.02)


def fill(raw: Any, evicted: str) -> None:
    """Write keys without a TTL until ``evicted`` (the one key with a TTL) is evicted."""
    for i in range(100_000):
        if not raw.exists(evicted):
            return
        raw.set(f"filler:{i}", "x" * 200)
    raise AssertionError(f"{evicted} was not evicted")


@pytest.fixture
def server() -> Any:
    with RedisServer() as server:
        yield server


async def test_an_empty_restart_is_told_to_every_holder(face: Face, server: RedisServer) -> None:
    told = Told()
    client = await face.connect(server.url, lock_watchdog_timeout=60)  # no renewal for 20 s
    renewed, leased = (
        client.get_lock("renewed", on_lost=told),
        client.get_lock("leased", on_lost=told),
    )
    a = face.actor()
    await a(renewed.lock)
    await a(leased.lock, 120)
    await asyncio.sleep(0.3)  # the watchdog has read the server once
    server.restart()  # empty: no persistence
    started = time.monotonic()
    await told.wait(2, 10)
    assert sorted((name, reason) for name, reason, _ in told.calls) == [
        ("leased", LossReason.DATA_LOST),
        ("renewed", LossReason.DATA_LOST),
    ]
    assert max(at for _, _, at in told.calls) - started < 5  # about a second, under load
    assert await a(lambda: renewed.is_lost) and await a(lambda: leased.is_lost)
    assert client._ex.watchdog.lost == 2


async def test_an_eviction_is_told(face: Face, server: RedisServer) -> None:
    told = Told()
    client = await face.connect(server.url)
    lock = client.get_lock("evicted", on_lost=told)
    a = face.actor()
    await a(lock.lock, 120)
    await asyncio.sleep(0.3)
    raw = raw_redis(server.url)
    try:
        used = int(raw.info("memory")["used_memory"])
        raw.config_set("maxmemory-policy", "volatile-ttl")  # keys with a TTL go first
        raw.config_set("maxmemory", used + 200_000)
        fill(raw, "evicted")  # filler without TTL: only the lock can be evicted
        await told.wait(1, 10)
        assert [(n, r) for n, r, _ in told.calls] == [("evicted", LossReason.DATA_LOST)]
    finally:
        raw.config_set("maxmemory", 0)
        raw.close()


async def test_a_server_that_kept_its_data_costs_no_loss(face: Face, server: RedisServer) -> None:
    """Another client's key evicted (or deleted) makes the holder check, and find its hold."""
    told = Told()
    client = await face.connect(server.url)
    lock = client.get_lock("kept", on_lost=told)
    a = face.actor()
    await a(lock.lock)
    raw = raw_redis(server.url)
    try:
        raw.set("other", "x", px=60_000)
        used = int(raw.info("memory")["used_memory"])
        raw.config_set("maxmemory-policy", "volatile-ttl")
        raw.config_set("maxmemory", used + 200_000)
        raw.persist("kept")  # the hold itself cannot be evicted: only "other" can
        fill(raw, "other")
        await asyncio.sleep(2.5)
        assert told.calls == []
        assert await a(lock.is_held_by_current_thread)
    finally:
        raw.config_set("maxmemory", 0)
        raw.close()
    await a(lock.unlock)


def test_an_evicting_server_is_warned_about_once(
    server: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    raw = raw_redis(server.url)
    raw.config_set("maxmemory-policy", "allkeys-lru")
    raw.close()
    with caplog.at_level(logging.WARNING, logger="syncprims"):
        for _ in range(2):
            syncprims.connect(server.url).shutdown()
    warned = [r.getMessage() for r in caplog.records if "may evict keys" in r.getMessage()]
    assert len(warned) == 1
    assert "allkeys-lru" in warned[0] and "noeviction" in warned[0]
