"""The benchmark scenarios of ``syncprims bench``.

Every scenario repeats its measurement (``Settings.repeats`` runs) and, within each repeat,
runs every peer one after another, so that the machine's noise hits them alike; the report
gives the median and the spread (min..max) of the runs. Nothing here asserts a speed.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import multiprocessing
import statistics
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import attrs
import redis

from syncprims._embedded import exit_with_parent
from syncprims.bench.history import Hold, analyse
from syncprims.bench.peers import BenchLock, available, open_peer

__all__ = [
    "RUN_TIMES",
    "Figure",
    "Progress",
    "Row",
    "Settings",
    "contended",
    "handoff",
    "key_for",
    "per_peer",
    "present",
    "quantile",
    "rw_writer_wait",
    "uncontended",
    "watchdog_scale",
]

Progress = Callable[[str], None]

Figure = tuple[str, str, str]
"""What a scenario reports of each run: (metric, unit, how a progress line shows the value:
a :meth:`str.format` string)."""

RUN_TIMES = "--quick about 1 minute, the full run about 20 minutes, on a quiet 2-core machine"


@attrs.frozen
class Settings:
    """How long and how often to measure."""

    quick: bool
    repeats: int
    seconds: float  # uncontended measuring window per run
    rounds: int  # handoff rounds per run (peers that wake up by message)
    polling_rounds: int  # handoff rounds per run for peers that poll (~100 ms per round)
    contended_seconds: float
    watchdog_locks: int
    watchdog_seconds: float
    watchdog_timeout: float

    @classmethod
    def full(cls) -> Settings:
        """The full run (:data:`RUN_TIMES`)."""
        return cls(False, 5, 2.0, 300, 30, 5.0, 10_000, 60.0, 30.0)

    @classmethod
    def fast(cls) -> Settings:
        """``--quick`` (under 2 minutes on 2 cores): every scenario and peer, one run each,
        shorter windows, fewer writes and tasks."""
        return cls(True, 1, 0.5, 100, 10, 1.0, 2_000, 6.0, 3.0)


@attrs.frozen
class Row:
    """One peer's figure in one scenario: the per-run values and their summary."""

    scenario: str
    peer: str
    metric: str
    unit: str
    runs: tuple[float, ...]

    @property
    def median(self) -> float:
        """The median of the runs."""
        return statistics.median(self.runs) if self.runs else float("nan")

    @property
    def spread(self) -> tuple[float, float]:
        """(min, max) of the runs."""
        return (min(self.runs), max(self.runs)) if self.runs else (float("nan"), float("nan"))

    def as_dict(self) -> dict[str, Any]:
        """JSON-friendly form."""
        out = attrs.asdict(self)
        out.update(runs=list(self.runs), median=self.median, min=self.spread[0], max=self.spread[1])
        return out


def present(peers: list[str], progress: Progress) -> list[str]:
    out = []
    for peer in peers:
        if available(peer):
            out.append(peer)
        else:
            progress(f"  skipping {peer}: not installed (pip install 'syncprims[bench]')")
    return out


def key_for(prefix: str) -> str:
    return f"bench:{prefix}:{uuid.uuid4().hex[:8]}"


def _worker_context() -> Any:
    """The multiprocessing context of the scenarios' worker processes: forked by a server
    process that imported the bench and its peers once (``forkserver``: a worker is ready
    in milliseconds, where a spawned one first imports redis-py, about 2 s on a busy 2-core
    machine), else spawned. Every measurement starts once all its workers are ready."""
    if "forkserver" not in multiprocessing.get_all_start_methods():  # pragma: no cover
        return multiprocessing.get_context("spawn")
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(["syncprims.bench.scenarios", "redis_lock", "pottery"])
    return ctx


def _ended(processes: list[Any], grace: float) -> None:
    """Give the started ``processes`` ``grace`` seconds (in all) to end, then SIGKILL the
    ones still running (each child also ends by itself once this process is gone:
    :func:`~syncprims._embedded.exit_with_parent`)."""
    deadline = time.monotonic() + grace
    for p in processes:
        if p.pid is not None:
            p.join(max(0.0, deadline - time.monotonic()))
            if p.is_alive():
                p.kill()
                p.join(5)


