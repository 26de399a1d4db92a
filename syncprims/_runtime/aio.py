"""The asyncio face's executor: everything on the client's event loop (commands through its
``redis.asyncio`` pool or ``RedisCluster``, waits as futures of the loop, the pub/sub reader,
the watchdog and the janitor as its tasks and timers; docs/design.md, "Sync over async,
without a thread hop"). No thread and no second set of connections.
"""

from __future__ import annotations

import asyncio
import logging
import warnings
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from typing import Any

from syncprims._protocol.contracts import Armed, Call, Enough, Orphan, ScriptCall, Then, WakePolicy
from syncprims._runtime.base import ExecutorBase
from syncprims._services.loop import CallerLoop
from syncprims._services.pubsub import Subscription, TaskSubscriber
from syncprims._transport.aio.deadlines import bind_loop
from syncprims._transport.aio.fanout import Routed, fan_out
from syncprims._transport.aio.server import AsyncRouter, AsyncServer
from syncprims._transport.cluster import AsyncTopology, ClusterRouter, follow
from syncprims._transport.sources import Source, aclose_source, async_source
from syncprims.config import Config

__all__ = ["AsyncExecutor"]


log = logging.getLogger("syncprims")

AsyncTransport = AsyncServer | AsyncRouter


class AsyncExecutor(ExecutorBase[AsyncServer, TaskSubscriber]):
    """``redis.asyncio`` transport and services on the client's event loop.

    Args:
        config: the client's options.
        source: the ``redis.asyncio`` pool or cluster.
        loop: the event loop the client belongs to.
    """

    transport: AsyncTransport

    def __init__(self, config: Config, source: Source, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(config, source)
        self.event_loop = loop
        timeout = self.bounds.timeout
        lease = self.config.lock_watchdog_timeout
        self.late_reply_window = max(timeout, lease)  # the servers' orphan_timeout

        def server(pool: Any, address: str) -> AsyncServer:
            return AsyncServer(
                pool,
                address=address,
                timeout=timeout,
                orphan_timeout=lease,
                loop=loop,
                shared=self.config.shared_connections,
            )

        if source.cluster is not None:
            self.transport = AsyncRouter(
                AsyncTopology(source.cluster), server, self.sleep, source.address
            )
        else:
            self.transport = server(source.pool, source.address)
        self._make_pubsub(TaskSubscriber)
        self.services = CallerLoop(loop, self.name)
        self._make_services(self.services, self.transport)

    def __del__(self) -> None:
        if not self.closed:  # nothing can be sent from here: say so, once
            warnings.warn(
                f"the syncprims.asyncio client {self.client_id} was not shut down: use "
                "'async with await syncprims.asyncio.connect(...)' or 'await "
                "client.shutdown()' (its record and unlock latch keys stay in Redis until "
                "their TTLs, at most 10 and 16 minutes)",
                ResourceWarning,
                source=self,
                stacklevel=2,
            )

    def eval(
        self, call: ScriptCall, *, context: str, on_orphan: Orphan | None = None
    ) -> Coroutine[Any, Any, Any]:
        # the transport's coroutine itself, not one more layer around it [hot-1]
        return self.transport.eval(call, context=context, on_orphan=on_orphan)

    async def eval_then(
        self, call: ScriptCall, then: Then, *, context: str, on_orphan: Orphan | None = None
    ) -> tuple[Any, Any]:
        return await self.transport.eval_then(call, then, context=context, on_orphan=on_orphan)

    def eval_many(
        self, calls: Sequence[Call], enough: Enough | None = None
    ) -> Coroutine[Any, Any, list[Any]]:
        """The fan-out (``syncprims._transport.aio.fanout``) of ``calls``, each on its
        executor's server: its coroutine itself [hot-1]; a cluster's calls are routed to
        their nodes first, and their redirections followed after."""
        routed: list[Routed] = []
        for call in calls:
            ex = call.executor
            if not isinstance(ex, AsyncExecutor):
                raise TypeError("a fan-out mixes the sync and the asyncio face")
            server = ex.transport
            if not isinstance(server, AsyncServer):
                return _routed_fan_out(calls, enough)
            routed.append((server, call))
        return fan_out(routed, enough)

    def background(self, work: Callable[[], Awaitable[None]]) -> None:
        """``work()`` as a task on the client's loop."""

        async def task() -> None:
            await work()

        self.services.call_soon(lambda: self.services.spawn(task()))

    async def subscribe(
        self, channel: str, policy: WakePolicy, route: str | None = None
    ) -> Subscription:
        bind_loop(self.event_loop)
        return await self._driver(channel, route).acquire(channel, policy)

    async def wait_ready(self, sub: Any, timeout: float) -> bool:
        assert isinstance(sub, Subscription)
        ready = await sub.ready.wait_async(timeout)
        sub.raise_if_refused()
        return ready

    async def wait(self, sub: Any, timeout: float | None, armed: Armed | None = None) -> bool:
        assert isinstance(sub, Subscription)
        woken = await sub.latch.wait_async(timeout, armed)
        sub.raise_if_refused()
        return woken

    def claim_pop(self) -> bool:
        return False  # the reader task runs on the waiter's loop: no hop to save

    def free_pop(self) -> None:
        pass

    async def wait_pushed(self, sub: Any, key: str, timeout: float, route: str) -> bytes | bool:
        return await self.wait(sub, timeout)

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)

    def _servers(self) -> list[AsyncServer]:
        transport = self.transport
        return transport.servers() if isinstance(transport, ClusterRouter) else [transport]

    async def aclose(self) -> None:
        """Let the releases in flight finish (within the operation timeout; no acquisition
        starts meanwhile), finish background work, stop the services, give the pub/sub
        connection back, close what syncprims made. A redis-py client passed in stays open.
        Idempotent."""
        if self.closed:
            return
        self.closed = True  # no new acquisition from here (refuse_if_closing)
        bind_loop(self.event_loop)
        self.listeners.close()  # no listener callback from here
        self._wake_waiters()  # each re-checks, sees the client closing, gives up cleanly
        await self.run_closers()  # leaderships: their work stopped, then resigned
        deadline = self.monotonic() + self.bounds.operation_timeout
        # Releases in flight finish first (counted by a plain counter: a release may run on
        # another loop or thread of the process; polled, there is no event to await).
        while not self.releases_done(deadline):  # noqa: ASYNC110
            await asyncio.sleep(0.002)
        for server in self._servers():  # fan-out calls left there, late replies' handling
            await server.drain(self.bounds.timeout)
        for subscriber in self._drivers(stop=True):
            await subscriber.aclose()
        self.watchdog.aclose()
        await self.delete_now(self.janitor.take() + self.record.withdrawn())
        await self.services.drain(1.0)
        # Releases begun during the shutdown (their tasks ran on) finish, and their latch
        # keys go, before the transport closes: nothing is awaited between the last look
        # and close().
        while not self.releases_done(deadline) or self.janitor.pending():
            if self.janitor.pending():
                await self.delete_now(self.janitor.take())
            else:
                await asyncio.sleep(0.002)
        self.services.close()
        self.transport.close()
        for server in self._servers():
            await server.release_idle()
        await aclose_source(self.source)

    def after_fork(self) -> None:
        super().after_fork()
        for server in self._servers():
            server.forget()


