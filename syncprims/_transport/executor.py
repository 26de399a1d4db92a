"""The two command executors: one per client, each with the client's services.

:class:`SyncExecutor` (blocking, for the sync face) and :class:`AsyncExecutor` (for the
asyncio face) implement :class:`syncprims._core.executor.Executor` over their own transport:
one server (or a sentinel-managed master), or a cluster through a
:class:`~syncprims._transport.cluster.ClusterRouter`. Both share the same services: the
pub/sub registry (per node in a cluster), the watchdog and the janitor, which run on the
client's services thread with their own asyncio connections.

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
from syncprims._services.pubsub import ClusterPubSub, PubSubRegistry, Subscription, WakePolicy
from syncprims._services.watchdog import Watchdog
from syncprims._transport.aio import AsyncConnections, Orphan
from syncprims._transport.cluster import ClusterRouter
from syncprims._transport.connections import (
    ClusterRedirectError,
    async_spec,
    key_slot,
    node_spec,
    sync_spec,
)
from syncprims._transport.sync import SyncConnections, fan_out
from syncprims.config import ClusterServers, Config
from syncprims.errors import SyncPrimsError

__all__ = ["AsyncExecutor", "ExecutorBase", "SyncExecutor"]

log = logging.getLogger("syncprims")

_live: weakref.WeakSet[ExecutorBase] = weakref.WeakSet()

AsyncTransport = AsyncConnections | ClusterRouter[AsyncConnections]
SyncTransport = SyncConnections | ClusterRouter[SyncConnections]


def _async_transport(
    config: Config, *, orphan_timeout: float | None, limit: bool
) -> AsyncTransport:
    max_connections = config.max_connections if limit else None
    if isinstance(config.server, ClusterServers):
        return ClusterRouter(
            config.server.nodes,
            lambda host, port: AsyncConnections(
                node_spec(config, host, port, asyncio=True),
                timeout=config.timeout,
                max_connections=max_connections,
                orphan_timeout=orphan_timeout,
            ),
            asyncio.sleep,
        )
    return AsyncConnections(
        async_spec(config),
        timeout=config.timeout,
        max_connections=max_connections,
        orphan_timeout=orphan_timeout,
    )


def _pools(transport: SyncTransport | AsyncTransport) -> list[Any]:
    return transport.pools() if isinstance(transport, ClusterRouter) else [transport]


class ExecutorBase:
    """Configuration, identity and services common to both executors."""

    connections: SyncTransport | AsyncTransport

    def __init__(self, config: Config) -> None:
        self.config = config
        self.client_id = new_client_id()
        self.cluster = isinstance(config.server, ClusterServers)
        self.loop = ServiceLoop(f"syncprims-{self.client_id[:8]}")
        # Commands of the services (renewals, latch deletion), on the services loop.
        self.service_connections = _async_transport(config, orphan_timeout=None, limit=False)
        self.pubsub: PubSubRegistry | ClusterPubSub = self._new_pubsub()
        self.watchdog = Watchdog(
            self.loop,
            self.service_connections,
            lease=config.lock_watchdog_timeout,
            batch_size=config.watchdog_batch_size,
            retry_delay=config.retry_delay[1],
            slot_of=self.slot_of,
        )
        self.janitor = Janitor(self.loop, self.service_connections, slot_of=self.slot_of)
        self.closed = False
        _live.add(self)

    def _router(self) -> ClusterRouter[Any]:
        assert isinstance(self.connections, ClusterRouter)
        return self.connections

    def _new_pubsub(self) -> PubSubRegistry | ClusterPubSub:
        name = f"syncprims-{self.client_id[:8]}"
        if not self.cluster:
            return PubSubRegistry(sync_spec(self.config), timeout=self.config.timeout, name=name)
        return ClusterPubSub(
            lambda key: self._router().node_of(key),
            self._sharded,
            lambda host, port: node_spec(self.config, host, port, asyncio=False),
            timeout=self.config.timeout,
            name=name,
        )

    def _sharded(self, channel: str, key: str) -> bool:
        return bool(self._router().sharded) and key_slot(channel) == key_slot(key)

    def slot_of(self, key: str) -> int:
        """The cluster slot of ``key`` (0 outside a cluster)."""
        return key_slot(key) if self.cluster else 0

    def publish_command_for(self, channel: str, key: str) -> str:
        if self.cluster and self._sharded(channel, key):
            return "SPUBLISH"
        return "PUBLISH"

    def subscribe(self, channel: str, policy: WakePolicy, route: str | None = None) -> Subscription:
        return self.pubsub.acquire(channel, policy, route)

    def unsubscribe(self, sub: Subscription) -> None:
        sub.registry.release(sub)

    def monotonic(self) -> float:
        return time.monotonic()

    def wall_ms(self) -> int:
        return time.time_ns() // 1_000_000

    def _after_fork(self) -> None:
        self.client_id = new_client_id()
        self.loop.forget()
        for pool in _pools(self.service_connections):
            pool.forget()
        for pool in _pools(self.connections):
            pool.forget()
        self.pubsub = self._new_pubsub()
        self.watchdog.forget()
        self.janitor.forget()

    async def _close_services(self) -> None:
        """On the services loop: stop renewing, delete pending latch keys."""
        self.watchdog.aclose()
        keys = self.janitor.pending()
        by_slot: dict[int, list[str]] = {}
        for key in keys:
            by_slot.setdefault(self.slot_of(key), []).append(key)
        for group in by_slot.values():
            try:
                await self.service_connections.command(
                    "UNLINK", *group, context="shutting down", route=group[0]
                )
            except Exception as error:  # they expire by their TTL
                log.debug("shutdown: UNLINK failed: %s", error)
        for pool in _pools(self.service_connections):
            await pool.aclose()

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

    connections: SyncTransport

    def __init__(self, config: Config) -> None:
        if isinstance(config.server, ClusterServers):
            self.connections = ClusterRouter(
                config.server.nodes,
                lambda host, port: SyncConnections(
                    node_spec(config, host, port, asyncio=False),
                    timeout=config.timeout,
                    max_connections=config.max_connections,
                ),
                self.sleep,
            )
        else:
            self.connections = SyncConnections(
                sync_spec(config), timeout=config.timeout, max_connections=config.max_connections
            )
        super().__init__(config)

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

    async def command(self, *args: str | int, context: str, route: str | None = None) -> Any:
        return await self.connections.command(*args, context=context, route=route)

    async def eval_many(self, calls: Sequence[Call]) -> list[Any]:
        routed = []
        for call in calls:
            if not isinstance(call.executor, SyncExecutor):
                raise TypeError("a fan-out mixes the sync and the asyncio face")
            if isinstance(call.executor.connections, ClusterRouter):
                await call.executor.connections._ready()
            routed.append(
                (
                    call.executor.connections.route(call.keys),
                    call.script,
                    call.keys,
                    call.args,
                    call.context,
                )
            )
        replies = fan_out(routed)
        for i, reply in enumerate(replies):
            if isinstance(reply, ClusterRedirectError):  # it did not run: follow it alone
                call = calls[i]
                try:
                    replies[i] = await call.executor.eval(
                        call.script, call.keys, call.args, context=call.context
                    )
                except SyncPrimsError as error:
                    replies[i] = error
        return replies

    async def wait_ready(self, sub: Subscription, timeout: float) -> bool:
        ready = sub.ready.wait_sync(timeout)
        sub.raise_if_refused()
        return ready

    async def wait(self, sub: Subscription, timeout: float | None) -> bool:
        woken = sub.latch.wait_sync(timeout)
        sub.raise_if_refused()
        return woken

    async def sleep(self, seconds: float) -> None:
        time.sleep(seconds)  # noqa: ASYNC251 - the sync executor blocks by design

    async def aclose(self) -> None:
        """Stop the services and close every connection (blocking). Idempotent."""
        if self.closed:
            return
        self.closed = True
        self._close_services_blocking()
        for pool in _pools(self.connections):
            pool.close()


class AsyncExecutor(ExecutorBase):
    """``redis.asyncio`` transport on the caller's event loop."""

    connections: AsyncTransport

    def __init__(self, config: Config) -> None:
        self.connections = _async_transport(
            config, orphan_timeout=config.lock_watchdog_timeout, limit=True
        )
        self._undoing: set[asyncio.Task[None]] = set()
        super().__init__(config)

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

    async def command(self, *args: str | int, context: str, route: str | None = None) -> Any:
        return await self.connections.command(*args, context=context, route=route)

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
        ready = await sub.ready.wait_async(timeout)
        sub.raise_if_refused()
        return ready

    async def wait(self, sub: Subscription, timeout: float | None) -> bool:
        woken = await sub.latch.wait_async(timeout)
        sub.raise_if_refused()
        return woken

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)

    async def aclose(self) -> None:
        """Finish background work, stop the services, close connections. Idempotent."""
        if self.closed:
            return
        self.closed = True
        for pool in _pools(self.connections):
            await pool.drain(self.config.timeout)
        await asyncio.get_running_loop().run_in_executor(None, self.pubsub.close)
        if self.loop.started:
            future = asyncio.run_coroutine_threadsafe(self._close_services(), self.loop.loop())
            try:
                await asyncio.wait_for(asyncio.wrap_future(future), self.config.timeout + 2)
            except Exception as error:
                log.warning("shutdown of the services did not finish cleanly: %r", error)
        self.loop.close(timeout=0)
        for pool in _pools(self.connections):
            await pool.aclose()


def _after_fork_in_child() -> None:
    for executor in list(_live):
        executor._after_fork()


os.register_at_fork(after_in_child=_after_fork_in_child)