def per_peer(
    scenario: str,
    peers: list[str],
    measure: Callable[[str], tuple[float, ...]],
    settings: Settings,
    progress: Progress,
    *,
    figures: list[Figure],
) -> list[Row]:
    """``measure(peer)`` for every peer in every repeat, one value per figure; the rows,
    figure by figure."""
    runs: dict[str, list[tuple[float, ...]]] = {p: [] for p in peers}
    for repeat in range(settings.repeats):
        for peer in peers:
            values = measure(peer)
            runs[peer].append(values)
            shown = "  ".join(f[2].format(v) for f, v in zip(figures, values, strict=True))
            progress(f"  {scenario:<12} run {repeat + 1}/{settings.repeats}  {peer:<22} {shown}")
    return [
        Row(scenario, p, metric, unit, tuple(values[i] for values in runs[p]))
        for i, (metric, unit, _) in enumerate(figures)
        for p in peers
    ]


@contextlib.contextmanager
def _workers(
    processes: list[Any], grace: float, ready: Any = None, what: str = ""
) -> Iterator[None]:
    """Start the ``processes`` (with ``ready``, a semaphore, wait up to 60 s for each to
    release it) for the body; then :func:`_ended` with ``grace`` seconds, none if it failed."""
    try:
        for p in processes:
            p.start()
        for _ in processes if ready is not None else ():
            if not ready.acquire(timeout=60):
                raise RuntimeError(f"{what} did not start")
        yield
    except BaseException:
        _ended(processes, 0)
        raise
    _ended(processes, grace)


# -- 1 and 7: uncontended pairs per second ----------------------------------------------------


def _pairs_per_second(pairs: Callable[[int], object], seconds: float) -> tuple[float, float]:
    """Pairs per second, and the process's CPU per pair in microseconds (``pairs(n)``: n
    acquire+release pairs)."""
    pairs(200)  # warm up: connections, script cache
    count = 0
    start, cpu = time.perf_counter(), time.process_time()
    deadline = start + seconds
    while True:
        pairs(50)
        count += 50
        now = time.perf_counter()
        if now >= deadline:
            return count / (now - start), (time.process_time() - cpu) / count * 1e6


def _sync_pairs(lock: BenchLock) -> Callable[[int], None]:
    acquire, release = lock.acquire, lock.release

    def pairs(n: int) -> None:
        for _ in range(n):
            acquire()
            release()

    return pairs


def _async_pairs_per_second(url: str, seconds: float) -> tuple[float, float]:
    """:func:`_pairs_per_second` for the asyncio face, a batch of pairs per event loop run."""
    import syncprims.asyncio

    with asyncio.Runner() as runner:
        client = runner.run(syncprims.asyncio.connect(url))
        lock = client.get_lock(key_for("async"))

        async def pairs(n: int) -> None:
            for _ in range(n):
                await lock.lock()
                await lock.unlock()

        rate_and_cpu = _pairs_per_second(lambda n: runner.run(pairs(n)), seconds)
        runner.run(client.shutdown())
    return rate_and_cpu


UNCONTENDED = [  # after "syncprims" and "syncprims (asyncio)", which are always there
    "syncprims FairLock",
    "raw EVALSHA floor",
    "PING floor",
    "redis-py Lock",
    "python-redis-lock",
    "pottery Redlock",
]


def uncontended(urls: list[str], settings: Settings, progress: Progress) -> list[Row]:
    """Scenarios 1 and 7: acquire+release pairs per second from one thread, no contention,
    and the process's CPU per pair (us; the client's own cost, beside the raw floor's)."""
    peers = ["syncprims", "syncprims (asyncio)", *present(UNCONTENDED, progress)]

    def measure(peer: str) -> tuple[float, float]:
        if peer == "syncprims (asyncio)":
            return _async_pairs_per_second(urls[0], settings.seconds)
        with contextlib.closing(open_peer(peer, urls)) as session:
            return _pairs_per_second(_sync_pairs(session.lock(key_for("u"))), settings.seconds)

    figures = [
        ("pairs/s", "1/s", "{:>9,.0f} pairs/s"),
        ("CPU per pair", "us", "{:6.1f} us CPU/pair"),
    ]
    return per_peer("uncontended", peers, measure, settings, progress, figures=figures)


