"""What ``lock_synced_replicas`` (``WAIT`` behind each acquisition) costs: a measurement.

``python -m tests.chaos.replica_cost [--seconds S] [--rounds R]`` starts a server without a
replica and a master with one replica, and on each runs one thread of uncontended
``lock()`` + ``unlock()`` pairs: without a replica with ``lock_synced_replicas`` 0 and
``"auto"`` (the default; 1 there fails every acquisition, shown with ``--with-failing``),
with one replica with 0, ``"auto"`` and 1, alternating the settings round by round in the
same run. It prints pairs/s (the median of the rounds), the cost against 0, and, where the
acquisition fails, how (``ReplicaSyncError`` after ``replica_sync_timeout``).
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid
from typing import Any, Literal

import syncprims
from syncprims._embedded import RedisServer
from tests.harness import wait_replica_acks

__all__ = ["main", "measure"]


Synced = int | Literal["auto"]


def measure(url: str, synced: Synced, seconds: float) -> tuple[float, int, float]:
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
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument(
        "--with-failing", action="store_true", help="also 1 without a replica (every acquire fails)"
    )
    args = parser.parse_args(argv)
    quick = ["--repl-diskless-sync-delay", "0"]
    alone = RedisServer()
    master = RedisServer(args=quick)
    replica = RedisServer(args=[*quick, "--replicaof", "127.0.0.1", str(master.port)])
    try:
        r: Any = syncprims.redis_from_url(master.url)
        wait_replica_acks(r)
        r.close()
        alone_settings: list[Synced] = [0, "auto", 1] if args.with_failing else [0, "auto"]
        plan: list[tuple[str, str, Synced]] = [
            *(("no replica", alone.url, s) for s in alone_settings),
            *(("one replica", master.url, s) for s in (0, "auto", 1)),
        ]
        results: dict[tuple[str, Synced], list[tuple[float, int, float]]] = {}
        for _ in range(args.rounds):
            for label, url, synced in plan:
                results.setdefault((label, synced), []).append(measure(url, synced, args.seconds))
        print(
            f"| deployment | lock_synced_replicas | pairs/s (median of {args.rounds}) "
            "| vs 0 | failed acquisitions |"
        )
        print("| --- | --- | --- | --- | --- |")
        base: dict[str, float] = {}
        for (label, synced), runs in results.items():
            rate = statistics.median(x[0] for x in runs)
            if synced == 0:
                base[label] = rate
            versus = "" if synced == 0 else f"{(rate / base[label] - 1) * 100:+.0f}%"
            failures = sum(x[1] for x in runs)
            mean_fail = statistics.mean(x[2] for x in runs if x[1]) if failures else 0.0
            failed = f"{failures} (ReplicaSyncError after {mean_fail:.2f} s)" if failures else "0"
            shown = f'"{synced}"' if synced == "auto" else str(synced)
            print(f"| {label} | {shown} | {rate:,.0f} | {versus} | {failed} |")
    finally:
        replica.stop()
        master.stop()
        alone.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
