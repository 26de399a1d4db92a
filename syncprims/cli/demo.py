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
import logging
import math
import multiprocessing
import os
import random
import sys
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any, TextIO

import attrs

from syncprims import redis_from_url as plain_client

__all__ = ["DemoResult", "Hold", "analyse", "run_demo"]

PRIMITIVES = ("lock", "fair", "rw", "redlock", "semaphore")
READ_HOLD = 0.001
"""Seconds a reader of ``--primitive rw`` stays inside, so that readers visibly share."""


@attrs.frozen
class Hold:
    """One critical section: who held the lock, and when (``time.monotonic_ns``).

    ``requested_ns`` is when the holder called ``lock()`` (0 when not recorded); ``mode`` is
    ``"x"`` for an exclusive lock, ``"r"``/``"w"`` for the sides of a read-write lock.
    """

    worker: int
    thread: int
    acquired_ns: int
    released_ns: int
    requested_ns: int = 0
    mode: str = "x"

    @property
    def exclusive(self) -> bool:
        """Whether nothing else may overlap this hold (a read or a semaphore permit may)."""
        return self.mode in ("x", "w")


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
    writes: int | None = None
    readers_mean: float | None = None
    readers_max: int | None = None
    writer_wait_p50_ms: float | None = None
    writer_wait_max_ms: float | None = None
    read_ratio: float | None = None
    masters: int | None = None
    quorum_lost: int | None = None
    permits: int | None = None
    max_concurrency: int | None = None
    permits_left: int | None = None

    @property
    def rate(self) -> float:
        """Acquisitions per second."""
        return self.acquisitions / self.seconds if self.seconds > 0 else 0.0

    @property
    def ok(self) -> bool:
        """Exclusion held: no lost update, no forbidden overlap (semaphore: never more
        holders than permits, and every permit back at the end)."""
        if self.permits is not None:
            return (self.max_concurrency or 0) <= self.permits and self.permits_left == self.permits
        expected = self.acquisitions if self.writes is None else self.writes
        return self.counter == expected and self.overlaps == 0

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
    active: list[Hold] = []  # holds not yet ended when the current one started
    for current in ordered:
        active = [h for h in active if h.released_ns > current.acquired_ns]
        if active and (current.exclusive or any(h.exclusive for h in active)):
            overlaps += 1
        active.append(current)
    handoffs: list[float] = []
    for previous, current in itertools.pairwise(ordered):
        if current.acquired_ns >= previous.released_ns and (current.worker, current.thread) != (
            previous.worker,
            previous.thread,
        ):
            handoffs.append((current.acquired_ns - previous.released_ns) / 1e6)
    handoffs.sort()
    return overlaps, handoffs


def reader_concurrency(holds: list[Hold], mode: str = "r") -> tuple[float, int] | None:
    """(mean, max) holders of ``mode`` inside while any is inside; ``None`` without any."""
    events: list[tuple[int, int]] = []
    for h in holds:
        if h.mode == mode:
            events += [(h.acquired_ns, 1), (h.released_ns, -1)]
    if not events:
        return None
    events.sort(key=lambda e: (e[0], e[1]))
    inside = peak = 0
    busy = weighted = 0
    last = events[0][0]
    for at, delta in events:
        if inside > 0:
            busy += at - last
            weighted += inside * (at - last)
        inside += delta
        peak = max(peak, inside)
        last = at
    return (weighted / busy if busy else 1.0), peak


@attrs.frozen
class _Job:
    """What one worker process does (picklable, for the spawn start method)."""

    urls: tuple[str, ...]
    primitive: str
    lock_name: str
    counter_key: str
    worker: int
    threads: int
    seconds: float
    read_ratio: float = 0.9
    permits: int = 3


class _PermitAsLock:
    """One semaphore permit behind the lock()/unlock() the demo loop calls."""

    def __init__(self, semaphore: Any) -> None:
        self._semaphore = semaphore

    def lock(self) -> None:
        self._semaphore.acquire()

    def unlock(self) -> None:
        self._semaphore.release()


