"""A network partition with nftables, run inside a private network namespace.

Run by tests/faults/test_partition.py as ``unshare --net python partition_scenario.py``: in
the new namespace only loopback exists, so the nftables rules touch nothing outside. A
redis-server listens on 127.0.0.1 and 127.0.0.2; the holder reaches it through 127.0.0.2,
the contender through 127.0.0.1. Dropping (not rejecting) 127.0.0.2's packets cuts the
holder off silently, the hard case: its calls see no error, only silence.

Prints one JSON object with the timings (seconds from the partition) and outcomes.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
import uuid
from typing import Any

import syncprims
from syncprims._embedded import RedisServer


def nft(script: str) -> None:
    subprocess.run(["nft", "-f", "-"], input=script, text=True, check=True)


def main() -> None:
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    server = RedisServer(args=["--bind", "127.0.0.1 127.0.0.2"])
    out: dict[str, Any] = {}
    name = f"partition:{uuid.uuid4().hex[:8]}"
    lost = threading.Event()
    lost_at: list[float] = []

    def on_lost(_name: str, reason: str) -> None:
        lost_at.append(time.monotonic())
        out["lost_reason"] = reason
        lost.set()

    options: dict[str, Any] = {
        "timeout": 0.3,
        "retry_attempts": 2,
        "retry_delay": (0.05, 0.1),
    }
    query = "?socket_connect_timeout=0.3"
    holder = syncprims.connect(
        f"redis://127.0.0.2:{server.port}{query}", lock_watchdog_timeout=1, **options
    )
    contender = syncprims.connect(f"redis://127.0.0.1:{server.port}{query}", **options)
    try:
        lock = holder.get_lock(name, on_lost=on_lost)
        lock.lock()  # watchdog: 1 s lease, renewed every 1/3 s
        time.sleep(0.5)
        nft(
            "table inet partition {\n"
            "  chain out { type filter hook output priority 0;\n"
            f"    ip daddr 127.0.0.2 tcp dport {server.port} drop\n"
            f"    ip saddr 127.0.0.2 tcp sport {server.port} drop\n"
            "  }\n"
            "}\n"
        )
        cut = time.monotonic()
        theirs = contender.get_lock(name)
        got = theirs.try_lock(wait_time=5, lease_time=30)
        out["contender_acquired"] = got
        out["contender_acquired_after_s"] = time.monotonic() - cut
        out["holder_told_lost"] = lost.wait(5)
        out["holder_told_lost_after_s"] = lost_at[0] - cut if lost_at else None
        out["holder_is_lost"] = lock.is_lost
        started = time.monotonic()
        try:
            lock.is_locked()
            out["holder_call"] = "answered"
        except syncprims.TransportError as error:
            out["holder_call"] = type(error).__name__
        out["holder_call_s"] = time.monotonic() - started
        out["holder_operation_timeout_s"] = holder.operation_timeout
        nft("delete table inet partition\n")  # heal
        try:
            lock.unlock()
            out["holder_unlock_after_heal"] = "unlocked"
        except syncprims.LockNotHeldError:
            out["holder_unlock_after_heal"] = "LockNotHeldError"
        out["contender_still_holds"] = theirs.is_held_by_current_thread()
        theirs.unlock()
    finally:
        holder.shutdown()
        contender.shutdown()
        server.stop()
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
