"""A leader election (docs/election.md), both faces: two candidates, one leads, the other takes
over when it resigns; an observer sees each change, the vacancy included."""

import asyncio
import os
import threading
import time

import syncprims
import syncprims.asyncio
from syncprims import fencing

URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379")


def sync_face() -> None:
    with syncprims.connect(URL) as client, syncprims.redis_from_url(URL) as store:
        first = client.get_leader_election(
            "reports:scheduler",
            value="host-1",
            on_revoked=lambda reason: print(f"host-1 no longer leads ({reason or 'resigned'})"),
        )
        second = client.get_leader_election("reports:scheduler", value="host-2")
        changes: list[str] = []

        def observe() -> None:
            for leader in first.observe(timeout=2):
                changes.append("nobody" if leader is None else leader.value)

        observer = threading.Thread(target=observe)
        observer.start()
        while not changes:  # the observer has read the election once (nobody leads yet)
            time.sleep(0.01)
        with first:  # campaigns, leads, resigns at the end
            assert first.is_leader() and first.term is not None
            # the term fences the leader's writes: a stale leader's write is refused
            fencing.fenced_set(store, "reports:latest", "from host-1", first.term, writer="h1")
            follower = threading.Thread(target=second.campaign)
            follower.start()
        follower.join(10)
        leader = second.leader()
        assert leader is not None and second.term is not None
        print(f"{leader.value} leads now, term {leader.term} > {first.term}")
        second.resign()
        observer.join(10)
        print("observed:", " -> ".join(changes))


async def asyncio_face() -> None:
    async with await syncprims.asyncio.connect(URL) as client:
        election = client.get_leader_election("reports:scheduler", value="host-3")

        async def work() -> None:
            try:
                async with election.lead_or_cancel() as term:
                    print(f"host-3 leads, term {term}")
                    await asyncio.sleep(3600)  # the leader's work, until it is told to stop
            except syncprims.LockLostError as error:
                print(f"host-3's work was cancelled: {error}")

        task = asyncio.ensure_future(work())
        await asyncio.sleep(0.5)  # the work runs as the leader meanwhile
        await election.resign()  # cancels and awaits the work, then hands over
        await task


if __name__ == "__main__":
    sync_face()
    asyncio.run(asyncio_face())
