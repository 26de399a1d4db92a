"""What ``lock_synced_replicas=1`` (``WAIT`` after each acquisition) costs: a measurement.

``python -m tests.chaos.replica_cost [--seconds S] [--rounds R]`` starts a server without a
replica and a master with one replica, and on each runs one thread of uncontended
``lock()`` + ``unlock()`` pairs with ``lock_synced_replicas`` 0 and 1, alternating the
settings round by round in the same run; it prints pairs/s (the median of the rounds) and,
where the acquisition fails, how (``ReplicaSyncError`` after ``replica_sync_timeout``).
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid
from typing import Any

import syncprims
from syncprims._embedded import RedisServer

__all__ = ["main", "measure"]


def measure(url: str, synced: int, seconds: float) -> tuple[float, int, float]:
    """Pairs/s for ``seconds``; also the failed acquisitions and the mean failure time."""
    client = syncprims.connect(url, lock_synced_replicas=synced, replica_sync_timeout=1.0)
    lock = client.get_lock(f"cost:{uuid.uuid4().hex[:8]}")
    pairs, failures, failed_time = 0, 0, 0.0
    try:
        lock.lock()
        lock.unlock()  # connected, scripts loaded
    except syncprims.ReplicaSyncError:
        pass
    try:
        start = time.perf_counter()
        while (now := time.perf_counter()) - start < seconds:
            try:
                lock.lock()
            except syncprims.ReplicaSyncError:
                failures += 1
                failed_time += time.perf_counter() - now
                continue
            lock.unlock()
            pairs += 1
        elapsed = time.perf_counter() - start
    finally:
        client.shutdown()
    return pairs / elapsed, failures, failed_time / failures if failures else 0.0


def main(argv: list[str] | None = None) -> int:
    """Print the table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=2.0, help="per round and setting")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    quick = ["--repl-diskless-sync-delay", "0"]
    alone = RedisServer()
    master = RedisServer(args=quick)
    replica = RedisServer(args=[*quick, "--replicaof", "127.0.0.1", str(master.port)])
    try:
        r: Any = syncprims.redis_from_url(master.url)
        while r.execute_command("WAIT", 1, 100) != 1:
            r.set("probe", 1)
        r.close()
        results: dict[tuple[str, int], list[tuple[float, int, float]]] = {}
        for _ in range(args.rounds):
            for label, url in (("no replica", alone.url), ("one replica", master.url)):
                for synced in (0, 1):
                    results.setdefault((label, synced), []).append(
                        measure(url, synced, args.seconds)
                    )
        print("| deployment | lock_synced_replicas | pairs/s (median) | failed acquisitions |")
        print("| --- | --- | --- | --- |")
        for (label, synced), runs in results.items():
            rate = statistics.median(x[0] for x in runs)
            failures = sum(x[1] for x in runs)
            mean_fail = statistics.mean(x[2] for x in runs if x[1]) if failures else 0.0
            failed = f"{failures} (ReplicaSyncError after {mean_fail:.2f} s)" if failures else "0"
            print(f"| {label} | {synced} | {rate:,.0f} | {failed} |")
    finally:
        replica.stop()
        master.stop()
        alone.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
