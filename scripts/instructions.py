"""Instructions per lock pair, counted by valgrind: a CPU measure that does not swing with
the machine (docs/measurements.md, "Instructions per pair").

Wall time and CPU time per pair swing by 10-20 % between runs on a shared 2-core VM, more
than most changes to the hot path; the instructions the calling thread executes do not
(about 1 % between runs). Each kind runs twice under ``valgrind --tool=callgrind
--separate-threads=yes``, with N and 3N pairs after the same warm-up, and the difference of
the calling thread's totals over 2N is what one pair costs: start-up, imports, connecting
and the background threads (the watchdog, the janitor, late lanes: their work depends on
the wall clock, which valgrind slows 50-fold) are left out.

Usage (from the repository; valgrind and redis-server on PATH)::

    python scripts/instructions.py rlock redlock redlock1 fan-out "raw EVALSHA fan-out x5"
    python scripts/instructions.py --tree /path/to/other/checkout rlock   # A/B another tree

Kinds: ``rlock`` (an uncontended RLock pair), ``redlock`` (a RedLock pair on 5 masters),
``redlock1`` (on 1 master), ``alock`` (an asyncio RLock pair, one task), ``tasks2000``
(2,000 asyncio tasks on one client, a lock each, 3 and 9 pairs each at ``--pairs 300``;
the figure is per pair), ``fan-out`` (syncprims' blocking fan-out with the same two
scripts on 5 masters and no lock book-keeping), or any peer of ``syncprims bench``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# The child: builds the kind, warms it up, then runs ``pairs`` pairs (argv: kind, pairs, urls).
CHILD = r"""
import itertools, os, sys
kind, pairs, urls = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
import syncprims
close = None
if kind == "rlock":
    client = syncprims.connect(urls[0])
    lock = client.get_lock(f"instructions:{os.getpid()}")
    step, close = (lambda: (lock.lock(), lock.unlock())), client.shutdown
elif kind in ("redlock", "redlock1", "fan-out"):
    masters = syncprims.connect_many(urls if kind != "redlock1" else urls[:1])
    close = masters.shutdown
    red = masters.get_red_lock(f"instructions:{os.getpid()}")
    step = lambda: (red.lock(), red.unlock())
    if kind == "fan-out":
        from syncprims._protocol import scripts
        from syncprims._protocol.contracts import Call, ScriptCall
        from syncprims._transport.blocking.fanout import fan_out
        subs = red._core.locks
        name = subs[0].name
        fields = [f"{sub.executor.client_id}:1" for sub in subs]
        acquire = [(sub.executor.transport, Call(sub.executor, ScriptCall(scripts.LOCK_ACQUIRE,
                    [name], [30000, field]), "acquiring", None, True))
                   for sub, field in zip(subs, fields)]
        ids = itertools.count()
        def release():
            n = next(ids)
            return [(sub.executor.transport, Call(sub.executor, ScriptCall(scripts.LOCK_UNLOCK,
                     [name, "channel", f"redisson_unlock_latch:{{{name}}}:{n}:{i}"],
                     ["0", 30000, field, "PUBLISH", 13500]), "releasing"))
                    for i, (sub, field) in enumerate(zip(subs, fields))]
        step = lambda: (fan_out(acquire), fan_out(release()))
elif kind in ("alock", "tasks2000"):
    import asyncio
    import syncprims.asyncio
    tasks = 1 if kind == "alock" else 2000
    async def run():
        client = await syncprims.asyncio.connect(urls[0], timeout=600)  # valgrind is slow
        locks = [client.get_lock(f"instructions:{os.getpid()}:{i}") for i in range(tasks)]
        async def pairs_of(lock, n):
            for _ in range(n):
                await lock.lock()
                await lock.unlock()
        async def each(n):
            await asyncio.gather(*(pairs_of(lock, n) for lock in locks))
        await each(200 if tasks == 1 else 1)
        await each(pairs if tasks == 1 else pairs // 100)  # 20 pairs per unit: UNIT below
        await client.shutdown()
    asyncio.run(run())
    step = None
else:
    from syncprims.bench.peers import open_peer
    session = open_peer(kind, urls)
    lock = session.lock(f"instructions:{os.getpid()}")
    step, close = (lambda: (lock.acquire(), lock.release())), session.close
if step is not None:
    for _ in range(200):
        step()
    for _ in range(pairs):
        step()
    close()
"""

# Pairs a kind runs per unit of ``--pairs``: 2,000 tasks run 20 pairs per unit, so that
# ``--pairs 300`` gives each task 3 (and 9) pairs.
UNIT = {"tasks2000": 20}


def count(tree: Path, kind: str, pairs: int, urls: list[str]) -> int:
    """The calling thread's instructions for ``pairs`` pairs (plus the fixed part)."""
    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder) / "callgrind.out"
        env = {**os.environ, "PYTHONPATH": str(tree)}
        done = subprocess.run(
            [
                "valgrind", "--tool=callgrind", "--separate-threads=yes",
                f"--callgrind-out-file={out}", sys.executable, "-c", CHILD, kind, str(pairs),
                *urls,
            ],
            env=env, cwd=tree, capture_output=True, text=True, check=False,
        )  # fmt: skip
        if done.returncode != 0:  # cwd=tree: ``-c`` puts the working directory first
            raise RuntimeError(f"{kind} failed under valgrind:\n{done.stderr[-3000:]}")
        for line in (Path(f"{out}-01")).read_text().splitlines():
            if line.startswith(("totals:", "summary:")):
                return int(line.split()[1])
    raise RuntimeError(f"no totals in valgrind's output for {kind}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("kinds", nargs="+")
    parser.add_argument("--pairs", type=int, default=1000, help="N (default 1000)")
    parser.add_argument("--tree", type=Path, default=ROOT, help="the checkout to measure")
    args = parser.parse_args()
    if shutil.which("valgrind") is None:
        print("valgrind is not on PATH (Debian: apt-get install valgrind)", file=sys.stderr)
        return 2
    sys.path.insert(0, str(ROOT))
    from syncprims._embedded import RedisServer

    servers = [RedisServer() for _ in range(5)]
    try:
        urls = [server.url for server in servers]
        for kind in args.kinds:
            once = count(args.tree, kind, args.pairs, urls)
            thrice = count(args.tree, kind, 3 * args.pairs, urls)
            per_pair = (thrice - once) / (2 * args.pairs * UNIT.get(kind, 1))
            print(f"{kind:32} {per_pair:>12,.0f} instructions per pair")
    finally:
        for server in servers:
            server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
