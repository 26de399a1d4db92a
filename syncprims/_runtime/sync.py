"""The sync face's executor: every operation completes on the calling thread, so the core
coroutine runs to completion in one step (:func:`syncprims._protocol.stepping.run`;
docs/design.md, "Sync over async, without a thread hop").
"""

from __future__ import annotations

import asyncio
import atexit
import logging
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from typing import Any, TypeVar

import attrs

from syncprims._gevent import refuse_if_monkey_patched
from syncprims._protocol.contracts import (
    PUSHED_TTL_MS,
    WAKE_TOKEN,
    Armed,
    Call,
    Enough,
    Orphan,
    ScriptCall,
    Then,
    WakePolicy,
    WiredCall,
)
from syncprims._protocol.stepping import run
from syncprims._runtime.base import ExecutorBase, live
from syncprims._services.loop import ServiceLoop
from syncprims._services.pubsub import Subscription, ThreadSubscriber
from syncprims._transport.blocking.fanout import Routed, fan_out
from syncprims._transport.blocking.server import SyncRouter, SyncServer
from syncprims._transport.cluster import ClusterRouter, SyncTopology, follow
from syncprims._transport.sources import Source, close_source, sync_source
from syncprims.config import Config
from syncprims.errors import ServerReplyError, SyncPrimsError

__all__ = ["SyncExecutor"]

log = logging.getLogger("syncprims")

SyncTransport = SyncServer | SyncRouter
T = TypeVar("T")

_ROUTED_KEPT = 64  # routed MultiLock attempts an executor keeps (eval_many)
EXIT_TIMEOUT = 0.5
"""Seconds each call made at interpreter exit waits for Redis (:meth:`SyncExecutor.at_exit`)."""


