"""One leader at a time under chaos: candidates in several processes (threads of the blocking
face, tasks of the asyncio face) campaign, lead for a while and resign, while a nemesis
kills the leader's process (SIGKILL), freezes it past its lease (SIGSTOP) or deletes the
election's lock under it, and an independent checker reads what happened.

Each candidate logs, with ``time.monotonic()`` (one clock for every process of the host),
when it was elected and every moment it checked ``is_leader()`` and found it true before a
write; each write goes, with the term, to a fenced store of the checker's own (a script
that refuses a term below the highest it has seen and logs what it accepts). The checker
uses nothing of the library:

* no two leaderships overlap: the span from a term's first to its last "I lead" check never
  overlaps another term's, except where the nemesis deleted the lock under the older one
  (a lease lock cannot stop that: the older leader learns it at its next renewal);
* terms strictly increase: of two leaderships one after the other, the later has the higher
  term; each term is one leader's;
* the store accepted terms in increasing order (a frozen leader's late write is refused);
* after each fault a leader is back within a bound (the lease plus a dead candidate's slot).

Run as a script it is one candidate process: ``python -m tests.test_election_chaos '<json>'``.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import redis
import redis.asyncio

import syncprims
import syncprims.asyncio
from syncprims._embedded import RedisServer

pytestmark = pytest.mark.real

LEASE = 2.0  # seconds: the election's lease (the one-hop grant needs at least 2 s)
SECONDS = 24.0  # of chaos
PROCESSES = 4  # candidate processes (even: two threads; odd: two asyncio tasks)
CANDIDATES = 2  # per process

STORE = """
local top = tonumber(redis.call('get', KEYS[1]) or '0')
if tonumber(ARGV[1]) < top then
    return 0
end
redis.call('set', KEYS[1], ARGV[1])
redis.call('rpush', KEYS[2], ARGV[1])
return 1
"""


# -- a candidate process ----------------------------------------------------------------------


class Log:
    """One process's history: JSON lines, one ``os.write`` each (a SIGKILL tears nothing)."""

    def __init__(self, path: str) -> None:
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def __call__(self, ev: str, **fields: Any) -> None:
        record = {"ev": ev, "pid": os.getpid(), "t": time.monotonic(), **fields}
        os.write(self._fd, (json.dumps(record) + "\n").encode())


def _lead_sync(election: Any, store: Any, spec: dict[str, Any], log: Log, who: str) -> None:
    rng = random.Random(who)
    while time.monotonic() < spec["stop_at"]:
        try:
            if not election.campaign(wait_time=1):
                continue
        except syncprims.SyncPrimsError as error:
            log("campaign_error", who=who, err=repr(error))
            time.sleep(0.05)
            continue
        term = election.term
        log("elected", who=who, term=term)
        until = time.monotonic() + rng.uniform(0.05, 0.4)
        while (now := time.monotonic()) < until and election.is_leader():
            log("check", t=now, who=who, term=term)  # the time before is_leader() said so
            accepted = store(keys=spec["store_keys"], args=[term])
            log("write", who=who, term=term, accepted=int(accepted))
            time.sleep(0.01)
        try:
            election.resign()
        except syncprims.SyncPrimsError as error:
            log("resign_error", who=who, err=repr(error))
        log("end", who=who, term=term)


async def _lead_async(election: Any, store: Any, spec: dict[str, Any], log: Log, who: str) -> None:
    rng = random.Random(who)
    while time.monotonic() < spec["stop_at"]:
        try:
            if not await election.campaign(wait_time=1):
                continue
        except syncprims.SyncPrimsError as error:
            log("campaign_error", who=who, err=repr(error))
            await asyncio.sleep(0.05)
            continue
        term = election.term
        log("elected", who=who, term=term)
        until = time.monotonic() + rng.uniform(0.05, 0.4)
        while (now := time.monotonic()) < until and election.is_leader():
            log("check", t=now, who=who, term=term)  # the time before is_leader() said so
            accepted = await store(keys=spec["store_keys"], args=[term])
            log("write", who=who, term=term, accepted=int(accepted))
            await asyncio.sleep(0.01)
        try:
            await election.resign()
        except syncprims.SyncPrimsError as error:
            log("resign_error", who=who, err=repr(error))
        log("end", who=who, term=term)


