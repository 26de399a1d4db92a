"""Scenarios 5 and 8 of ``syncprims bench``: RedLock on five masters, next to one master,
the raw EVALSHA fan-out and pottery (``redlock``), and with a minority of its masters frozen
(``redlock_frozen``). Speed is reported, never asserted (``docs/benchmarks.md``).
"""

from __future__ import annotations

import contextlib
import time
from typing import Any

from syncprims.bench.peers import open_peer
from syncprims.bench.scenarios import (
    Progress,
    Row,
    Settings,
    key_for,
    per_peer,
    present,
    quantile,
)

__all__ = ["REDLOCK", "redlock", "redlock_frozen"]


# -- 5: RedLock on 5 masters vs 1, next to pottery ------------------------------------------------


REDLOCK = [
    "syncprims RedLock",
    "raw EVALSHA fan-out x1",
    "syncprims RedLock x5",
    "raw EVALSHA fan-out x5",
    "pottery Redlock",
    "pottery Redlock x5",
]


def _latency_and_rate(lock: Any, seconds: float) -> tuple[float, float]:
    for _ in range(100):
        lock.acquire()
        lock.release()
    samples: list[float] = []
    start = time.perf_counter()
    deadline = start + seconds
    while True:
        began = time.perf_counter()
        lock.acquire()
        samples.append((time.perf_counter() - began) * 1000)
        lock.release()
        now = time.perf_counter()
        if now >= deadline:
            samples.sort()
            return quantile(samples, 0.5), len(samples) / (now - start)


def redlock(urls: list[str], settings: Settings, progress: Progress) -> list[Row]:
    """Scenario 5: RedLock on 5 masters vs 1, uncontended: acquire p50 and pairs/s."""
    if len(urls) < 5:
        raise ValueError("the redlock scenario needs 5 masters")

    def measure(peer: str) -> tuple[float, float]:
        with contextlib.closing(open_peer(peer, urls)) as session:
            return _latency_and_rate(session.lock(key_for("red")), settings.seconds)

    figures = [
        ("acquire p50", "ms", "acquire p50 {:6.3f} ms"),
        ("pairs/s", "1/s", "{:>8,.0f} pairs/s"),
    ]
    return per_peer(
        "redlock", present(REDLOCK, progress), measure, settings, progress, figures=figures
    )


# -- 8: RedLock with a frozen minority -------------------------------------------------------------


def _pair_median(lock: Any, pairs: int) -> float:
    """Median ms of ``pairs`` acquire+release pairs."""
    samples = []
    for _ in range(pairs):
        began = time.perf_counter()
        lock.lock()
        lock.unlock()
        samples.append((time.perf_counter() - began) * 1000)
    samples.sort()
    return quantile(samples, 0.5)


def redlock_frozen(urls: list[str], settings: Settings, progress: Progress) -> list[Row]:
    """Scenario 8: RedLock x5, default configuration, with 0, 1 and 2 of its masters frozen
    (SIGSTOP): the median acquire+release pair. Five embedded servers of its own (they are
    paused), whatever ``urls`` is."""
    import syncprims
    from syncprims._embedded import RedisServer

    pairs = max(20, int(200 * settings.seconds))
    medians: dict[int, list[float]] = {0: [], 1: [], 2: []}
    for repeat in range(settings.repeats):
        servers: list[RedisServer] = []
        try:
            while len(servers) < 5:
                servers.append(RedisServer(end_with_parent=True))
            with syncprims.connect_many([server.url for server in servers]) as masters:
                lock = masters.get_red_lock(key_for("frozen"))
                _pair_median(lock, 20)  # every connection open
                for frozen in (0, 1, 2):
                    for server in servers[:frozen]:
                        server.pause()
                    try:
                        median = _pair_median(lock, pairs)
                    finally:
                        for server in servers[:frozen]:
                            server.resume()
                    medians[frozen].append(median)
                    progress(
                        f"  redlock-frozen run {repeat + 1}/{settings.repeats}  {frozen} of 5 "
                        f"frozen  pair p50 {median:8.3f} ms"
                    )
                    time.sleep(0.1)
        finally:
            for server in servers:
                server.stop()
    return [
        Row("redlock-frozen", f"syncprims RedLock x5, {n} frozen", "pair p50", "ms", tuple(v))
        for n, v in medians.items()
    ]
