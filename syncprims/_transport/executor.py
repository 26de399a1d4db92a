"""The two command executors: one per client, each with the client's services.

:class:`SyncExecutor` (blocking, for the sync face) and :class:`AsyncExecutor` (for the
asyncio face) implement :class:`syncprims._core.executor.Executor` over their own transport,
and share the same services (pub/sub registry, watchdog, janitor) on the client's services
thread, which talk to Redis with their own asyncio connections.

Fork safety: after ``os.fork()`` every live executor in the child gets a new client id, and
forgets the parent's connections, subscriptions and renewals (``os.register_at_fork``); the
child therefore never owns, renews or releases the parent's locks.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
import weakref
from collections.abc import Sequence
from typing import Any

from syncprims._core.executor import Call
from syncprims._protocol.ids import new_client_id
from syncprims._protocol.scripts import Script
from syncprims._services.janitor import Janitor
from syncprims._services.loop import ServiceLoop
from syncprims._services.pubsub import PubSubRegistry, Subscription, WakePolicy
from syncprims._services.watchdog import Watchdog
from syncprims._transport.aio import AsyncConnections, Orphan
from syncprims._transport.connections import async_spec, sync_spec
from syncprims._transport.sync import SyncConnections, fan_out
from syncprims.config import Config
from syncprims.errors import SyncPrimsError

__all__ = ["AsyncExecutor", "ExecutorBase", "SyncExecutor"]

log = logging.getLogger("syncprims")

_live: weakref.WeakSet[ExecutorBase] = weakref.WeakSet()


class ExecutorBase:
    """Configuration, identity and services common to both executors."""

    publish_command = "PUBLISH"

    def __init__(self, config: Config) -> None:
        self.config = config
        self.client_id = new_client_id()
        self.loop = ServiceLoop(f"syncprims-{self.client_id[:8]}")
        # Commands of the services (renewals, latch deletion), on the services loop.
        self.service_connections = AsyncConnections(
            async_spec(config), timeout=config.timeout, max_connections=None
        )
        self.pubsub = self._new_pubsub()
        self.watchdog = Watchdog(
            self.loop,
            self.service_connections,
            lease=config.lock_watchdog_timeout,
            batch_size=config.watchdog_batch_size,
            retry_delay=config.retry_delay[1],
        )
        self.janitor = Janitor(self.loop, self.service_connections)
        self.closed = False
        _live.add(self)

    def _new_pubsub(self) -> PubSubRegistry:
        return PubSubRegistry(
            sync_spec(self.config),
            timeout=self.config.timeout,
            name=f"syncprims-{self.client_id[:8]}",
        )

    def subscribe(self, channel: str, policy: WakePolicy) -> Subscription:
        return self.pubsub.acquire(channel, policy)

    def unsubscribe(self, sub: Subscription) -> None:
        self.pubsub.release(sub)

    def monotonic(self) -> float:
        return time.monotonic()

    def wall_ms(self) -> int:
        return time.time_ns() // 1_000_000

    def _after_fork(self) -> None:
        self.client_id = new_client_id()
        self.loop.forget()
        self.service_connections.forget()
        self.pubsub = self._new_pubsub()
        self.watchdog.forget()
        self.janitor.forget()

    async def _close_services(self) -> None:
        """On the services loop: stop renewing, delete pending latch keys."""
        self.watchdog.aclose()
        keys = self.janitor.pending()
        if keys:
            try:
                await self.service_connections.command("UNLINK", *keys, context="shutting down")
            except Exception as error:  # they expire by their TTL
                log.debug("shutdown: UNLINK failed: %s", error)
        await self.service_connections.aclose()

    def _close_services_blocking(self) -> None:
        self.pubsub.close()
        if self.loop.started and not self.loop.in_loop_thread():
            try:
                self.loop.run(self._close_services(), self.config.timeout + 2)
            except Exception as error:
                log.warning("shutdown of the services did not finish cleanly: %r", error)
        self.loop.close()


class SyncExecutor(ExecutorBase):
    """Blocking transport; every operation completes on the calling thread."""

    def __init__(self, config: Config) -> None:
        super().__init__(config)
        self.connections = SyncConnections(
            sync_spec(config), timeout=config.timeout, max_connections=config.max_connections
        )

    async def eval(
        self,
        script: Script,
        keys: Sequence[str],
        args: Sequence[str | int | bytes],
        *,
        context: str,
        on_orphan: Orphan | None = None,
    ) -> Any:
        return await self.connections.eval(script, keys, args, context=context)

    async def command(self, *args: str | int, context: str) -> Any:
        return await self.connections.command(*args, context=context)

    async def eval_many(self, calls: Sequence[Call]) -> list[Any]:
        pools = []
        for call in calls:
            if not isinstance(call.executor, SyncExecutor):
                raise TypeError("a fan-out mixes the sync and the asyncio face")
            pools.append(call.executor.connections)
        return fan_out(
            [
                (pool, call.script, call.keys, call.args, call.context)
                for pool, call in zip(pools, calls, strict=True)
            ]
        )

    async def wait_ready(self, sub: Subscription, timeout: float) -> bool:
        return sub.ready.wait_sync(timeout)

    async def wait(self, sub: Subscription, timeout: float | None) -> bool:
        return sub.latch.wait_sync(timeout)

    async def sleep(self, seconds: float) -> None:
        time.sleep(seconds)  # noqa: ASYNC251 - the sync executor blocks by design

    async def aclose(self) -> None:
        """Stop the services and close every connection (blocking). Idempotent."""
        if self.closed:
            return
        self.closed = True
        self._close_services_blocking()
        self.connections.close()

    def _after_fork(self) -> None:
        super()._after_fork()
        self.connections.forget()


class AsyncExecutor(ExecutorBase):
    """``redis.asyncio`` transport on the caller's event loop."""

    def __init__(self, config: Config) -> None:
        super().__init__(config)
        self.connections = AsyncConnections(
            async_spec(config),
            timeout=config.timeout,
            max_connections=config.max_connections,
            orphan_timeout=config.lock_watchdog_timeout,
        )
        self._undoing: set[asyncio.Task[None]] = set()

    async def eval(
        self,
        script: Script,
        keys: Sequence[str],
        args: Sequence[str | int | bytes],
        *,
        context: str,
        on_orphan: Orphan | None = None,
    ) -> Any:
        return await self.connections.eval(script, keys, args, context=context, on_orphan=on_orphan)

    async def command(self, *args: str | int, context: str) -> Any:
        return await self.connections.command(*args, context=context)

    async def eval_many(self, calls: Sequence[Call]) -> list[Any]:
        for call in calls:
            if not isinstance(call.executor, AsyncExecutor):
                raise TypeError("a fan-out mixes the sync and the asyncio face")
        loop = asyncio.get_running_loop()
        tasks = [
            loop.create_task(
                call.executor.eval(
                    call.script,
                    call.keys,
                    call.args,
                    context=call.context,
                    on_orphan=call.on_orphan,
                )
            )
            for call in calls
        ]
        try:
            replies = await asyncio.gather(*tasks, return_exceptions=True)
        except asyncio.CancelledError:
            # Calls still in flight were cancelled and undo themselves (on_orphan); calls that
            # had already answered are undone here.
            for call, task in zip(calls, tasks, strict=True):
                finished = task.done() and not task.cancelled() and task.exception() is None
                if call.on_orphan is not None and finished:
                    self._undo(call.on_orphan, task.result())
            raise
        for reply in replies:
            if isinstance(reply, BaseException) and not isinstance(reply, SyncPrimsError):
                raise reply
        return list(replies)

    def _undo(self, on_orphan: Orphan, reply: Any) -> None:
        async def undo() -> None:
            try:
                await on_orphan(reply)
            except Exception:
                log.exception("undoing an abandoned fan-out call failed; its lease bounds it")

        task = asyncio.get_running_loop().create_task(undo())
        self._undoing.add(task)
        task.add_done_callback(self._undoing.discard)

    async def wait_ready(self, sub: Subscription, timeout: float) -> bool:
        return await sub.ready.wait_async(timeout)

    async def wait(self, sub: Subscription, timeout: float | None) -> bool:
        return await sub.latch.wait_async(timeout)

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)

    async def aclose(self) -> None:
        """Finish background work, stop the services, close connections. Idempotent."""
        if self.closed:
            return
        self.closed = True
        await self.connections.drain(self.config.timeout)
        await asyncio.get_running_loop().run_in_executor(None, self.pubsub.close)
        if self.loop.started:
            future = asyncio.run_coroutine_threadsafe(self._close_services(), self.loop.loop())
            try:
                await asyncio.wait_for(asyncio.wrap_future(future), self.config.timeout + 2)
            except Exception as error:
                log.warning("shutdown of the services did not finish cleanly: %r", error)
        self.loop.close(timeout=0)
        await self.connections.aclose()

    def _after_fork(self) -> None:
        super()._after_fork()
        self.connections.forget()


def _after_fork_in_child() -> None:
    for executor in list(_live):
        executor._after_fork()


os.register_at_fork(after_in_child=_after_fork_in_child)