# -- 2: handoff latency between two processes ----------------------------------------------------


POLLING = {"redis-py Lock", "pottery Redlock"}
HANDOFF = [
    "syncprims",
    "syncprims FairLock",
    "python-redis-lock",
    "BLPOP floor",
    "redis-py Lock",
    "pottery Redlock",
]


def _handoff_waiter(peer: str, urls: list[str], key: str, rounds: int, pipe: Any) -> None:
    exit_with_parent()
    session = open_peer(peer, urls)
    lock = session.lock(key)
    token = peer == "BLPOP floor"
    acquired: list[int] = []
    pipe.send("ready")
    for _ in range(rounds):
        pipe.recv()  # the holder holds the lock now
        lock.acquire()
        acquired.append(time.monotonic_ns())
        if not token:
            lock.release()
        pipe.send("done")
    pipe.send(acquired)
    session.close()


def _one_handoff_run(peer: str, urls: list[str], rounds: int) -> tuple[float, float]:
    ctx = _worker_context()
    key = key_for("h")
    session = open_peer(peer, urls)
    lock = session.lock(key)
    token = peer == "BLPOP floor"
    here, there = ctx.Pipe()
    waiter = ctx.Process(target=_handoff_waiter, args=(peer, urls, key, rounds, there), daemon=True)
    with contextlib.closing(session), _workers([waiter], 10):
        if not here.poll(60):
            raise RuntimeError(f"{peer}: the waiter process did not start")
        here.recv()
        released: list[int] = []
        for _ in range(rounds):
            if not token:
                lock.acquire()
            here.send("go")
            time.sleep(0.002)  # the waiter is blocked in acquire by now
            released.append(time.monotonic_ns())
            lock.release()
            if not here.poll(30):
                raise RuntimeError(f"{peer}: a handoff took more than 30 s")
            here.recv()
        acquired = here.recv()
    latencies = sorted((a - r) / 1e6 for a, r in zip(acquired, released, strict=True))
    return quantile(latencies, 0.5), quantile(latencies, 0.99)


def quantile(values: list[float], q: float) -> float:
    return values[min(len(values) - 1, max(0, round(q * len(values)) - 1))]


def handoff(urls: list[str], settings: Settings, progress: Progress) -> list[Row]:
    """Scenario 2: release start (one process) to acquire return (another), p50 and p99."""

    def measure(peer: str) -> tuple[float, float]:
        rounds = settings.polling_rounds if peer in POLLING else settings.rounds
        return _one_handoff_run(peer, urls, rounds)

    figures = [("p50", "ms", "p50 {:8.3f} ms"), ("p99", "ms", "p99 {:8.3f} ms")]
    return per_peer(
        "handoff", present(HANDOFF, progress), measure, settings, progress, figures=figures
    )


# -- 3: contended throughput ---------------------------------------------------------------------


CONTENDED = [
    "syncprims",
    "syncprims FairLock",
    "python-redis-lock",
    "redis-py Lock",
    "pottery Redlock",
    "BLPOP floor",
]


@attrs.frozen
class _Contender:
    peer: str
    urls: list[str]
    key: str
    worker: int
    threads: int
    seconds: float


