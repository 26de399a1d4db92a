"""Scenario 9, ``scale``: N asyncio tasks on one client, each looping ``lock()`` -> 1 ms ->
``unlock()`` on a name of its own (``distinct``) or on one of 8 (``hot``), next to the
per-call pooled executor, redis-py's asyncio ``Lock`` and a plain ``Script`` pair; with five
servers, a RedLock under 256 tasks. What each peer and figure is: docs/measurements.md, "Many
tasks on one client (`scale`)". Speed is reported, never asserted.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

import redis
import redis.asyncio

import syncprims.asyncio
from syncprims._protocol import scripts
from syncprims.bench.scenarios import Progress, Row, Settings

__all__ = ["scale"]

HOT_NAMES = 8


def _peak_connections(url: str, name: str) -> int:
    admin = redis.Redis.from_url(url)
    try:
        return sum(1 for c in admin.client_list() if c.get("name") == name)
    finally:
        admin.close()


async def _one(url: str, peer: str, tasks: int, hot: bool, seconds: float) -> dict[str, Any]:
    name = f"syncprims-bench-scale-{uuid.uuid4().hex[:8]}"
    pool: Any = None
    if peer == "redis-py":
        pool = redis.asyncio.BlockingConnectionPool.from_url(
            url, max_connections=100, timeout=None, client_name=name
        )
        app = redis.asyncio.Redis(connection_pool=pool)
    else:
        app = redis.asyncio.Redis.from_url(url, client_name=name)
    client = None
    if peer.startswith("syncprims"):
        shared = 0 if peer == "syncprims-pooled" else 1
        client = await syncprims.asyncio.connect(app, shared_connections=shared)
    acquire = app.register_script(scripts.LOCK_ACQUIRE.source)
    release = app.register_script(scripts.LOCK_UNLOCK.source)
    latencies: list[float] = []
    errors = 0
    peak = 0
    stop = time.monotonic() + seconds

    async def one_pair(key: str, owner: str) -> None:
        if client is not None:
            lock = client.get_lock(key)
            await lock.lock()
            await asyncio.sleep(0.001)
            await lock.unlock()
        elif peer == "redis-py":
            peer_lock = app.lock(key, timeout=30, blocking_timeout=30)
            if not await peer_lock.acquire():
                raise TimeoutError(key)
            await asyncio.sleep(0.001)
            await peer_lock.release()
        else:  # the script floor: no waiting, so distinct names only
            await acquire(keys=[key], args=[30_000, owner])
            await asyncio.sleep(0.001)
            await release(
                keys=[
                    key,
                    f"redisson_lock__channel:{{{key}}}",
                    f"redisson_unlock_latch:{{{key}}}:{owner}",
                ],
                args=[0, 30_000, owner, "PUBLISH", 1_000],
            )

    async def worker(i: int) -> None:
        nonlocal errors
        key = f"{name}:{i % HOT_NAMES if hot else i}"
        owner = f"{name}:{i}"
        while time.monotonic() < stop:
            started = time.perf_counter()
            try:
                await one_pair(key, owner)
            except Exception:
                errors += 1
                continue
            latencies.append(time.perf_counter() - started)

    async def watch() -> None:
        nonlocal peak
        while True:
            peak = max(peak, await asyncio.to_thread(_peak_connections, url, name))
            await asyncio.sleep(0.25)

    watcher = asyncio.create_task(watch())
    began = time.monotonic()
    await asyncio.gather(*(worker(i) for i in range(tasks)))
    elapsed = time.monotonic() - began
    watcher.cancel()
    # The connections are still open: one reading more, so that a short window on a loaded
    # host, which can end before the watcher's first reading, still counts them.
    peak = max(peak, await asyncio.to_thread(_peak_connections, url, name))
    if client is not None:
        await client.shutdown()
    await app.aclose()
    if pool is not None:
        await pool.disconnect()
    latencies.sort()

    def quantile(q: float) -> float:
        return latencies[min(len(latencies) - 1, int(q * len(latencies)))] if latencies else 0.0

    return {
        "pairs": len(latencies) / elapsed,
        "p50": quantile(0.5) * 1000,
        "p99": quantile(0.99) * 1000,
        "connections": float(peak),
        "errors": float(errors),
    }


async def _red_lock(urls: list[str], shared: int, tasks: int, seconds: float) -> dict[str, Any]:
    """A RedLock on the 5 masters ``urls`` under ``tasks`` tasks on names of their own, each
    looping ``lock()`` -> 1 ms -> ``unlock()``: pairs/s and failed calls."""
    apps = [redis.asyncio.Redis.from_url(url) for url in urls]
    masters = await syncprims.asyncio.connect_many(apps, shared_connections=shared)
    prefix = f"syncprims-bench-scale-red-{uuid.uuid4().hex[:8]}"
    pairs = errors = 0
    stop = time.monotonic() + seconds

    async def worker(i: int) -> None:
        nonlocal pairs, errors
        lock = masters.get_red_lock(f"{prefix}:{i}")
        while time.monotonic() < stop:
            try:
                await lock.lock(lease_time=10)
                await asyncio.sleep(0.001)
                await lock.unlock()
            except Exception:
                errors += 1
                continue
            pairs += 1

    began = time.monotonic()
    await asyncio.gather(*(worker(i) for i in range(tasks)))
    elapsed = time.monotonic() - began
    await masters.shutdown()
    for app in apps:
        await app.aclose()
    return {"pairs": pairs / elapsed, "errors": float(errors)}


def scale(urls: list[str], settings: Settings, progress: Progress) -> list[Row]:
    """Scenario 9: see the module docstring."""
    sizes = (1, 256) if settings.quick else (1, 16, 256, 2000, 10_000)
    seconds = 1.0 if settings.quick else 5.0
    peers = ("syncprims", "syncprims-pooled", "redis-py", "script-pair")
    rows: list[Row] = []
    for hot in (False, True):
        layout = "hot" if hot else "distinct"
        for tasks in sizes:
            for peer in peers:
                if peer == "script-pair" and hot:
                    continue  # no waiting: it would fail on a taken lock
                result = asyncio.run(_one(urls[0], peer, tasks, hot, seconds))
                progress(
                    f"  scale        {layout:8s} {tasks:6,d} tasks {peer:16s} "
                    f"{result['pairs']:9,.0f} pairs/s  p50 {result['p50']:7.2f} ms  "
                    f"p99 {result['p99']:8.2f} ms  connections {result['connections']:4.0f}  "
                    f"errors {result['errors']:.0f}"
                )
                scenario = f"scale {layout} {tasks}"
                rows += [
                    Row(scenario, peer, "pairs/s", "pairs/s", (result["pairs"],)),
                    Row(scenario, peer, "pair p50", "ms", (result["p50"],)),
                    Row(scenario, peer, "pair p99", "ms", (result["p99"],)),
                    Row(scenario, peer, "connections", "count", (result["connections"],)),
                    Row(scenario, peer, "failed calls", "count", (result["errors"],)),
                ]
    if len(urls) >= 5:
        repeats = 1 if settings.quick else 3
        red = {"syncprims RedLock x5": 1, "syncprims-pooled RedLock x5": 0}
        runs: dict[str, list[dict[str, Any]]] = {peer: [] for peer in red}
        for repeat in range(repeats):
            for peer, shared in red.items():
                result = asyncio.run(_red_lock(urls[:5], shared, 256, seconds))
                runs[peer].append(result)
                progress(
                    f"  scale        redlock x5 run {repeat + 1}/{repeats}  256 tasks "
                    f"{peer:28s} {result['pairs']:9,.0f} pairs/s  errors {result['errors']:.0f}"
                )
        for peer, done in runs.items():
            rows += [
                Row("scale redlock x5 256", peer, metric, unit, tuple(r[key] for r in done))
                for metric, unit, key in (
                    ("pairs/s", "pairs/s", "pairs"),
                    ("failed calls", "count", "errors"),
                )
            ]
    return rows