async def _off_loop(work: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """``work()`` run on a worker thread of the running loop (its calls block)."""
    return await asyncio.get_running_loop().run_in_executor(None, lambda: run(work()))


class _OffLoop:
    """The blocking transport, called from the services loop on a worker thread."""

    def __init__(self, transport: SyncTransport) -> None:
        self._transport = transport

    def eval(self, call: ScriptCall, *, context: str) -> Coroutine[Any, Any, Any]:
        return _off_loop(lambda: self._transport.eval(call, context=context))

    def command(
        self, *args: str | int, context: str, route: str | None = None
    ) -> Coroutine[Any, Any, Any]:
        return _off_loop(lambda: self._transport.command(*args, context=context, route=route))

    def eval_then(
        self, call: ScriptCall, then: Then, *, context: str
    ) -> Coroutine[Any, Any, tuple[Any, Any]]:
        return _off_loop(lambda: self._transport.eval_then(call, then, context=context))


class SyncExecutor(ExecutorBase[SyncServer, ThreadSubscriber]):
    """Blocking transport; every operation completes on the calling thread.

    Args:
        config: the client's options.
        source: the blocking redis-py pool or cluster.
    """

    transport: SyncTransport
    refuses_patched = True

    def __init__(self, config: Config, source: Source) -> None:
        super().__init__(config, source)
        timeout = self.bounds.timeout
        self.late_reply_window = timeout  # the fan-out's late lane reads until the deadline

        def server(pool: Any, address: str) -> SyncServer:
            return SyncServer(pool, address=address, timeout=timeout, share=config.pool_share)

        if source.cluster is not None:
            self.transport = SyncRouter(
                SyncTopology(source.cluster), server, self.sleep, source.address
            )
        else:
            self.transport = server(source.pool, source.address)
        self._make_pubsub(ThreadSubscriber)
        self._pop_mutex = threading.Lock()
        self._popping = 0  # waits popping their grant now (claim_pop)
        self._routed: dict[int, tuple[Sequence[Call], list[Routed]]] = {}  # eval_many's
        self.services = ServiceLoop(self.name)
        self._make_services(self.services, _OffLoop(self.transport))

    async def eval(self, call: ScriptCall, *, context: str, on_orphan: Orphan | None = None) -> Any:
        # on_orphan not passed on: a blocking call's reply never outlives its caller
        return await self.transport.eval(call, context=context)

    async def eval_many(self, calls: Sequence[Call], enough: Enough | None = None) -> list[Any]:
        if len(calls) == 1:  # a 1-lock MultiLock (or a lone retry): the single-call path
            single = calls[0]
            ex = single.executor
            server = ex.transport if isinstance(ex, SyncExecutor) else None
            if isinstance(server, SyncServer) and not server.busy():
                # Same outcomes as a fan-out of one (no quorum stops it early, so nothing
                # goes to a late lane; an error is returned, not raised) [hot-10].
                try:
                    return [await ex.eval(single.script_call, context=single.context)]
                except SyncPrimsError as error:
                    return [error]
        # A tuple of calls (a MultiLock's attempt, made once per owner) is routed and encoded
        # once and kept (_ROUTED_KEPT per executor), by identity: the entry holds the tuple,
        # so its id is not reused while kept [hot-5]. Dict reads and writes are atomic: a
        # clear racing a read makes a miss, routed again.
        kept = self._routed.get(id(calls))
        if kept is not None and kept[0] is calls:
            return fan_out(kept[1], enough)
        routed: list[Routed] = []
        keep = isinstance(calls, tuple)  # a cluster's routes move: not kept
        for call in calls:
            ex = call.executor
            if not isinstance(ex, SyncExecutor):
                raise TypeError("a fan-out mixes the sync and the asyncio face")
            transport = ex.transport
            if isinstance(transport, ClusterRouter):
                keep = False
                server = await transport.server_for(call.script_call.keys)
            else:
                server = transport
            if keep and not isinstance(call.script_call, WiredCall):  # sent again: encoded
                routed.append(
                    (server, attrs.evolve(call, script_call=WiredCall.of(call.script_call)))
                )
            else:
                routed.append((server, call))
        replies = fan_out(routed, enough)
        if keep:
            if len(self._routed) >= _ROUTED_KEPT:
                self._routed.clear()
            self._routed[id(calls)] = (calls, routed)
            return replies
        return await follow(calls, replies)  # a cluster's redirections, each alone

    async def subscribe(
        self, channel: str, policy: WakePolicy, route: str | None = None
    ) -> Subscription:
        return await self._driver(channel, route).acquire(channel, policy)

    async def wait_ready(self, sub: Any, timeout: float) -> bool:
        assert isinstance(sub, Subscription)
        ready = sub.ready.wait_sync(timeout)
        sub.raise_if_refused()
        return ready

    async def wait(self, sub: Any, timeout: float | None, armed: Armed | None = None) -> bool:
        assert isinstance(sub, Subscription)
        woken = sub.latch.wait_sync(timeout, armed)
        sub.raise_if_refused()
        return woken

    _pops_refused = False  # the Redis user may not BLPOP the grant lists (an ACL)

    @property
    def pops_grants(self) -> bool:
        """With ``Config.lock_grant_direct``, unless the Redis user may not pop."""
        return self.config.lock_grant_direct and not self._pops_refused

    def claim_pop(self) -> bool:
        if not self.pops_grants:
            return False
        with self._pop_mutex:
            if self._popping >= self.config.lock_grant_direct_limit:
                return False
            self._popping += 1
            return True

    def free_pop(self) -> None:
        with self._pop_mutex:
            self._popping -= 1

    async def wait_pushed(self, sub: Any, key: str, timeout: float, route: str) -> bytes | bool:
        """``BLPOP`` on the calling thread: the released lock's grant comes straight to the
        waiting thread, without the reader thread's hop (docs/grants.md, "The direct
        grant"). A wake-up of the subscription (a release that grants nobody, Redisson's,
        a reconnect) pushes a token on ``key`` from a services worker thread."""
        assert isinstance(sub, Subscription)
        if not self.pops_grants:  # refused meanwhile (an ACL): no pop that would fail again
            return await self.wait(sub, timeout)
        context = "waiting for a grant of " + route

        async def push() -> None:
            await self.command("RPUSH", key, WAKE_TOKEN.decode(), context=context, route=route)
            await self.command("PEXPIRE", key, PUSHED_TTL_MS, context=context, route=route)

        token = sub.latch.enlist(lambda: self.background(push))
        if token is None:  # a permit was kept for this channel: re-check at once
            sub.raise_if_refused()
            return True
        started = self.monotonic()
        try:
            reply = await self.transport.command_held(
                "BLPOP",
                key,
                f"{max(timeout, 0.001):.3f}",
                context=context,
                route=route,
                timeout=timeout + self.bounds.timeout,
            )
        except SyncPrimsError as error:  # no pop (Redis unreachable): the latch instead
            refused = isinstance(error, ServerReplyError) and error.code == "NOPERM"
            if refused and not self._pops_refused:
                self._pops_refused = True  # grants come as messages from now on
                log.warning(
                    "%s: the Redis user may not pop the grant lists (%s): grants come by "
                    "message from now on; grant ~syncprims_lock_handoff:* keys and +blpop "
                    "+lpush +pubsub|numsub (docs/configuration.md)",
                    context,
                    error,
                )
            if not sub.latch.delist(token):
                return True
            log.debug("%s: %r; waiting on the subscription instead", context, error)
            left = timeout - (self.monotonic() - started)
            return await self.wait(sub, left) if left > 0 else False
        except BaseException:
            sub.latch.delist(token)
            raise
        woken = not sub.latch.delist(token)  # woken: its token may come on a later pop
        sub.raise_if_refused()
        if reply is None:
            return woken
        element: bytes = reply[1]
        return element

    async def sleep(self, seconds: float) -> None:
        time.sleep(seconds)  # noqa: ASYNC251 - the sync executor blocks by design

    def background(self, work: Callable[[], Awaitable[None]]) -> None:
        """``work()`` on a worker thread of the services loop (its calls block)."""

        async def blocking() -> None:
            await work()

        self.services.call_soon(lambda: self.services.spawn(_off_loop(blocking)))

    async def _close_services(self) -> None:
        """On the services loop: stop renewing."""
        self.watchdog.aclose()

    def close(self) -> None:
        """Let the releases in flight (other threads') finish, within the operation timeout
        (no acquisition starts meanwhile), stop the services, give the pub/sub connection
        back, close what syncprims made (blocking). A redis-py client passed in stays open.
        Idempotent."""
        if self.closed:
            return
        self.closed = True  # no new acquisition from here (refuse_if_closing)
        self.listeners.close()  # no listener callback from here
        self._wake_waiters()  # each re-checks, sees the client closing, gives up cleanly
        run(self.run_closers())  # leaderships: their work stopped, then resigned
        deadline = self.monotonic() + self.bounds.operation_timeout
        while not self.releases_done(deadline):  # releases in flight finish first
            time.sleep(0.002)
        for subscriber in self._drivers(stop=True):
            subscriber.close()
        if self.services.started and not self.services.in_loop_thread():
            try:
                self.services.run(self._close_services(), self.bounds.timeout + 2)
            except Exception as error:
                log.warning("shutdown of the services did not finish cleanly: %r", error)
        self.services.close()
        # The latch keys and the record, on this thread: also when the services never ran
        # (a client that only connected has a record), and with what a release of another
        # thread discarded meanwhile.
        run(self.delete_now(self.janitor.take() + self.record.withdrawn()))
        self.transport.close()
        close_source(self.source)

    async def aclose(self) -> None:
        """:meth:`close`, awaitable (the core's shape)."""
        self.close()

    def at_exit(self) -> None:
        """At interpreter exit, for a client never shut down: no acquisition from here, and
        its unlock latch keys not yet deleted and its record go, sent on the calling thread
        (the services' worker threads refuse work by then), each reply waited for at most
        :data:`EXIT_TIMEOUT` (no retry: what is left expires by its TTL). A lock still held
        expires by its lease."""
        if not self.closed:
            self.closed = True
            run(self.delete_now(self.janitor.take() + self.record.withdrawn(), EXIT_TIMEOUT))

    def after_fork(self) -> None:
        self.services.forget()
        super().after_fork()


def open_executor(
    source: object, config: Config, *, check: bool = True, connect_timeout: float | None = None
) -> SyncExecutor:
    """An executor for ``source`` (see :func:`syncprims.connect`).

    Args:
        source: a URL or a blocking redis-py client, pool or cluster.
        config: the options.
        check: ``PING`` Redis now (and load a cluster's slot map); ``False`` connects on
            first use.
        connect_timeout: with a URL, the made client's connect timeout, seconds.

    Raises:
        TypeError: ``source`` is of no accepted type.
        ValueError: a bad URL.
        TransportError, AuthenticationError, ServerReplyError: Redis could not be used.
        MonkeyPatchedError: gevent or eventlet monkey-patched the process.
    """
    refuse_if_monkey_patched()
    resolved = sync_source(source, timeout=config.timeout, connect_timeout=connect_timeout)
    executor = SyncExecutor(config, resolved)
    if check:
        try:
            run(executor.start())
        except BaseException:
            executor.close()
            raise
    return executor


@atexit.register
def _at_exit() -> None:
    """Clients the program did not shut down leave no latch keys and no record behind."""
    for executor in live():
        if isinstance(executor, SyncExecutor):
            executor.at_exit()
