"""The mutual-exclusion checker shared by every lock kind.

N processes x M threads loop: acquire; read a Redis counter; hold for ``hold`` seconds; write
the counter + 1; note the interval (and the fencing token, for fenced locks); release. A
correct lock gives zero overlapping intervals, a counter equal to the number of critical
sections, and strictly increasing tokens. The self-test runs a deliberately broken lock (a
lease shorter than the critical section) and expects the checker to see it.
"""

from __future__ import annotations

import itertools
import multiprocessing
import threading
import time
import uuid
from typing import Any

import attrs

from syncprims import redis_from_url as plain_client
from syncprims.bench.history import Hold, analyse
from tests import processes

__all__ = ["KINDS", "Plan", "Report", "check"]

KINDS = ("rlock", "fair", "write", "fenced", "multilock", "redlock")


@attrs.frozen
class Plan:
    """What to run."""

    urls: tuple[str, ...]  # one URL; five masters for "redlock"
    kind: str
    processes: int = 3
    threads: int = 2
    seconds: float = 2.0
    hold: float = 0.002
    lease_time: float | None = None  # None: the watchdog


@attrs.frozen
class Report:
    """What the checker saw."""

    sections: int
    counter: int
    overlaps: int
    token_regressions: int
    unlock_errors: int

    @property
    def correct(self) -> bool:
        """Zero overlaps, an exact counter, increasing tokens."""
        return self.overlaps == 0 and self.counter == self.sections and self.token_regressions == 0


def _make(client: Any, masters: Any, kind: str, name: str) -> Any:
    if kind == "rlock":
        return client.get_lock(name)
    if kind == "fair":
        return client.get_fair_lock(name)
    if kind == "write":
        return client.get_read_write_lock(name).write_lock()
    if kind == "fenced":
        return client.get_fenced_lock(name)
    if kind == "multilock":
        return client.get_multi_lock(*(client.get_lock(f"{name}:{i}") for i in range(3)))
    if kind == "redlock":
        return masters.get_red_lock(name)
    raise ValueError(kind)


def _worker(plan: Plan, name: str, worker: int, start: Any, out: Any) -> None:
    import syncprims

    client = syncprims.connect(plan.urls[0])
    masters = syncprims.connect_many(list(plan.urls)) if plan.kind == "redlock" else None
    raw = plain_client(plan.urls[0])
    counter = f"{name}:counter"
    records: list[tuple[int, int, int, int, int]] = []
    unlock_errors = [0]
    mutex = threading.Lock()

    def run(thread: int) -> None:
        lock = _make(client, masters, plan.kind, name)
        stop = time.monotonic() + plan.seconds
        while time.monotonic() < stop:
            token = 0
            if plan.kind == "fenced":
                token = lock.lock_and_get_token(plan.lease_time)
            else:
                lock.lock(plan.lease_time)
            acquired = time.monotonic_ns()
            value = int(raw.get(counter) or 0)
            time.sleep(plan.hold)
            raw.set(counter, value + 1)
            released = time.monotonic_ns()
            try:
                lock.unlock()
            except syncprims.LockNotHeldError:  # the broken lock's lease ran out
                with mutex:
                    unlock_errors[0] += 1
            with mutex:
                records.append((worker, thread, acquired, released, token))

    start.wait()
    pool = [threading.Thread(target=run, args=(t,)) for t in range(plan.threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    out.put((records, unlock_errors[0]))
    client.shutdown()
    if masters is not None:
        masters.shutdown()
    raw.close()


def check(plan: Plan) -> Report:
    """Run the plan and report what was seen (bounded: seconds + 60 s at most)."""
    ctx = multiprocessing.get_context("spawn")
    name = f"check:{plan.kind}:{uuid.uuid4().hex[:8]}"
    start, out = ctx.Event(), ctx.Queue()
    procs = [
        ctx.Process(target=_worker, args=(plan, name, w, start, out), daemon=True)
        for w in range(plan.processes)
    ]
    with processes.ending(procs):
        for p in procs:
            p.start()
        time.sleep(0.5)  # let the workers import and connect
        start.set()
        results = [out.get(timeout=plan.seconds + 60) for _ in procs]
        for p in procs:
            p.join(10)
    records = [r for batch, _ in results for r in batch]
    holds = [Hold(w, t, a, r) for w, t, a, r, _ in records]
    overlaps, _ = analyse(holds)
    tokens = [tok for *_, tok in sorted(records, key=lambda rec: rec[2])]
    regressions = sum(1 for a, b in itertools.pairwise(tokens) if b <= a and b)
    raw = plain_client(plan.urls[0])
    counter = int(raw.get(f"{name}:counter") or 0)
    raw.close()
    return Report(
        sections=len(records),
        counter=counter,
        overlaps=overlaps,
        token_regressions=regressions,
        unlock_errors=sum(n for _, n in results),
    )
