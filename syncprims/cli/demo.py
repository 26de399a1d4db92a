"""``syncprims demo``: processes x threads contend for one lock, with mutual exclusion verified.

Each worker thread loops: acquire the lock; read a Redis counter, add one, write it back (a
deliberately non-atomic read-modify-write); note the hold interval; release. Afterwards:

* the counter must equal the number of critical sections (no lost update);
* sorted by acquire time, no hold interval may start before the previous one ended (the
  intervals use ``time.monotonic_ns()``, one clock for every process on the host; an
  interval ends when the holder *starts* to release, before the lock is actually free, so
  the check has no false positives);
* a handoff is a lock passing between two different workers: its latency is "release
  started" to "the next holder's acquire returned".
"""

from __future__ import annotations

import itertools
import json
import math
import multiprocessing
import os
import sys
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any, TextIO

import attrs

__all__ = ["DemoResult", "Hold", "analyse", "run_demo"]

PRIMITIVES = ("lock", "fair")


@attrs.frozen
class Hold:
    """One critical section: who held the lock, and when (``time.monotonic_ns``).

    ``requested_ns`` is when the holder called ``lock()``; 0 when not recorded.
    """

    worker: int
    thread: int
    acquired_ns: int
    released_ns: int
    requested_ns: int = 0


@attrs.frozen
class DemoResult:
    """What a demo run measured."""

    primitive: str
    processes: int
    threads: int
    seconds: float
    acquisitions: int
    counter: int
    overlaps: int
    handoffs: int
    handoff_p50_ms: float | None
    handoff_p99_ms: float | None
    server: str
    fifo_fraction: float | None = None

    @property
    def rate(self) -> float:
        """Acquisitions per second."""
        return self.acquisitions / self.seconds if self.seconds > 0 else 0.0

    @property
    def ok(self) -> bool:
        """Mutual exclusion held: no lost update, no overlapping holds."""
        return self.counter == self.acquisitions and self.overlaps == 0

    def as_dict(self) -> dict[str, Any]:
        """JSON-friendly form."""
        out = attrs.asdict(self)
        out.update(rate=self.rate, ok=self.ok)
        return out


def _percentile(sorted_values: list[float], q: float) -> float | None:
    if not sorted_values:
        return None
    index = min(len(sorted_values) - 1, max(0, math.ceil(q * len(sorted_values)) - 1))
    return sorted_values[index]


def fifo_fraction(holds: list[Hold]) -> float | None:
    """The share of consecutive acquisitions granted in the order they were requested.

    Sorted by acquire time, a pair is in FIFO order when the later holder also called
    ``lock()`` later. ``None`` without request times.
    """
    ordered = sorted(holds, key=lambda h: h.acquired_ns)
    pairs = [(a, b) for a, b in itertools.pairwise(ordered) if a.requested_ns and b.requested_ns]
    if not pairs:
        return None
    return sum(1 for a, b in pairs if a.requested_ns <= b.requested_ns) / len(pairs)


def analyse(holds: list[Hold]) -> tuple[int, list[float]]:
    """Count overlapping holds and collect handoff latencies (ms) between different workers.

    Returns:
        ``(overlaps, sorted handoff latencies in milliseconds)``.
    """
    ordered = sorted(holds, key=lambda h: h.acquired_ns)
    overlaps = 0
    handoffs: list[float] = []
    for previous, current in itertools.pairwise(ordered):
        if current.acquired_ns < previous.released_ns:
            overlaps += 1
        elif (current.worker, current.thread) != (previous.worker, previous.thread):
            handoffs.append((current.acquired_ns - previous.released_ns) / 1e6)
    handoffs.sort()
    return overlaps, handoffs


@attrs.frozen
class _Job:
    """What one worker process does (picklable, for the spawn start method)."""

    url: str
    primitive: str
    lock_name: str
    counter_key: str
    worker: int
    threads: int
    seconds: float


