"""``max_hold``: a bounded watchdog (issue 30 item 4). The hold is renewed like any watchdog
hold, never past ``max_hold`` after the grant, and the holder is told through ``on_lost``
with its own reason (``LossReason.MAX_HOLD``)."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest

import syncprims
from syncprims import LossReason
from tests.harness import Face


def _reporter() -> tuple[list[str], threading.Event, Any]:
    reports: list[str] = []
    reported = threading.Event()

    def on_lost(_name: str, reason: str) -> None:
        reports.append(reason)
        reported.set()

    return reports, reported, on_lost


async def test_a_max_hold_under_the_watchdog_timeout_is_the_lease(
    face: Face, client: Any, name: str, raw: Any
) -> None:
    reports, reported, on_lost = _reporter()
    # the client has the default watchdog timeout, 30 s
    lock = client.get_lock(name, on_lost=on_lost)
    a = face.actor()
    started = time.monotonic()
    await a(lock.lock, max_hold=0.8)
    assert 0 < raw.pttl(name) <= 800
    assert await asyncio.get_running_loop().run_in_executor(None, reported.wait, 5)
    told = time.monotonic() - started
    assert reports == [LossReason.MAX_HOLD]
    assert told <= 0.8 + 1.5  # bounded (a loaded CI machine ticks late), not a speed test
    assert await a(lambda: lock.is_lost)
    await asyncio.sleep(0.1)
    assert raw.exists(name) == 0  # gone in Redis by then: never held past max_hold


async def test_a_max_hold_past_renewals_renews_then_stops(
    face: Face, url: str, name: str, raw: Any
) -> None:
    reports, reported, on_lost = _reporter()
    client = await face.connect(url, lock_watchdog_timeout=0.9)  # renewed every 0.3 s
    lock = client.get_lock(name, on_lost=on_lost)
    a = face.actor()
    started = time.monotonic()
    await a(lock.lock, max_hold=2.0)
    await asyncio.sleep(1.2)  # past the first lease: renewals kept it
    assert raw.exists(name) == 1 and not reports
    assert await asyncio.get_running_loop().run_in_executor(None, reported.wait, 5)
    told = time.monotonic() - started
    assert reports == [LossReason.MAX_HOLD]
    assert 1.6 <= told <= 2.0 + 1.5
    ttl = raw.pttl(name)
    assert ttl < 0 or ttl <= 200  # its last lease ends at max_hold: no renewal after it
    await asyncio.sleep(0.4)
    assert raw.exists(name) == 0
    with pytest.raises(syncprims.LockNotHeldError):
        await a(lock.unlock)


async def test_an_unlock_before_max_hold_is_a_plain_release(
    face: Face, url: str, name: str, raw: Any
) -> None:
    reports, _, on_lost = _reporter()
    client = await face.connect(url, lock_watchdog_timeout=0.9)
    lock = client.get_lock(name, on_lost=on_lost)
    a = face.actor()
    assert await a(lock.try_lock, 1, max_hold=1.0)
    await a(lock.unlock)
    await asyncio.sleep(1.3)
    assert reports == [] and raw.exists(name) == 0
    await a(lock.lock)  # the next hold of the owner has no bound
    await asyncio.sleep(1.3)
    assert raw.exists(name) == 1 and reports == []
    await a(lock.unlock)


async def test_max_hold_is_checked_before_anything_is_sent(
    face: Face, client: Any, name: str, raw: Any
) -> None:
    lock = client.get_lock(name)
    a = face.actor()
    with pytest.raises(ValueError, match="lease_time=None"):
        await a(lock.lock, 5, max_hold=10)
    with pytest.raises(ValueError, match="max_hold must not be negative"):
        await a(lock.try_lock, 0, max_hold=-1)
    with pytest.raises(TypeError, match="max_hold must be seconds"):
        await a(lock.try_lock, 0, max_hold="ten")
    assert raw.exists(name) == 0


def test_the_loss_reason_names_max_hold() -> None:
    assert "max_hold" in LossReason.MAX_HOLD  # a str enum: code searching the text works
    assert LossReason("it reached its max_hold") is LossReason.MAX_HOLD