def candidate_process(spec: dict[str, Any]) -> None:
    """Run ``CANDIDATES`` candidates of the blocking or the asyncio face until ``stop_at``."""
    log = Log(spec["log"])
    pid = os.getpid()
    if spec["face"] == "sync":
        client = syncprims.connect(spec["url"])
        store = redis.Redis.from_url(spec["url"]).register_script(STORE)
        threads = []
        for i in range(CANDIDATES):
            election = client.get_leader_election(
                spec["name"], value=f"{pid}:{i}", lease_time=LEASE
            )
            thread = threading.Thread(
                target=_lead_sync, args=(election, store, spec, log, f"{pid}:{i}")
            )
            thread.start()
            threads.append(thread)
        for thread in threads:
            thread.join()
        client.shutdown()
        return

    async def main() -> None:
        client = await syncprims.asyncio.connect(spec["url"])
        store = redis.asyncio.Redis.from_url(spec["url"]).register_script(STORE)
        elections = [
            client.get_leader_election(spec["name"], value=f"{pid}:{i}", lease_time=LEASE)
            for i in range(CANDIDATES)
        ]
        await asyncio.gather(
            *(_lead_async(e, store, spec, log, f"{pid}:{i}") for i, e in enumerate(elections))
        )
        await client.shutdown()

    asyncio.run(main())


# -- the nemesis and the checker ----------------------------------------------------------------


class Candidates:
    """The candidate processes; a killed one is replaced."""

    def __init__(self, spec: dict[str, Any]) -> None:
        self.spec = spec
        self.procs: list[subprocess.Popen[bytes]] = []
        for i in range(PROCESSES):
            self.spawn(i)

    def spawn(self, i: int) -> None:
        spec = dict(self.spec, face="sync" if i % 2 == 0 else "async")
        proc = subprocess.Popen(
            [sys.executable, "-m", "tests.test_election_chaos", json.dumps(spec)],
            cwd=Path(__file__).resolve().parent.parent,
        )
        if i < len(self.procs):
            self.procs[i] = proc
        else:
            self.procs.append(proc)

    def index(self, pid: int) -> int | None:
        return next((i for i, p in enumerate(self.procs) if p.pid == pid), None)

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGCONT)
        deadline = time.monotonic() + 20
        for proc in self.procs:
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def nemesis(raw: Any, lock: str, candidates: Candidates, stop_at: float) -> list[dict[str, Any]]:
    """Every second or so, hit the current leader: kill its process, freeze it past its
    lease, or delete the lock under it. Returns what it did, with ``time.monotonic()``."""
    rng = random.Random(42)
    faults: list[dict[str, Any]] = []
    kinds = ["kill", "pause", "delete"]
    time.sleep(1.5)
    while time.monotonic() < stop_at - 3 * LEASE:
        value = raw.hget(lock, "value")
        if value is None:
            time.sleep(0.05)
            continue
        pid = int(value.split(b":")[0])
        kind = kinds[len(faults) % 3] if len(faults) < 3 else rng.choice(kinds)
        at = time.monotonic()
        index = candidates.index(pid)
        if kind == "delete":
            raw.delete(lock)
        elif index is None:  # a dead leader's record, until its lease runs out
            time.sleep(0.05)
            continue
        elif kind == "kill":
            os.kill(pid, signal.SIGKILL)
            candidates.procs[index].wait()
            candidates.spawn(index)
        else:
            os.kill(pid, signal.SIGSTOP)
            time.sleep(LEASE + 0.5)
            os.kill(pid, signal.SIGCONT)
        faults.append({"kind": kind, "t": at, "pid": pid})
        time.sleep(rng.uniform(0.8, 1.6))
    return faults