def _worker(job: _Job, ready: Any, start: Any, progress: Any, results: Any) -> None:
    import redis

    import syncprims

    url, worker, seconds = job.url, job.worker, job.seconds
    lock_name, counter_key = job.lock_name, job.counter_key
    client = syncprims.connect(url)
    raw = redis.Redis.from_url(url)
    holds: list[Hold] = []
    errors: list[str] = []
    mutex = threading.Lock()

    def run(thread: int) -> None:
        lock = (
            client.get_fair_lock(lock_name)
            if job.primitive == "fair"
            else client.get_lock(lock_name)
        )
        local: list[Hold] = []
        try:
            stop = time.monotonic() + seconds
            while time.monotonic() < stop:
                requested = time.monotonic_ns()
                lock.lock()
                acquired = time.monotonic_ns()
                value = int(raw.get(counter_key) or 0)
                raw.set(counter_key, value + 1)
                released = time.monotonic_ns()
                lock.unlock()
                local.append(Hold(worker, thread, acquired, released, requested))
                with progress.get_lock():
                    progress.value += 1
        except Exception as error:
            errors.append(f"worker {worker} thread {thread}: {error!r}")
        with mutex:
            holds.extend(local)

    ready.release()
    start.wait()
    pool = [threading.Thread(target=run, args=(t,)) for t in range(job.threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    results.put(([attrs.astuple(h) for h in holds], errors))
    client.shutdown()
    raw.close()


def run_demo(
    url: str,
    *,
    primitive: str = "lock",
    processes: int = 4,
    threads: int = 2,
    seconds: float = 10.0,
    server: str = "",
    out: TextIO | None = None,
    progress_interval: float = 1.0,
) -> DemoResult:
    """Run the contention demo against ``url`` and return what it measured.

    Args:
        url: the Redis server.
        primitive: ``"lock"`` (RLock).
        processes: worker processes (>= 1).
        threads: threads per process (>= 1).
        seconds: how long the workers contend.
        server: a description of the server, for the report.
        out: where progress lines go (``None``: nowhere).
        progress_interval: seconds between progress lines.

    Raises:
        ValueError: a bad argument.
        RuntimeError: a worker failed.
    """
    if primitive not in PRIMITIVES:
        raise ValueError(f"primitive must be one of {', '.join(PRIMITIVES)}, not {primitive!r}")
    if processes < 1 or threads < 1:
        raise ValueError("processes and threads must be at least 1")
    if not seconds > 0 or math.isinf(seconds):
        raise ValueError("seconds must be a positive finite number")
    import redis

    run_id = uuid.uuid4().hex[:8]
    lock_name = f"syncprims:demo:{run_id}"
    counter_key = f"syncprims:demo:{run_id}:counter"
    ctx = multiprocessing.get_context("spawn")
    ready = ctx.Semaphore(0)
    start = ctx.Event()
    progress = ctx.Value("q", 0)
    results = ctx.Queue()
    workers = [
        ctx.Process(
            target=_worker,
            args=(
                _Job(url, primitive, lock_name, counter_key, w, threads, seconds),
                ready,
                start,
                progress,
                results,
            ),
            daemon=True,
        )
        for w in range(processes)
    ]
    for p in workers:
        p.start()
    for _ in workers:
        if not ready.acquire(timeout=60):
            raise RuntimeError("a worker process did not start within 60 s")
    emit = _printer(out)
    emit(f"{processes} processes x {threads} threads contend for {primitive} {lock_name!r}")
    started = time.monotonic()
    start.set()
    collected: list[tuple[list[tuple[int, int, int, int]], list[str]]] = []
    last = 0
    while len(collected) < processes:
        try:
            collected.append(results.get(timeout=progress_interval))
            continue
        except Exception:  # queue.Empty: time for a progress line
            pass
        elapsed = time.monotonic() - started
        count = progress.value
        emit(
            f"  {elapsed:5.1f} s  {count:>9,} acquisitions  {count - last:>7,} in the last interval"
        )
        last = count
        if elapsed > seconds + 60:
            raise RuntimeError("workers did not finish within 60 s of the end of the run")
    for p in workers:
        p.join(10)
    errors = [e for _, errs in collected for e in errs]
    if errors:
        raise RuntimeError("worker failures: " + "; ".join(errors[:5]))
    holds = [Hold(*h) for records, _ in collected for h in records]
    raw = redis.Redis.from_url(url)
    counter = int(raw.get(counter_key) or 0)
    raw.delete(counter_key)
    raw.close()
    overlaps, handoffs = analyse(holds)
    return DemoResult(
        primitive=primitive,
        processes=processes,
        threads=threads,
        seconds=seconds,
        acquisitions=len(holds),
        counter=counter,
        overlaps=overlaps,
        handoffs=len(handoffs),
        handoff_p50_ms=_percentile(handoffs, 0.50),
        handoff_p99_ms=_percentile(handoffs, 0.99),
        server=server or url,
        fifo_fraction=fifo_fraction(holds),
    )


def _printer(out: TextIO | None) -> Callable[[str], None]:
    def emit(line: str) -> None:
        if out is not None:
            print(line, file=out, flush=True)

    return emit


def report(result: DemoResult, out: TextIO) -> None:
    """Print the summary table and the verdict."""

    def ms(value: float | None) -> str:
        return "n/a" if value is None else f"{value:.3f} ms"

    rows = [
        ("server", result.server),
        ("primitive", result.primitive),
        ("workers", f"{result.processes} processes x {result.threads} threads"),
        ("acquisitions", f"{result.acquisitions:,} in {result.seconds:g} s"),
        ("acquisitions/s", f"{result.rate:,.0f}"),
        ("handoffs", f"{result.handoffs:,} (lock passed between different workers)"),
        ("handoff p50", ms(result.handoff_p50_ms)),
        ("handoff p99", ms(result.handoff_p99_ms)),
        ("counter", f"{result.counter:,} (critical sections: {result.acquisitions:,})"),
        ("overlapping holds", f"{result.overlaps}"),
        (
            "FIFO order",
            "n/a"
            if result.fifo_fraction is None
            else f"{100 * result.fifo_fraction:.1f}% of consecutive acquisitions in request order",
        ),
    ]
    width = max(len(k) for k, _ in rows)
    print(file=out)
    for key, value in rows:
        print(f"  {key:<{width}}  {value}", file=out)
    verdict = "OK" if result.ok else "VIOLATED"
    print(f"\nmutual exclusion: {verdict}", file=out)


def main(args: Any) -> int:
    """The ``demo`` subcommand."""
    from syncprims._embedded import start_embedded

    out = sys.stdout
    url = args.url or os.environ.get("REDIS_URL")
    embedded = None
    if url:
        server = url
        print(f"Using Redis at {url}", file=out)
    else:
        embedded = start_embedded()
        url, server = embedded.url, embedded.description
        print(f"No --url or REDIS_URL given: started an embedded {server}", file=out)
    try:
        result = run_demo(
            url,
            primitive=args.primitive,
            processes=args.processes,
            threads=args.threads,
            seconds=args.seconds,
            server=server,
            out=out,
        )
    finally:
        if embedded is not None:
            embedded.stop()
    report(result, out)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(result.as_dict(), f, indent=2)
    return 0 if result.ok else 1
