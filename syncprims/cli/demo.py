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

import json
import logging
import math
import multiprocessing
import queue
import random
import signal
import sys
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from types import SimpleNamespace
from typing import Any, TextIO

import attrs

import syncprims
from syncprims._embedded import EmbeddedServer, RedisServer, exit_with_parent, start_embedded
from syncprims._protocol.kinds import KINDS, make
from syncprims._transport.sources import client_from_url
from syncprims.bench.history import Hold, analyse, fifo_fraction, percentile, reader_concurrency
from syncprims.cli._common import CommandError, checked_redis, default_url, redact

__all__ = ["DemoResult", "report", "run_demo"]

PRIMITIVE_HELP = {kind.name: kind.demo for kind in KINDS.values() if kind.demo}
"""What ``--primitive`` takes, each with its description (the table of kinds)."""
PRIMITIVES = tuple(PRIMITIVE_HELP)
PROGRESS_INTERVAL = 1.0
"""Seconds between two progress lines."""
STOP_GRACE = 15.0
"""Seconds the workers get to finish their critical sections after Ctrl-C."""
READ_HOLD = 0.001
"""Seconds a reader of ``--primitive rw`` stays inside, so that readers visibly share."""


@attrs.frozen
class DemoResult:
    """What a demo run measured (``seconds``: how long the workers ran, shorter than asked
    when the run was ``interrupted`` by Ctrl-C)."""

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
    masters_killed: int | None = None
    interrupted: bool = False

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


@attrs.frozen
class _Shared:
    """The parent's handles that every worker gets (multiprocessing objects of the spawn
    context): workers say ``ready``, wait for ``start``, stop early when ``stop`` is set,
    count into ``progress`` and put their holds on ``results``."""

    ready: Any
    start: Any
    stop: Any
    progress: Any
    results: Any