def check(
    events: list[dict[str, Any]], faults: list[dict[str, Any]], log: list[int]
) -> dict[str, Any]:
    """The independent checker (module docstring). Returns its figures; raises on a violation."""
    spans: dict[int, list[float]] = {}  # term -> [first check, last check]
    owner: dict[int, str] = {}
    elected = 0
    for ev in sorted(events, key=lambda e: e["t"]):
        if ev["ev"] == "elected":
            elected += 1
            assert owner.setdefault(ev["term"], ev["who"]) == ev["who"], "a term with two leaders"
        elif ev["ev"] == "check":
            span = spans.setdefault(ev["term"], [ev["t"], ev["t"]])
            span[1] = ev["t"]
    deletes = [f["t"] for f in faults if f["kind"] == "delete"]
    ordered = sorted(spans.items(), key=lambda item: item[1][0])
    excused = 0
    for (t1, (s1, e1)), (t2, (s2, _)) in itertools.pairwise(ordered):
        assert t1 < t2, f"term {t2} led after term {t1}: terms must increase"
        if s2 <= e1:  # overlapping leaderships: only a delete under the older one explains it
            assert any(s1 <= d <= s2 for d in deletes), f"terms {t1} and {t2} overlap"
            excused += 1
    for earlier, later in itertools.pairwise(log):
        assert earlier <= later, "the store accepted a lower term after a higher one"
    gaps: dict[str, float] = {}  # fault kind -> the longest time until a leader wrote again
    for fault in faults:
        starts = [s for s, _ in spans.values() if s > fault["t"]]
        if starts:
            gap = min(starts) - fault["t"]
            gaps[fault["kind"]] = max(gaps.get(fault["kind"], 0.0), gap)
    # a kill: the lease, plus the slot of a candidate that died queued with it; a pause: the
    # lease (the frozen process may also hold a candidate that is granted the leadership)
    assert gaps and max(gaps.values()) < 3 * LEASE + 1.0, f"no leader for long: {gaps}"
    writes = [ev for ev in events if ev["ev"] == "write"]
    return {
        "leaderships": elected,
        "terms_that_wrote": len(spans),
        "faults": {k: sum(f["kind"] == k for f in faults) for k in ("kill", "pause", "delete")},
        "writes": len(writes),
        "refused": sum(not ev["accepted"] for ev in writes),
        "excused_overlaps": excused,
        "longest_gap_s": {kind: round(gap, 3) for kind, gap in gaps.items()},
    }


def test_one_leader_at_a_time_under_chaos(tmp_path: Path) -> None:
    with RedisServer() as server:
        raw = redis.Redis.from_url(server.url)
        name = "chaos-election"
        lock = f"syncprims_election:{{{name}}}"
        stop_at = time.monotonic() + SECONDS
        spec = {
            "url": server.url,
            "name": name,
            "stop_at": stop_at,
            "store_keys": [f"{{{name}}}:fence", f"{{{name}}}:accepted"],
            "log": str(tmp_path / "history.jsonl"),
        }
        candidates = Candidates(spec)
        try:
            faults = nemesis(raw, lock, candidates, stop_at)
        finally:
            candidates.stop()
        lines = (tmp_path / "history.jsonl").read_text().splitlines()
        events = [json.loads(line) for line in lines if line.endswith("}")]
        accepted = [int(term) for term in raw.lrange(f"{{{name}}}:accepted", 0, -1)]
        figures = check(events, faults, accepted)
        print("election chaos:", json.dumps(figures))
        assert figures["leaderships"] >= 20
        assert all(figures["faults"][kind] >= 1 for kind in ("kill", "pause", "delete"))
        raw.close()


def test_the_checker_sees_overlaps_and_terms_that_go_back() -> None:
    def ev(kind: str, t: float, term: int, who: str = "w") -> dict[str, Any]:
        return {"ev": kind, "t": t, "term": term, "who": who, "accepted": 1}

    fault = [{"kind": "kill", "t": 0.5}]
    good = [ev("elected", 0, 5), ev("check", 0.1, 5), ev("check", 1.0, 6, "v")]
    assert check(good, fault, [5, 6])["terms_that_wrote"] == 2
    overlap = [*good, ev("check", 1.1, 5)]  # term 5 still "leads" after term 6 began
    with pytest.raises(AssertionError, match="overlap"):
        check(overlap, fault, [5, 6])
    excused = [{"kind": "delete", "t": 0.5}]  # unless the lock was deleted under it
    assert check(overlap, excused, [5, 6])["excused_overlaps"] == 1
    with pytest.raises(AssertionError, match="increase"):
        check([ev("check", 0.1, 6), ev("check", 1.0, 5, "v")], fault, [6])
    with pytest.raises(AssertionError, match="two leaders"):
        check([ev("elected", 0, 5), ev("elected", 1, 5, "v")], fault, [])
    with pytest.raises(AssertionError, match="lower term"):
        check(good, fault, [6, 5])


if __name__ == "__main__":
    candidate_process(json.loads(sys.argv[1]))