def _worker(job: _Job, ready: Any, start: Any, progress: Any, results: Any) -> None:

    import syncprims

    worker, seconds = job.worker, job.seconds
    lock_name, counter_key = job.lock_name, job.counter_key
    # Failures (a master killed on purpose) are part of the show: errors are reported below.
    logging.getLogger("syncprims").setLevel(logging.ERROR)
    if job.primitive == "redlock":
        masters = syncprims.connect_many(job.urls)
        close = masters.shutdown
    else:
        client = syncprims.connect(job.urls[0])
        close = client.shutdown
    raw = plain_client(job.urls[0])
    holds: list[Hold] = []
    errors: list[str] = []
    lost = [0]  # redlock: unlocks that found less than a quorum (masters were killed)
    mutex = threading.Lock()

    def run(thread: int) -> None:
        rng = random.Random(worker * 1000 + thread)
        sides: dict[str, Any]
        if job.primitive == "semaphore":
            sides = {"s": _PermitAsLock(client.get_semaphore(lock_name))}
        elif job.primitive == "redlock":
            sides = {"x": masters.get_red_lock(lock_name)}
        elif job.primitive == "rw":
            rw = client.get_read_write_lock(lock_name)
            sides = {"r": rw.read_lock(), "w": rw.write_lock()}
        else:
            exclusive = client.get_fair_lock(lock_name) if job.primitive == "fair" else None
            sides = {"x": exclusive or client.get_lock(lock_name)}
        local: list[Hold] = []
        try:
            stop = time.monotonic() + seconds
            while time.monotonic() < stop:
                mode = "s" if job.primitive == "semaphore" else "x"
                if job.primitive == "rw":
                    mode = "r" if rng.random() < job.read_ratio else "w"
                lock = sides[mode]
                requested = time.monotonic_ns()
                lock.lock()
                acquired = time.monotonic_ns()
                if mode in ("r", "s"):
                    raw.get(counter_key)
                    time.sleep(READ_HOLD)
                else:
                    value = int(raw.get(counter_key) or 0)
                    raw.set(counter_key, value + 1)
                released = time.monotonic_ns()
                try:
                    lock.unlock()
                except syncprims.LockNotHeldError:
                    if job.primitive != "redlock":
                        raise
                    # A killed master held part of this holder's quorum: what is left is a
                    # minority, which nobody else can outvote, so exclusion held anyway.
                    lost[0] += 1
                local.append(Hold(worker, thread, acquired, released, requested, mode))
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
    results.put(([attrs.astuple(h) for h in holds], errors, lost[0]))
    close()
    raw.close()


