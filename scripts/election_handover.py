"""Leader election hand-over times (issue 42): after a clean ``resign()``, and after the
leader's process is killed. Not a test: a measurement, printed as a markdown table.

Each candidate is a process of its own (the blocking face) on an embedded redis-server;
every candidate appends ``<event> <time.monotonic()>`` lines to one file (one clock for every
process of the host).

* ``resign``: two candidates take turns: the leader writes ``resign``, resigns; the other,
  queued meanwhile, writes ``elected`` when ``campaign()`` returns. A hand-over is the time
  from the one to the other (the resign's round trip, the grant, the new leader's term).
* ``fair``: the same turns on a FairLock (``lock()``, ``unlock()``): the lock's own hand-over,
  in the same run, for comparison (the election's adds its term script).
* ``crash``: a leader and a queued follower; the leader is SIGKILLed at a random moment of
  its lease's renewal period; a hand-over is the time from the kill to the follower's
  ``elected``. Then a new follower is started (and queued) before the next kill.

Usage: ``python scripts/election_handover.py [--handovers 100] [--lease 2] [--crash-lease 1]
[--crashes 100]``
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any

import redis

import syncprims
from syncprims._embedded import RedisServer

NAME = "handover"


def candidate(spec: dict[str, Any]) -> None:
    """One candidate process: lead ``turns`` times (``None``: until killed)."""
    fd = os.open(spec["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def note(event: str) -> None:
        os.write(fd, f"{event} {time.monotonic()} {os.getpid()}\n".encode())

    with syncprims.connect(spec["url"]) as client:
        election = client.get_leader_election(NAME, lease_time=spec["lease"])
        lock = client.get_fair_lock(f"{NAME}:fair")
        owner = client.new_owner()

        def take() -> None:
            if spec.get("fair"):
                lock.lock(owner=owner)
            else:
                election.campaign()

        def give() -> None:
            if spec.get("fair"):
                lock.unlock(owner=owner)
            else:
                election.resign()

        turns = spec["turns"]
        time.sleep(max(0.0, spec["start_at"] - time.monotonic()))  # both candidates are up
        while turns is None or turns > 0:
            take()
            note("elected")
            if turns is None:
                time.sleep(3600)  # until killed
            time.sleep(0.02)  # the other candidate queues meanwhile
            turns -= 1
            note("resign")
            give()


def spawn(spec: dict[str, Any]) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, __file__, "candidate", json.dumps(spec)])


def events(log: Path) -> list[tuple[str, float, int]]:
    out = []
    for line in log.read_text().splitlines():
        event, at, pid = line.split()
        out.append((event, float(at), int(pid)))
    return out


def resign_handovers(
    url: str, lease: float, count: int, log: Path, *, fair: bool = False
) -> list[float]:
    spec = {
        "url": url,
        "fair": fair,
        "lease": lease,
        "turns": count // 2 + 2,
        "log": str(log),
        "start_at": time.monotonic() + 3,
    }
    procs = [spawn(spec), spawn(spec)]
    for proc in procs:
        proc.wait(timeout=600)
    samples = []
    seen = events(log)
    for (event, at, pid), (following, later, other) in itertools.pairwise(seen):
        if event == "resign" and following == "elected" and other != pid:
            samples.append(later - at)
    return samples[:count]


def queued(raw: redis.Redis, queue: str, bound: float = 30.0) -> None:
    deadline = time.monotonic() + bound
    while raw.llen(queue) < 1:
        if time.monotonic() > deadline:
            raise TimeoutError("the follower never queued")
        time.sleep(0.005)


def crash_handovers(url: str, lease: float, count: int, log: Path) -> list[float]:
    raw = redis.Redis.from_url(url)
    queue = f"redisson_lock_queue:syncprims_election:{{{NAME}}}"
    spec = {"url": url, "lease": lease, "turns": None, "log": str(log), "start_at": 0.0}
    rng = random.Random(1)
    leader = spawn(spec)
    while not log.exists() or "elected" not in log.read_text():
        time.sleep(0.01)
    samples = []
    try:
        for _ in range(count):
            follower = spawn(spec)
            queued(raw, queue)
            time.sleep(rng.uniform(0, lease / 3))  # a random moment of the renewal period
            before = len(events(log))
            killed = time.monotonic()
            os.kill(leader.pid, signal.SIGKILL)
            leader.wait()
            while len(events(log)) == before:
                time.sleep(0.001)
            samples.append(events(log)[before][1] - killed)
            leader = follower
    finally:
        leader.kill()
        leader.wait()
        raw.close()
    return samples


def row(what: str, samples: list[float], lease: float) -> str:
    ms = sorted(s * 1000 for s in samples)
    p99 = ms[min(len(ms) - 1, round(0.99 * (len(ms) - 1)))]
    return (
        f"| {what} | {lease:g} s | {len(ms)} | {statistics.median(ms):.2f} ms | "
        f"{p99:.2f} ms | {ms[-1]:.2f} ms |"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--handovers", type=int, default=100)
    parser.add_argument("--lease", type=float, default=2.0, help="for the resign hand-overs")
    parser.add_argument("--crash-lease", type=float, default=1.0)
    parser.add_argument("--crashes", type=int, default=100, help="0: no crash hand-overs")
    args = parser.parse_args()
    with RedisServer() as server, TemporaryDirectory() as tmp:
        rtt = []
        raw = redis.Redis.from_url(server.url)
        for _ in range(200):
            started = time.monotonic()
            raw.ping()
            rtt.append(time.monotonic() - started)
        resign = resign_handovers(server.url, args.lease, args.handovers, Path(tmp, "r.log"))
        fair = resign_handovers(server.url, 30, args.handovers, Path(tmp, "f.log"), fair=True)
        crash = crash_handovers(server.url, args.crash_lease, args.crashes, Path(tmp, "c.log"))
    print("| hand-over after | lease | n | p50 | p99 | max |")
    print("|---|---|---|---|---|---|")
    print(row("`resign()`", resign, args.lease))
    print(row("a FairLock's `unlock()` (same run, for comparison)", fair, 30))
    if crash:
        print(row("the leader's SIGKILL", crash, args.crash_lease))
    print(f"\n(a PING round trip here: p50 {statistics.median(rtt) * 1000:.3f} ms)")
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["candidate"]:
        candidate(json.loads(sys.argv[2]))
    else:
        sys.exit(main())
