"""The asyncio face's executor: everything on the client's event loop.

Commands go through the client's ``redis.asyncio`` pool (or ``RedisCluster``); waits are
futures of the loop; the pub/sub reader, the watchdog and the janitor are tasks and timers of
the same loop, using the same pool. No thread and no second set of connections: the
caller's settings are the only ones. A loop blocked longer than a lease cannot renew it
(as for any asyncio code); the holder learns of the loss when the loop runs again.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from typing import Any, TypeVar

from syncprims._protocol.contracts import (
    PENDING,
    Armed,
    Call,
    Enough,
    Orphan,
    ScriptCall,
    WakePolicy,
)
from syncprims._protocol.quorum import grace_end
from syncprims._runtime.base import ExecutorBase, client_name
from syncprims._services.janitor import Janitor
from syncprims._services.listeners import ObjectListeners
from syncprims._services.loop import CallerLoop
from syncprims._services.pubsub import ClusterSubscribers, Subscription, TaskSubscriber
from syncprims._services.record import ClientRecord
from syncprims._services.watchdog import Watchdog
from syncprims._transport.aio import NOSCRIPT, AsyncServer, bind_loop
from syncprims._transport.cluster import AsyncTopology, ClusterRouter
from syncprims._transport.mux import MuxConnection, Slot, undo_orphan
from syncprims._transport.sources import Source, aclose_source, async_source
from syncprims.config import Config
from syncprims.errors import RedisConnectionError, RedisTimeoutError, SyncPrimsError

__all__ = ["AsyncExecutor"]

T = TypeVar("T")

log = logging.getLogger("syncprims")

AsyncTransport = AsyncServer | ClusterRouter[AsyncServer]


class AsyncExecutor(ExecutorBase):
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

        def server(pool: Any, address: str) -> AsyncServer:
            return AsyncServer(
                pool,
                address=address,
                timeout=timeout,
                orphan_timeout=lease,
                loop=loop,
                shared=self.config.shared_connections,
            )

        self.pubsub: TaskSubscriber | ClusterSubscribers[TaskSubscriber]
        if source.cluster is not None:
            router = ClusterRouter(
                AsyncTopology(source.cluster), server, self.sleep, source.address
            )
            self.transport = router
            self.pubsub = ClusterSubscribers(
                router.node_of,
                self.sharded,
                lambda node, sharded: TaskSubscriber(
                    router.server(node).pool,
                    address=f"{node[0]}:{node[1]}",
                    timeout=timeout,
                    name=f"{self.name}-{node[1]}",
                    sharded=sharded,
                ),
            )
        else:
            self.transport = server(source.pool, source.address)
            self.pubsub = TaskSubscriber(
                source.pool, address=source.address, timeout=timeout, name=self.name
            )
        self.services = CallerLoop(loop, self.name)
        self.watchdog = Watchdog(
            self.services,
            self.transport,
            lease=lease,
            batch_size=self.config.watchdog_batch_size,
            retry_delay=self.config.retry_delay[1],
            slot_of=self.slot_of,
        )
        self.janitor = Janitor(self.services, self.transport, slot_of=self.slot_of)
        self.listeners = ObjectListeners(self.services, database=self.database)
        self.record = ClientRecord(
            self.services, self.transport, lambda: self.client_id, client_name(source)
        )
        self._undoing: set[asyncio.Task[None]] = set()
        self._late: set[asyncio.Task[Any]] = set()  # fan-out calls finished in the background

    def eval(
        self, call: ScriptCall, *, context: str, on_orphan: Orphan | None = None
    ) -> Coroutine[Any, Any, Any]:
        # the transport's coroutine itself, not one more layer around it (the hot path)
        return self.transport.eval(call, context=context, on_orphan=on_orphan)

    async def eval_many(self, calls: Sequence[Call], enough: Enough | None = None) -> list[Any]:
        executors: list[AsyncExecutor] = []
        for call in calls:
            if not isinstance(call.executor, AsyncExecutor):
                raise TypeError("a fan-out mixes the sync and the asyncio face")
            executors.append(call.executor)
        servers = _shared_servers(executors)  # a connection the server closed is not one
        if servers is not None:
            return await self._eval_many_shared(calls, executors, servers, enough)
        loop = asyncio.get_running_loop()
        results: list[Any] = [PENDING] * len(calls)
        tasks: dict[asyncio.Task[Any], int] = {}
        for i, (call, ex) in enumerate(zip(calls, executors, strict=True)):
            late = ex._late_calls()
            if late and call.skip_if_busy:  # a sick server: see Call.skip_if_busy
                results[i] = RedisTimeoutError(
                    f"{call.context} skipped: the server has not answered an earlier call yet",
                    maybe_executed=False,
                )
                continue
            coro = ex.eval(call.call, context=call.context, on_orphan=call.on_orphan)
            tasks[loop.create_task(_after(late, coro) if late else coro)] = i
        pending = set(tasks)
        started = loop.time()
        stop_at: float | None = None  # once enough: when the others stop being awaited
        try:
            while pending:
                if stop_at is None and enough is not None and enough(results):
                    stop_at = grace_end(started, loop.time())  # as the sync fan-out
                if stop_at is not None:
                    left = stop_at - loop.time()
                    if left <= 0:
                        break
                    done, pending = await asyncio.wait(
                        pending, timeout=left, return_when=asyncio.FIRST_COMPLETED
                    )
                else:
                    done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                for task in done:
                    results[tasks[task]] = (
                        task.result() if task.exception() is None else task.exception()
                    )
        except asyncio.CancelledError:
            # Attempts still in flight are cancelled and undo themselves (on_orphan); calls
            # that had already answered are undone here. A release (a call that is never
            # skipped) is not cancelled: one cancelled before it was written would leave its
            # hold to the lease; it finishes in the background, as after ``enough``.
            for task, i in tasks.items():
                on_orphan = calls[i].on_orphan
                if not task.done():
                    if calls[i].skip_if_busy:
                        task.cancel()
                    else:
                        executors[i]._finish_late(task, on_orphan)
                elif on_orphan is not None and not task.cancelled() and task.exception() is None:
                    self._undo(on_orphan, task.result())
            raise
        for task in pending:  # enough: finished in the background, within their timeouts
            executors[tasks[task]]._finish_late(task, calls[tasks[task]].on_orphan)
        for reply in results:
            if isinstance(reply, BaseException) and not isinstance(reply, SyncPrimsError):
                raise reply
        return results

    async def _eval_many_shared(
        self,
        calls: Sequence[Call],
        executors: list[AsyncExecutor],
        servers: list[AsyncServer],
        enough: Enough | None,
    ) -> list[Any]:
        """:meth:`eval_many` when every call goes on a server's shared connection: each
        call is queued on its connection at once (one write per server for every fan-out
        of the loop turn; at once on an idle connection) and its reply is taken by a
        callback, without a task per call;
        the same outcomes as the per-call path (a timeout, an error, ``PENDING`` once
        ``enough`` held and the grace ran out, the undoing of answered attempts when the
        caller is cancelled). A script not loaded yet takes the per-call path (it loads
        it); so do calls to a server a fan-out left a call on (:meth:`_late_calls`)."""
        loop = asyncio.get_running_loop()
        count = len(calls)
        results: list[Any] = [PENDING] * count
        submitted: list[tuple[MuxConnection, Slot] | None] = [None] * count
        retries: dict[asyncio.Task[Any], int] = {}  # NOSCRIPT: the per-call path
        remaining = count
        wake: list[asyncio.Future[None]] = [loop.create_future()]

        def woken() -> None:
            if not wake[0].done():
                wake[0].set_result(None)

        def settled(i: int, outcome: Any) -> None:
            nonlocal remaining
            if results[i] is not PENDING:
                return
            results[i] = outcome
            remaining -= 1
            woken()

        def retried(task: asyncio.Task[Any]) -> None:
            i = retries.pop(task, -1)
            if i < 0 or task.cancelled():
                return
            error = task.exception()
            settled(i, task.result() if error is None else error)

        def per_call(i: int) -> None:
            """Call ``i`` on the per-call path (it loads a script NOSCRIPT found missing)."""
            call = calls[i]
            task = loop.create_task(
                executors[i].eval(call.call, context=call.context, on_orphan=call.on_orphan)
            )
            retries[task] = i
            task.add_done_callback(retried)

        def answered(i: int) -> Callable[[asyncio.Future[list[Any]]], None]:
            def done(future: asyncio.Future[list[Any]]) -> None:
                entry = submitted[i]
                if entry is None or results[i] is not PENDING:
                    return
                if future.cancelled():  # not by this fan-out (it settles first): closed
                    settled(
                        i,
                        RedisConnectionError(
                            f"{calls[i].context}: the connection was closed",
                            maybe_executed=entry[1].sent,
                        ),
                    )
                    return
                outcome = servers[i].slot_outcome(entry[1], calls[i].context)
                if outcome is NOSCRIPT:
                    per_call(i)
                    return
                settled(i, outcome)

            return done

        for i, call in enumerate(calls):
            entry = servers[i].submit_script(
                call.call.script, call.call.keys, call.call.args, call.on_orphan
            )
            if entry is None:  # cannot happen after _shared_servers; the per-call path then
                per_call(i)
                continue
            submitted[i] = entry
            entry[1].future.add_done_callback(answered(i))

        def expire() -> None:  # the servers' reply timeout: as the per-call deadline
            for i, entry in enumerate(submitted):
                if entry is not None and results[i] is PENDING and not entry[1].future.done():
                    settled(i, servers[i].timed_out(entry[0], entry[1], calls[i].context))

        started = loop.time()
        timer = loop.call_later(max(server.timeout for server in servers), expire)
        grace_timer: asyncio.TimerHandle | None = None
        stop_at: float | None = None  # once enough: when the others stop being awaited
        try:
            while remaining:
                if stop_at is None and enough is not None and enough(results):
                    stop_at = grace_end(started, loop.time())
                    grace_timer = loop.call_at(stop_at, woken)
                if stop_at is not None and loop.time() >= stop_at:
                    break
                await wake[0]
                wake[0] = loop.create_future()
        except asyncio.CancelledError:
            # Answered attempts are undone here; attempts in flight are abandoned (their
            # reply goes to on_orphan; one not written yet never is); a release is never
            # abandoned: it finishes in the background (as the per-call path).
            for i, entry in enumerate(submitted):
                on_orphan = calls[i].on_orphan
                if results[i] is not PENDING:
                    if on_orphan is not None and not isinstance(results[i], BaseException):
                        self._undo(on_orphan, results[i])
                elif entry is not None and calls[i].skip_if_busy:
                    entry[1].future.cancel()
                    entry[0].abandon(entry[1], timed_out=False)
                elif entry is not None and not entry[1].future.done():
                    executors[i]._finish_late(
                        loop.create_task(_late_slot(servers[i], *entry, calls[i].context)),
                        on_orphan,
                    )
            for task, i in list(retries.items()):
                if calls[i].skip_if_busy:
                    task.cancel()
                else:
                    executors[i]._finish_late(task, calls[i].on_orphan)
            raise
        finally:
            timer.cancel()
            if grace_timer is not None:
                grace_timer.cancel()
        for i, entry in enumerate(submitted):  # enough: finished in the background
            if entry is not None and results[i] is PENDING and not entry[1].future.done():
                task = loop.create_task(_late_slot(servers[i], *entry, calls[i].context))
                executors[i]._finish_late(task, calls[i].on_orphan)
        for task, i in list(retries.items()):
            executors[i]._finish_late(task, calls[i].on_orphan)
        for reply in results:
            if isinstance(reply, BaseException) and not isinstance(reply, SyncPrimsError):
                raise reply
        return results

    def _late_calls(self) -> list[asyncio.Task[Any]]:
        """Calls a fan-out stopped waiting for that are not finished yet (only for a client
        of one server: a cluster client's nodes are not told apart)."""
        if not self._late or isinstance(self.transport, ClusterRouter):
            return []
        return list(self._late)

    def _finish_late(self, task: asyncio.Task[Any], on_orphan: Orphan | None) -> None:
        self._late.add(task)

        def done(task: asyncio.Task[Any]) -> None:
            self._late.discard(task)
            if task.cancelled() or task.exception() is not None or on_orphan is None:
                return
            self._undo(on_orphan, task.result())

        task.add_done_callback(done)

    def _undo(self, on_orphan: Orphan, reply: Any) -> None:
        task = asyncio.get_running_loop().create_task(undo_orphan(on_orphan, reply))
        self._undoing.add(task)
        task.add_done_callback(self._undoing.discard)

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

    def subscribed(self, channel: str, route: str | None = None) -> bool:
        return self._driver(channel, route).table.confirmed(channel)

    def _driver(self, channel: str, route: str | None) -> TaskSubscriber:
        """The subscriber connection ``channel`` belongs on (a cluster's: by ``route``)."""
        pubsub = self.pubsub
        return pubsub.driver(channel, route) if isinstance(pubsub, ClusterSubscribers) else pubsub

    def unsubscribe(self, sub: Any) -> None:
        assert isinstance(sub, Subscription)
        sub.table.release(sub)

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

    @property
    def pops_grants(self) -> bool:
        return False  # the reader task runs on the waiter's loop: no hop to save

    def claim_pop(self) -> bool:
        return False

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
        deadline = self.monotonic() + self.bounds.operation_timeout
        # Releases in flight finish first (counted by a plain counter: a release may run on
        # another loop or thread of the process; polled, there is no event to await).
        while not self.releases_done(deadline):  # noqa: ASYNC110
            await asyncio.sleep(0.002)
        if self._late:  # each ends within its server's timeout
            await asyncio.wait(list(self._late), timeout=self.bounds.timeout + 1)
        for server in self._servers():
            await server.drain(self.bounds.timeout)
        pubsub = self.pubsub
        for subscriber in pubsub.stop() if isinstance(pubsub, ClusterSubscribers) else [pubsub]:
            await subscriber.aclose()
        self.watchdog.aclose()
        try:
            await asyncio.wait_for(self.janitor.flush_now(), self.bounds.timeout + 2)
        except Exception as error:  # the keys expire by their TTL
            log.debug("shutdown: deleting unlock latch keys failed: %r", error)
        try:
            await asyncio.wait_for(self.record.withdraw(), self.bounds.timeout + 2)
        except Exception as error:  # it expires by its TTL
            log.debug("shutdown: deleting the client record failed: %r", error)
        await self.services.drain(1.0)
        self.transport.close()
        for server in self._servers():
            await server.release_idle()
        await aclose_source(self.source)

    def _wake_waiters(self) -> None:
        """Wake every waiter of the client (shutdown: they raise ``ClientClosedError``)."""
        pubsub = self.pubsub
        for driver in pubsub.drivers() if isinstance(pubsub, ClusterSubscribers) else [pubsub]:
            driver.table.wake_everyone()

    def after_fork(self) -> None:
        super().after_fork()
        self.pubsub.forget()
        self.watchdog.forget()
        self.janitor.forget()
        self.listeners.forget()
        self.record.forget()
        for server in self._servers():
            server.forget()


async def open_executor(
    source: object, config: Config, *, check: bool = True, connect_timeout: float | None = None
) -> AsyncExecutor:
    """An executor for ``source`` (see :func:`syncprims.asyncio.connect`), on the running loop.

    Args:
        source: a URL or a ``redis.asyncio`` client, pool or cluster.
        config: the options.
        check: ``PING`` Redis now (and load a cluster's slot map); ``False`` connects on
            first use.
        connect_timeout: with a URL, the made client's connect timeout, seconds.

    Raises:
        TypeError: ``source`` is of no accepted type.
        ValueError: a bad URL.
        TransportError, AuthenticationError, ServerReplyError: Redis could not be used.
    """
    resolved = await async_source(source, timeout=config.timeout, connect_timeout=connect_timeout)
    executor = AsyncExecutor(config, resolved, asyncio.get_running_loop())
    if check:
        try:
            await executor.start()
        except BaseException:
            await executor.aclose()
            raise
    return executor


def _shared_servers(executors: Sequence[AsyncExecutor]) -> list[AsyncServer] | None:
    """Each call's server, when every one takes the fast fan-out of
    :meth:`AsyncExecutor._eval_many_shared`: a single server (not a cluster) with an open
    shared connection and no call a fan-out left on it; else ``None``."""
    servers: list[AsyncServer] = []
    for ex in executors:
        server = ex.transport
        if not isinstance(server, AsyncServer) or ex._late or not server.shares_open():
            return None
        servers.append(server)
    return servers


async def _late_slot(
    server: AsyncServer, connection: MuxConnection, slot: Slot, context: str
) -> Any:
    """A fast fan-out's call left to finish in the background: its reply, within what is
    left of the server's timeout (raised as :meth:`AsyncServer.eval` would)."""
    try:
        await asyncio.wait_for(asyncio.shield(slot.future), server.timeout)
    except TimeoutError:
        raise server.timed_out(connection, slot, context) from None
    outcome = server.slot_outcome(slot, context)
    if outcome is NOSCRIPT:  # cannot be: a loaded script stays loaded until SCRIPT FLUSH
        raise RedisTimeoutError(f"{context}: the script was not loaded", maybe_executed=False)
    if isinstance(outcome, BaseException):
        raise outcome
    return outcome


async def _after(earlier: Sequence[asyncio.Task[Any]], coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` once the earlier late calls on its server are finished (they end within
    the server's timeout): a release queued behind a sick server's pending call."""
    try:
        await asyncio.wait(earlier)
    except BaseException:
        coro.close()
        raise
    return await coro
