"""The asyncio face: the same names, awaited. Owners are tasks, not threads."""

import asyncio
import os

import redis.asyncio

import syncprims.asyncio


async def main() -> None:
    r = redis.asyncio.Redis.from_url(os.environ.get("REDIS_URL", "redis://127.0.0.1:6379"))
    async with await syncprims.asyncio.connect(r) as client:
        lock = client.get_lock("orders:42")
        done = []

        async def worker(n: int) -> None:
            async with lock:  # two tasks on one thread exclude each other
                done.append(n)

        await asyncio.gather(*(worker(n) for n in range(5)))
        print("critical sections:", len(done))
    await r.aclose()


asyncio.run(main())