async def open_executor(
    source: object, config: Config, *, check: bool = True, connect_timeout: float | None = None
) -> AsyncExecutor:
    """An executor for ``source`` (see :func:`syncprims.asyncio.connect`), on the running loop:
    :func:`syncprims._runtime.sync.open_executor` for a URL or a ``redis.asyncio`` client, pool
    or cluster (raising as it does, but for ``MonkeyPatchedError``)."""
    resolved = await async_source(source, timeout=config.timeout, connect_timeout=connect_timeout)
    executor = AsyncExecutor(config, resolved, asyncio.get_running_loop())
    if check:
        try:
            await executor.start()
        except BaseException:
            await executor.aclose()
            raise
    return executor


async def _routed_fan_out(calls: Sequence[Call], enough: Enough | None) -> list[Any]:
    """:meth:`AsyncExecutor.eval_many` for calls of which some go through a cluster router:
    each is sent to its node, and the redirections it meets are followed after."""
    routed: list[Routed] = []
    for call in calls:
        ex = call.executor
        assert isinstance(ex, AsyncExecutor)
        transport = ex.transport
        if isinstance(transport, AsyncServer):
            routed.append((transport, call))
        else:
            routed.append((await transport.server_for(call.script_call.keys), call))
    return await follow(calls, await fan_out(routed, enough))