def run_demo(
    url: str | Sequence[str],
    *,
    primitive: str = "lock",
    processes: int = 4,
    threads: int = 2,
    seconds: float = 10.0,
    server: str = "",
    out: TextIO | None = None,
    progress_interval: float = 1.0,
    read_ratio: float = 0.9,
    midway: Callable[[], str] | None = None,
    permits: int = 3,
) -> DemoResult:
    """Run the contention demo against ``url`` and return what it measured.

    Args:
        url: the Redis server; for ``"redlock"``, one URL per master.
        primitive: ``"lock"`` (RLock), ``"fair"`` (FairLock), ``"rw"`` (ReadWriteLock) or
            ``"redlock"`` (RedLock over the masters; the counter lives on the first).
        processes: worker processes (>= 1).
        threads: threads per process (>= 1).
        seconds: how long the workers contend.
        server: a description of the server, for the report.
        out: where progress lines go (``None``: nowhere).
        progress_interval: seconds between progress lines.
        read_ratio: with ``"rw"``, the share of critical sections that only read.
        midway: called once half way through the run (e.g. to kill masters); its return
            value is printed.
        permits: with ``"semaphore"``, how many permits the semaphore has.

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
    if not 0 <= read_ratio <= 1:
        raise ValueError("read_ratio must be between 0 and 1")
    if permits < 1:
        raise ValueError("permits must be at least 1")

    urls = [url] if isinstance(url, str) else list(url)
    if not urls:
        raise ValueError("no Redis URL")
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
                _Job(
                    tuple(urls),
                    primitive,
                    lock_name,
                    counter_key,
                    w,
                    threads,
                    seconds,
                    read_ratio,
                    permits,
                ),
                ready,
                start,
                progress,
                results,
            ),
            daemon=True,
        )
        for w in range(processes)
    ]
    if primitive == "semaphore":
        import syncprims

        with syncprims.connect(urls[0]) as setup:
            setup.get_semaphore(lock_name).try_set_permits(permits)
    for p in workers:
        p.start()
    for _ in workers:
        if not ready.acquire(timeout=60):
            raise RuntimeError("a worker process did not start within 60 s")
    emit = _printer(out)
    emit(f"{processes} processes x {threads} threads contend for {primitive} {lock_name!r}")
    started = time.monotonic()
    start.set()
    collected: list[tuple[list[tuple[Any, ...]], list[str], int]] = []
    last = 0
    while len(collected) < processes:
        try:
            collected.append(results.get(timeout=progress_interval))
            continue
        except Exception:  # queue.Empty: time for a progress line
            pass
        elapsed = time.monotonic() - started
        if midway is not None and elapsed >= seconds / 2:
            emit(f"  {elapsed:5.1f} s  {midway()}")
            midway = None
        count = progress.value
        emit(
            f"  {elapsed:5.1f} s  {count:>9,} acquisitions  {count - last:>7,} in the last interval"
        )
        last = count
        if elapsed > seconds + 60:
            raise RuntimeError("workers did not finish within 60 s of the end of the run")
    for p in workers:
        p.join(10)
    errors = [e for _, errs, _ in collected for e in errs]
    if errors:
        raise RuntimeError("worker failures: " + "; ".join(errors[:5]))
    holds = [Hold(*h) for records, _, _ in collected for h in records]
    quorum_lost = sum(n for _, _, n in collected)
    raw = plain_client(urls[0])
    counter = int(raw.get(counter_key) or 0)
    raw.delete(counter_key)
    raw.close()
    overlaps, handoffs = analyse(holds)
    extra: dict[str, Any] = {}
    if primitive == "semaphore":
        import syncprims

        with syncprims.connect(urls[0]) as check:
            semaphore = check.get_semaphore(lock_name)
            left = semaphore.available_permits()
            semaphore.delete()
        concurrency = reader_concurrency(holds, "s")
        extra = {
            "permits": permits,
            "max_concurrency": concurrency[1] if concurrency else 0,
            "permits_left": left,
        }
    if primitive == "redlock":
        extra = {"masters": len(urls), "quorum_lost": quorum_lost}
    if primitive == "rw":
        writes = [h for h in holds if h.mode == "w"]
        waits = sorted((h.acquired_ns - h.requested_ns) / 1e6 for h in writes)
        concurrency = reader_concurrency(holds)
        extra = {
            "writes": len(writes),
            "readers_mean": concurrency[0] if concurrency else None,
            "readers_max": concurrency[1] if concurrency else None,
            "writer_wait_p50_ms": _percentile(waits, 0.5),
            "writer_wait_max_ms": waits[-1] if waits else None,
            "read_ratio": read_ratio,
        }
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
        server=server or ", ".join(urls),
        fifo_fraction=fifo_fraction(holds),
        **extra,
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

    if result.permits is not None:
        counted = f"{result.counter:,} (read only: holders share the semaphore)"
    elif result.writes is None:
        counted = f"{result.counter:,} (critical sections: {result.acquisitions:,})"
    else:
        counted = f"{result.counter:,} (write sections: {result.writes:,})"
    rows = [
        ("server", result.server),
        ("primitive", result.primitive),
        ("workers", f"{result.processes} processes x {result.threads} threads"),
        ("acquisitions", f"{result.acquisitions:,} in {result.seconds:g} s"),
        ("acquisitions/s", f"{result.rate:,.0f}"),
        ("handoffs", f"{result.handoffs:,} (lock passed between different workers)"),
        ("handoff p50", ms(result.handoff_p50_ms)),
        ("handoff p99", ms(result.handoff_p99_ms)),
        ("counter", counted),
        ("overlapping holds", f"{result.overlaps} (forbidden overlaps)"),
    ]
    if result.fifo_fraction is not None:
        fifo = f"{100 * result.fifo_fraction:.1f}% of consecutive acquisitions in request order"
        rows.append(("FIFO order", fifo))
    if result.permits is not None:
        rows.append(
            (
                "holders at once",
                f"max {result.max_concurrency} (permits: {result.permits}); "
                f"permits back at the end: {result.permits_left}",
            )
        )
    if result.masters is not None:
        rows.append(("masters", f"{result.masters} (a majority: {result.masters // 2 + 1})"))
        rows.append(
            (
                "quorum lost",
                f"{result.quorum_lost} unlocks found less than a majority held "
                "(part of it was on a killed master)",
            )
        )
    if result.writes is not None:
        reads = result.acquisitions - result.writes
        rows.append(
            (
                "reads / writes",
                f"{reads:,} / {result.writes:,} (read ratio {result.read_ratio:g}; "
                f"a reader stays {READ_HOLD * 1000:g} ms)",
            )
        )
        if result.readers_mean is not None:
            rows.append(
                (
                    "readers inside",
                    f"mean {result.readers_mean:.2f} while any is inside, max {result.readers_max}",
                )
            )
        waits = f"p50 {ms(result.writer_wait_p50_ms)}, max {ms(result.writer_wait_max_ms)}"
        rows.append(("writer wait", waits))
    width = max(len(k) for k, _ in rows)
    print(file=out)
    for key, value in rows:
        print(f"  {key:<{width}}  {value}", file=out)
    kind = "mutual exclusion"
    if result.writes is not None:
        kind = "writer exclusivity"
    elif result.permits is not None:
        kind = "at most N holders, permits conserved"
    print(f"\n{kind}: {'OK' if result.ok else 'VIOLATED'}", file=out)


def main(args: Any) -> int:
    """The ``demo`` subcommand."""
    from syncprims._embedded import EmbeddedServer, RedisServer, start_embedded

    out = sys.stdout
    urls: list[str] = list(args.url or [])
    if not urls and os.environ.get("REDIS_URL"):
        urls = [os.environ["REDIS_URL"]]
    wanted = args.masters if args.primitive == "redlock" else 1
    embedded: list[EmbeddedServer] = []
    midway: Callable[[], str] | None = None
    try:
        if urls:
            server = ", ".join(urls)
            print(f"Using Redis at {server}", file=out)
        else:
            embedded = [start_embedded() for _ in range(wanted)]
            urls = [e.url for e in embedded]
            server = embedded[0].description + (f" (x{wanted})" if wanted > 1 else "")
            print(f"No --url or REDIS_URL given: started an embedded {server}", file=out)
            victims = embedded[len(embedded) - (wanted - 1) // 2 :] if wanted > 2 else []
            if victims:

                def midway() -> str:
                    for victim in victims:  # SIGKILL a redis-server; stop a fakeredis one
                        (victim.kill if isinstance(victim, RedisServer) else victim.stop)()
                    return (
                        f"killed {len(victims)} of {wanted} masters "
                        f"({', '.join(v.url for v in victims)}); the RedLock keeps working"
                    )

        if args.primitive == "redlock" and len(urls) < 2:
            print("note: a RedLock over a single master is just a lock", file=out)
        result = run_demo(
            urls,
            primitive=args.primitive,
            read_ratio=args.read_ratio,
            processes=args.processes,
            threads=args.threads,
            seconds=args.seconds,
            server=server,
            out=out,
            midway=midway,
            permits=args.permits,
        )
    finally:
        for e in embedded:
            e.stop()
    report(result, out)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(result.as_dict(), f, indent=2)
    return 0 if result.ok else 1