def _worker(job: _Job, shared: _Shared) -> None:
    # Ctrl-C in a terminal reaches every process of the group: the parent alone decides.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    exit_with_parent()  # it ends with the demo, even one killed by SIGKILL
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
    raw = client_from_url(job.urls[0])
    holds: list[Hold] = []
    errors: list[str] = []
    lost = [0]  # redlock: unlocks that could not release a quorum (masters were killed)
    mutex = threading.Lock()

    def run(thread: int) -> None:
        rng = random.Random(worker * 1000 + thread)
        sides: dict[str, Any]
        if job.primitive == "semaphore":
            sides = {"s": client.get_semaphore(lock_name)}
        elif job.primitive == "redlock":
            sides = {"x": masters.get_red_lock(lock_name)}
        elif job.primitive == "rw":
            rw = client.get_read_write_lock(lock_name)
            sides = {"r": rw.read_lock(), "w": rw.write_lock()}
        elif job.primitive == "election":
            election = client.get_leader_election(lock_name)
            sides = {"x": SimpleNamespace(acquire=election.campaign, release=election.resign)}
        else:  # a lock kind: made by its row of the table
            sides = {"x": make(KINDS[job.primitive], client, lock_name)}
        local: list[Hold] = []
        try:
            end = time.monotonic() + seconds
            while time.monotonic() < end and not shared.stop.value:
                mode = "s" if job.primitive == "semaphore" else "x"
                if job.primitive == "rw":
                    mode = "r" if rng.random() < job.read_ratio else "w"
                lock = sides[mode]
                requested = time.monotonic_ns()
                lock.acquire()
                acquired = time.monotonic_ns()
                if mode in ("r", "s"):
                    raw.get(counter_key)
                    time.sleep(READ_HOLD)
                else:
                    value = int(raw.get(counter_key) or 0)
                    raw.set(counter_key, value + 1)
                released = time.monotonic_ns()
                try:
                    lock.release()
                except (syncprims.LockNotHeldError, syncprims.TransportError):
                    if job.primitive != "redlock":
                        raise
                    # A killed master held part of this holder's quorum (the release cannot
                    # reach it, or finds too few holding): what is left is a minority, which
                    # nobody else can outvote, so exclusion held anyway.
                    lost[0] += 1
                local.append(Hold(worker, thread, acquired, released, requested, mode))
                with shared.progress.get_lock():
                    shared.progress.value += 1
        except Exception as error:
            errors.append(f"worker {worker} thread {thread}: {error!r}")
        with mutex:
            holds.extend(local)

    shared.ready.release()
    shared.start.wait()
    pool = [threading.Thread(target=run, args=(t,)) for t in range(job.threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    shared.results.put(([attrs.astuple(h) for h in holds], errors, lost[0]))
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
    read_ratio: float = 0.9,
    midway: Callable[[], str] | None = None,
    permits: int = 3,
    masters_killed: int | None = None,
) -> DemoResult:
    """Run the contention demo against ``url`` and return what it measured.

    Ctrl-C (``KeyboardInterrupt`` in the calling thread) stops the workers after their
    current critical section; the result then covers what ran (``interrupted`` is true). A
    second Ctrl-C while they stop terminates them and raises ``KeyboardInterrupt``.

    Args:
        url: the Redis server; for ``"redlock"``, one URL per master.
        primitive: a key of :data:`PRIMITIVE_HELP`, which says what each is (a
            ``"redlock"``'s counter lives on the first master).
        processes: worker processes (>= 1).
        threads: threads per process (>= 1).
        seconds: how long the workers contend.
        server: a description of the server, for the report.
        out: where progress lines go (``None``: nowhere).
        read_ratio: with ``"rw"``, the share of critical sections that only read.
        midway: called once half way through the run (e.g. to kill masters); its return
            value is printed.
        permits: with ``"semaphore"``, how many permits the semaphore has.
        masters_killed: with ``"redlock"``, how many masters ``midway`` kills (for the report).

    Raises:
        ValueError: a bad argument.
        RuntimeError: a worker failed, or the workers did not start or stop in time.
        KeyboardInterrupt: a second Ctrl-C while the workers were stopping.
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
    lock_name = f"syncprims:demo:{uuid.uuid4().hex[:8]}"
    counter_key = f"{lock_name}:counter"
    job = _Job(
        tuple(urls), primitive, lock_name, counter_key, 0, threads, seconds, read_ratio, permits
    )
    if primitive == "semaphore":
        with syncprims.connect(urls[0]) as setup:
            setup.get_semaphore(lock_name).try_set_permits(permits)
    collected, ran = _contend(job, processes, _printer(out), midway)
    errors = [e for _, errs, _ in collected for e in errs]
    if errors:
        raise RuntimeError("worker failures: " + "; ".join(errors[:5]))
    holds = [Hold(*h) for records, _, _ in collected for h in records]
    raw = client_from_url(urls[0])
    counter = int(raw.get(counter_key) or 0)
    raw.delete(counter_key)
    raw.close()
    overlaps, handoffs = analyse(holds)
    interrupted = ran < seconds
    return DemoResult(
        primitive=primitive,
        processes=processes,
        threads=threads,
        seconds=round(ran, 3) if interrupted else seconds,
        acquisitions=len(holds),
        counter=counter,
        overlaps=overlaps,
        handoffs=len(handoffs),
        handoff_p50_ms=percentile(handoffs, 0.50),
        handoff_p99_ms=percentile(handoffs, 0.99),
        server=server or ", ".join(redact(u) for u in urls),
        fifo_fraction=fifo_fraction(holds),
        interrupted=interrupted,
        **_extra(job, holds, sum(n for _, _, n in collected), masters_killed),
    )


Collected = list[tuple[list[tuple[Any, ...]], list[str], int]]


def _contend(
    job: _Job,
    processes: int,
    emit: Callable[[str], None],
    midway: Callable[[], str] | None,
) -> tuple[Collected, float]:
    """Run ``processes`` workers of ``job`` to the end (:func:`_collect`); whatever ends
    this (SIGTERM, a second Ctrl-C), no worker is left running.

    Returns:
        What the workers sent, and how long they ran, seconds.
    """
    ctx = multiprocessing.get_context("spawn")
    shared = _Shared(
        ready=ctx.Semaphore(0),
        start=ctx.Event(),
        stop=ctx.RawValue("b", 0),  # set by the parent on Ctrl-C; read without a lock
        progress=ctx.Value("q", 0),
        results=ctx.Queue(),
    )
    workers = [
        ctx.Process(target=_worker, args=(attrs.evolve(job, worker=w), shared), daemon=True)
        for w in range(processes)
    ]
    try:
        # Started with SIGINT ignored, which they keep: Ctrl-C never reaches a worker.
        default = signal.signal(signal.SIGINT, signal.SIG_IGN)
        try:
            for p in workers:
                p.start()
        finally:
            signal.signal(signal.SIGINT, default)
        for _ in workers:
            if not shared.ready.acquire(timeout=60):
                raise RuntimeError("a worker process did not start within 60 s")
        permits = f"the {job.permits} permits of semaphore"
        noun = permits if job.primitive == "semaphore" else job.primitive
        emit(f"{_workers(processes, job.threads)} contend for {noun} {job.lock_name!r}")
        done = _collect(shared, emit, seconds=job.seconds, processes=processes, midway=midway)
        for p in workers:
            p.join(10)
    finally:
        alive = [p for p in workers if p.is_alive()]
        for p in alive:
            p.terminate()
        for p in alive:
            p.join(5)
            if p.is_alive():
                p.kill()
    return done


def _collect(
    shared: _Shared,
    emit: Callable[[str], None],
    *,
    seconds: float,
    processes: int,
    midway: Callable[[], str] | None,
) -> tuple[Collected, float]:
    """Start the workers and print progress until every one has sent its holds; on Ctrl-C,
    tell them to stop.

    Returns:
        What the workers sent, and how long they ran, seconds (``seconds`` unless stopped).
    """
    collected: Collected = []
    last = 0
    ran = seconds
    started = time.monotonic()
    shared.start.set()
    give_up = started + seconds + 60
    while len(collected) < processes:
        try:
            try:
                collected.append(shared.results.get(timeout=PROGRESS_INTERVAL))
                continue
            except queue.Empty:  # time for a progress line
                pass
            elapsed = time.monotonic() - started
            if midway is not None and elapsed >= seconds / 2 and not shared.stop.value:
                emit(f"  {elapsed:5.1f} s  {midway()}")
                midway = None
            count = shared.progress.value
            emit(
                f"  {elapsed:5.1f} s  {count:>9,} acquisitions  "
                f"{count - last:>7,} in the last interval"
            )
            last = count
            if time.monotonic() > give_up:
                raise RuntimeError("the workers did not finish in time")
        except KeyboardInterrupt:
            if shared.stop.value:
                raise  # a second Ctrl-C: the caller terminates the workers
            shared.stop.value = 1
            ran = min(seconds, time.monotonic() - started)
            give_up = time.monotonic() + STOP_GRACE
            emit(
                f"  interrupted after {ran:.1f} s: the workers finish their critical "
                "sections (Ctrl-C again to abandon them)"
            )
    return collected, ran


def _extra(
    job: _Job, holds: list[Hold], quorum_lost: int, masters_killed: int | None
) -> dict[str, Any]:
    """The :class:`DemoResult` fields of ``job.primitive`` alone (the semaphore's are read
    from it, which is then deleted)."""
    if job.primitive == "semaphore":
        with syncprims.connect(job.urls[0]) as check:
            semaphore = check.get_semaphore(job.lock_name)
            left = semaphore.available_permits()
            semaphore.delete()
        concurrency = reader_concurrency(holds, "s")
        return {
            "permits": job.permits,
            "max_concurrency": concurrency[1] if concurrency else 0,
            "permits_left": left,
        }
    if job.primitive == "redlock":
        return {
            "masters": len(job.urls),
            "quorum_lost": quorum_lost,
            "masters_killed": masters_killed or 0,
        }
    if job.primitive == "rw":
        writes = [h for h in holds if h.mode == "w"]
        waits = sorted((h.acquired_ns - h.requested_ns) / 1e6 for h in writes)
        concurrency = reader_concurrency(holds)
        return {
            "writes": len(writes),
            "readers_mean": concurrency[0] if concurrency else None,
            "readers_max": concurrency[1] if concurrency else None,
            "writer_wait_p50_ms": percentile(waits, 0.5),
            "writer_wait_max_ms": waits[-1] if waits else None,
            "read_ratio": job.read_ratio,
        }
    return {}


def _printer(out: TextIO | None) -> Callable[[str], None]:
    def emit(line: str) -> None:
        if out is not None:
            print(line, file=out, flush=True)

    return emit


def report(result: DemoResult, out: TextIO) -> None:
    """Print the summary table and the verdict."""

    def ms(value: float | None) -> str:
        return "n/a" if value is None else f"{value:.3f} ms"

    semaphore = result.permits is not None
    thing = "a permit" if semaphore else "the lock"
    if semaphore:
        counted = f"{result.counter:,} (read only: holders share the semaphore)"
        kind = "at most N holders, permits conserved"
    elif result.writes is None:
        counted = f"{result.counter:,} (critical sections: {result.acquisitions:,})"
        kind = "mutual exclusion"
    else:
        counted = f"{result.counter:,} (write sections: {result.writes:,})"
        kind = "writer exclusivity"
    ran = f"{result.seconds:g} s" + (" (interrupted)" if result.interrupted else "")
    rows = {
        "server": result.server,
        "primitive": result.primitive,
        "workers": _workers(result.processes, result.threads),
        "acquisitions": f"{result.acquisitions:,} in {ran}",
        "acquisitions/s": f"{result.rate:,.0f}",
        "handoffs": f"{result.handoffs:,} ({thing} passed between different workers)",
        "handoff p50": ms(result.handoff_p50_ms),
        "handoff p99": ms(result.handoff_p99_ms),
        "counter": counted,
    }
    if not semaphore:
        rows["overlapping holds"] = f"{result.overlaps} (forbidden overlaps)"
    if result.fifo_fraction is not None:
        fifo = f"{100 * result.fifo_fraction:.1f}% of consecutive acquisitions in request order"
        rows["FIFO order"] = fifo
    if semaphore:
        rows["holders at once"] = (
            f"max {result.max_concurrency} (permits: {result.permits}); "
            f"permits back at the end: {result.permits_left}"
        )
    if result.masters is not None:
        rows["masters"] = f"{result.masters} (a majority: {result.masters // 2 + 1})"
        lost = f"{result.quorum_lost} unlocks could not release a majority"
        if result.masters_killed:
            lost += f" (part of it was on one of the {result.masters_killed} killed masters)"
        rows["quorum lost"] = lost
    if result.writes is not None:
        reads = result.acquisitions - result.writes
        rows["reads / writes"] = (
            f"{reads:,} / {result.writes:,} (read ratio {result.read_ratio:g}; "
            f"a reader stays {READ_HOLD * 1000:g} ms)"
        )
        if result.readers_mean is not None:
            rows["readers inside"] = (
                f"mean {result.readers_mean:.2f} while any is inside, max {result.readers_max}"
            )
        waits = f"p50 {ms(result.writer_wait_p50_ms)}, max {ms(result.writer_wait_max_ms)}"
        rows["writer wait"] = waits
    width = max(len(k) for k in rows)
    print(file=out)
    for key, value in rows.items():
        print(f"  {key:<{width}}  {value}", file=out)
    print(f"\n{kind}: {'OK' if result.ok else 'VIOLATED'}", file=out)


def _workers(processes: int, threads: int) -> str:
    """``4 processes x 2 threads``, in the singular where it is one."""
    return (
        f"{processes} process{'es' if processes != 1 else ''} x "
        f"{threads} thread{'s' if threads != 1 else ''}"
    )


def _describe(servers: Sequence[EmbeddedServer]) -> str:
    """``redis-server 7.0.15 on 127.0.0.1:port``, or with several, every port."""
    if len(servers) == 1:
        return servers[0].description
    kind = servers[0].description.split(" on ")[0]
    return f"{kind} x{len(servers)} on " + ", ".join(s.url.rpartition("//")[2] for s in servers)


def main(args: Any) -> int:
    """The ``demo`` subcommand.

    Raises:
        CommandError: no server could be reached or started (before any worker starts), or
            a worker failed.
    """
    out = sys.stdout
    urls: list[str] = list(args.url or [])
    if not urls and default_url():
        urls = [str(default_url())]
    for url in urls:  # once, here, so that a bad URL is one line and not a worker's traceback
        checked_redis(url).close()
    wanted = args.masters if args.primitive == "redlock" else 1
    embedded: list[EmbeddedServer] = []
    midway: Callable[[], str] | None = None
    victims: list[EmbeddedServer] = []
    try:
        if urls:
            server = ", ".join(redact(u) for u in urls)
            print(f"Using Redis at {server}", file=out)
        else:
            try:
                for _ in range(wanted):
                    embedded.append(start_embedded())
            except (RuntimeError, OSError) as error:
                raise CommandError(f"cannot start an embedded server: {error}") from None
            urls = [e.url for e in embedded]
            server = _describe(embedded)
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
        try:
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
                masters_killed=len(victims) or None,
            )
        except (RuntimeError, syncprims.SyncPrimsError) as error:
            raise CommandError(f"the demo failed: {error}", status=1) from None
    finally:
        for e in embedded:
            e.stop()
    report(result, out)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(result.as_dict(), f, indent=2)
    if result.interrupted:
        return 130
    return 0 if result.ok else 1