def _contender(job: _Contender, ready: Any, start: Any, out: Any) -> None:
    """One worker process: ``threads`` threads, each with its own client (as users run it),
    looping acquire -> GET/SET a counter (non-atomic: a lost update shows an overlap) ->
    release."""
    exit_with_parent()
    peer, urls, key, worker, threads, seconds = attrs.astuple(job, recurse=False)
    sessions = [open_peer(peer, urls) for _ in range(threads)]
    counters = [redis.Redis.from_url(urls[0]) for _ in range(threads)]
    holds: list[tuple[int, int, int, int]] = []
    mutex = threading.Lock()

    def run(thread: int) -> None:
        lock = sessions[thread].lock(key)
        counter = counters[thread]
        local = []
        stop = time.monotonic() + seconds
        while time.monotonic() < stop:
            lock.acquire()
            acquired = time.monotonic_ns()
            value = int(counter.get(f"{key}:counter") or 0)
            counter.set(f"{key}:counter", value + 1)
            released = time.monotonic_ns()
            lock.release()
            local.append((worker, thread, acquired, released))
        with mutex:
            holds.extend(local)

    ready.release()
    start.wait()
    pool = [threading.Thread(target=run, args=(t,)) for t in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    out.put(holds)
    for session in sessions:
        session.close()
    for counter in counters:
        counter.close()


def _jain(counts: list[int]) -> float:
    """Jain's fairness index of per-worker counts: 1 when equal, 1/n when one takes all."""
    total = sum(counts)
    squares = sum(c * c for c in counts)
    return total * total / (len(counts) * squares) if squares else 0.0


@attrs.frozen
class _ContendedRun:
    handoffs_per_s: float
    acquisitions_per_s: float
    overlaps: int
    lost_updates: int  # critical sections whose counter update was lost (overlap)
    fairness: float  # Jain's index over the worker threads
    evalsha_per_acquisition: float | None  # Redis INFO commandstats, syncprims peers only


def _commandstats(url: str) -> dict[str, int]:
    client = redis.Redis.from_url(url)
    try:
        stats = client.info("commandstats")
    finally:
        client.close()
    return {k.removeprefix("cmdstat_"): int(v["calls"]) for k, v in stats.items()}


def _one_contended_run(
    peer: str, urls: list[str], seconds: float, processes: int = 4, threads: int = 2
) -> _ContendedRun:
    ctx = _worker_context()
    key = key_for("c")
    if peer == "BLPOP floor":  # the one token
        with redis.Redis.from_url(urls[0]) as r:
            r.lpush(key, 1)
    ready, start, out = ctx.Semaphore(0), ctx.Event(), ctx.Queue()
    workers = [
        ctx.Process(
            target=_contender,
            args=(_Contender(peer, urls, key, w, threads, seconds), ready, start, out),
            daemon=True,
        )
        for w in range(processes)
    ]
    with _workers(workers, 10, ready, f"{peer}: a worker process"):
        before = _commandstats(urls[0])
        start.set()
        batches = [out.get(timeout=seconds + 60) for _ in workers]
        after = _commandstats(urls[0])
    holds = [Hold(*h) for batch in batches for h in batch]
    overlaps, handoffs = analyse(holds)
    with redis.Redis.from_url(urls[0]) as r:
        counted = int(r.get(f"{key}:counter") or 0)
        r.delete(key, f"{key}:counter")
    per_thread = collections.Counter((h.worker, h.thread) for h in holds)
    counts = list(per_thread.values()) + [0] * (processes * threads - len(per_thread))
    evalsha = None
    if peer.startswith("syncprims") and holds:
        evalsha = (after.get("evalsha", 0) - before.get("evalsha", 0)) / len(holds)
    return _ContendedRun(
        len(handoffs) / seconds,
        len(holds) / seconds,
        overlaps,
        len(holds) - counted,
        _jain(counts),
        evalsha,
    )


def contended(urls: list[str], settings: Settings, progress: Progress) -> list[Row]:
    """Scenario 3: 4 processes x 2 threads, each thread with its own client, on one lock,
    with a GET/SET counter as the critical section: acquisitions/s, handoffs between
    workers per second, Jain's fairness over the 8 workers, lost counter updates (must be
    0), and for syncprims the EVALSHA calls per acquisition (``INFO commandstats``: a
    failed acquire attempt is one more). Handoff and the floors: docs/benchmarks.md's names.
    """
    peers = present(CONTENDED, progress)
    runs: dict[str, list[_ContendedRun]] = {p: [] for p in peers}
    for repeat in range(settings.repeats):
        for peer in peers:
            run = _one_contended_run(peer, urls, settings.contended_seconds)
            runs[peer].append(run)
            extra = (
                f"  {run.evalsha_per_acquisition:.1f} EVALSHA/acq"
                if run.evalsha_per_acquisition is not None
                else ""
            )
            progress(
                f"  contended    run {repeat + 1}/{settings.repeats}  {peer:<22} "
                f"{run.acquisitions_per_s:8,.0f} acquisitions/s  {run.handoffs_per_s:8,.0f} "
                f"handoffs/s  Jain {run.fairness:.2f}  overlaps {run.overlaps}  lost updates "
                f"{run.lost_updates}{extra}"
            )
    rows: list[Row] = []
    for p, done in runs.items():
        overlaps = tuple(r.overlaps + r.lost_updates for r in done)
        rows += [
            Row("contended", p, "acquisitions/s", "1/s", tuple(r.acquisitions_per_s for r in done)),
            Row("contended", p, "handoffs/s", "1/s", tuple(r.handoffs_per_s for r in done)),
            Row("contended", p, "Jain fairness", "ratio", tuple(r.fairness for r in done)),
            Row("contended", p, "overlaps", "count", overlaps),
        ]
        calls = [r.evalsha_per_acquisition for r in done if r.evalsha_per_acquisition is not None]
        if calls:
            rows.append(Row("contended", p, "EVALSHA per acquisition", "ratio", tuple(calls)))
    return rows


# -- 6: watchdog scale ----------------------------------------------------------------------------


def _thread_cpu(thread: threading.Thread | None) -> float:
    if thread is None or thread.ident is None:
        return 0.0
    try:
        return time.clock_gettime(time.pthread_getcpuclockid(thread.ident))
    except (AttributeError, OSError):  # not Linux, or the thread is gone
        return 0.0


def _watchdog_child(url: str, settings: Settings, out: Any) -> None:
    import syncprims

    exit_with_parent()
    client = syncprims.connect(url, lock_watchdog_timeout=settings.watchdog_timeout)
    prefix = key_for("wd")
    names = [f"{prefix}:{i}" for i in range(settings.watchdog_locks)]
    for name in names:
        client.get_lock(name).lock()
    watchdog = client._ex.watchdog
    services = client._ex.services._thread
    renewed0, trips0 = watchdog.renewed, watchdog.round_trips
    cpu0, thread_cpu0, wall0 = time.process_time(), _thread_cpu(services), time.monotonic()
    time.sleep(settings.watchdog_seconds)
    wall = time.monotonic() - wall0
    cpu = time.process_time() - cpu0
    thread_cpu = _thread_cpu(services) - thread_cpu0
    renewed, trips = watchdog.renewed - renewed0, watchdog.round_trips - trips0
    raw = redis.Redis.from_url(url)
    pipe = raw.pipeline(transaction=False)
    for name in names:
        pipe.pttl(name)
    ttls = pipe.execute()
    alive = sum(1 for t in ttls if t > 0)
    raw.delete(*names)
    raw.close()
    out.put(
        {
            "locks": len(names),
            "alive": alive,
            "lost": watchdog.lost,
            "renewals": renewed,
            "round_trips": trips,
            "services_cpu_percent": 100 * thread_cpu / wall,
            "process_cpu_percent": 100 * cpu / wall,
        }
    )
    client.shutdown()


def watchdog_scale(urls: list[str], settings: Settings, progress: Progress) -> list[Row]:
    """Scenario 6: N locks held with the watchdog in one process; CPU, batching, leases kept."""
    ctx = _worker_context()
    out = ctx.Queue()
    child = ctx.Process(target=_watchdog_child, args=(urls[0], settings, out), daemon=True)
    progress(
        f"  watchdog     {settings.watchdog_locks:,} locks held for "
        f"{settings.watchdog_seconds:g} s (watchdog timeout {settings.watchdog_timeout:g} s)"
    )
    with _workers([child], 30):
        result = out.get(timeout=settings.watchdog_seconds + 300)
    per_trip = result["renewals"] / result["round_trips"] if result["round_trips"] else 0.0
    progress(
        f"  watchdog     renewals {result['renewals']:,} in {result['round_trips']:,} round trips "
        f"({per_trip:.1f} per trip), services thread CPU {result['services_cpu_percent']:.2f}% "
        f"of a core, alive {result['alive']:,}/{result['locks']:,}, lost {result['lost']}"
    )
    figures = [
        ("locks held", "count", result["locks"]),
        ("still held at the end", "count", result["alive"]),
        ("leases lost", "count", result["lost"]),
        ("renewals", "count", result["renewals"]),
        ("renewals per round trip", "ratio", per_trip),
        ("services thread CPU", "% of a core", result["services_cpu_percent"]),
        ("process CPU", "% of a core", result["process_cpu_percent"]),
    ]
    return [Row("watchdog", "syncprims", metric, unit, (float(v),)) for metric, unit, v in figures]


# -- 4: read-write lock: readers in parallel, how long a writer waits -----------------------------


@attrs.frozen
class _RwReaders:
    url: str
    key: str
    threads: int
    think: float  # seconds a reader pauses between two read holds
    stop_at: float  # wall clock
    writer_preference: bool = False


def _rw_reader(job: _RwReaders, ready: Any, out: Any) -> None:
    import syncprims

    exit_with_parent()
    client = syncprims.connect(job.url)
    read = client.get_read_write_lock(job.key, writer_preference=job.writer_preference).read_lock()
    counts = [0] * job.threads

    def run(index: int) -> None:
        while time.time() < job.stop_at:
            read.lock()
            time.sleep(0.001)
            read.unlock()
            counts[index] += 1
            if job.think:
                time.sleep(job.think)

    ready.release()
    pool = [threading.Thread(target=run, args=(i,)) for i in range(job.threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    out.put(sum(counts))
    client.shutdown()


def _one_rw_run(
    url: str, think: float, writes: int, cap: float, preference: bool = False
) -> tuple[list[float], int]:
    """Writer waits (ms; ``cap`` for a write that timed out) and how many timed out."""
    import syncprims

    ctx = _worker_context()
    key = key_for("rw")
    ready, out = ctx.Semaphore(0), ctx.Queue()
    budget = 1.0 + writes * (cap + 0.1)
    stop_at = time.time() + 60 + budget  # readers start within 60 s, then cycle long enough
    readers = [
        ctx.Process(
            target=_rw_reader,
            args=(_RwReaders(url, key, 2, think, stop_at, preference), ready, out),
            daemon=True,
        )
        for _ in range(4)
    ]
    waits: list[float] = []
    timeouts = 0
    # The readers are stopped as soon as the writes are measured.
    with _workers(readers, 0, ready, "a reader process"), syncprims.connect(url) as client:
        write = client.get_read_write_lock(key, writer_preference=preference).write_lock()
        time.sleep(0.3)  # the readers are cycling
        for _ in range(writes):
            begin = time.monotonic()
            if write.try_lock(wait_time=cap):
                waits.append((time.monotonic() - begin) * 1000)
                write.unlock()
            else:
                waits.append(cap * 1000)
                timeouts += 1
            time.sleep(0.02)
    return waits, timeouts


def rw_writer_wait(urls: list[str], settings: Settings, progress: Progress) -> list[Row]:
    """Scenario 4: 8 readers cycling (1 ms holds); how long a writer waits for the lock, with
    and without writer preference (docs/rw-lock.md: readers back to back can starve a writer).
    Each write waits at most ``cap`` seconds and counts as starved then."""
    writes, cap = (3, 1.0) if settings.quick else (20, 5.0)
    rows: list[Row] = []
    for think, preference in ((0.0, False), (0.002, False), (0.0, True)):
        label = "readers back to back" if think == 0 else "readers pause 2 ms"
        if preference:
            label += ", writer preference"
        p50: list[float] = []
        worst: list[float] = []
        timed_out: list[float] = []
        for repeat in range(settings.repeats):
            waits, timeouts = _one_rw_run(urls[0], think, writes, cap, preference)
            waits.sort()
            p50.append(quantile(waits, 0.5))
            worst.append(waits[-1])
            timed_out.append(timeouts)
            progress(
                f"  rw           run {repeat + 1}/{settings.repeats}  {label:<22} writer wait "
                f"p50 {p50[-1]:8.1f} ms  max {worst[-1]:8.1f} ms  "
                f"({timeouts}/{writes} writes waited the whole {cap:g} s)"
            )
        peer = f"ReadWriteLock, {label}"
        rows += [
            Row("rw", peer, "writer wait p50", "ms", tuple(p50)),
            Row("rw", peer, "writer wait max", "ms", tuple(worst)),
            Row("rw", peer, f"writes starved for {cap:g} s", "count", tuple(timed_out)),
        ]
    return rows
