"""Where a client's background services (the watchdog, the key janitor) run: the sync face's
:class:`ServiceLoop` (one event loop in one daemon thread per client, started on first use)
or the asyncio face's :class:`CallerLoop` (the client's own event loop); docs/design.md,
"Sync over async, without a thread hop".
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Callable, Coroutine
from typing import Any, Protocol, TypeVar

from syncprims.errors import ClientClosedError

__all__ = ["CallerLoop", "Scheduler", "ServiceLoop"]

log = logging.getLogger("syncprims.services")
T = TypeVar("T")


class Scheduler(Protocol):
    """What the watchdog and the janitor need from the loop they run on."""

    def call_soon(self, fn: Callable[..., object], *args: Any) -> None:
        """Run ``fn(*args)`` on the loop soon; thread-safe, never blocks."""

    def spawn(self, coro: Coroutine[Any, Any, object]) -> None:
        """Start a task on the loop (called on the loop); kept alive until done."""


class _Background:
    """What both loops share: the background tasks they keep alive until done."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._closed = False
        self._tasks: set[asyncio.Task[Any]] = set()

    def spawn(self, coro: Coroutine[Any, Any, object]) -> None:
        """Start a task on the loop (call this on the loop); it is kept alive until done.
        After ``close()``, ``coro`` is closed unstarted: the loop is ending or the client's
        connections are closed, and a task started now could only fail, or be destroyed
        pending."""
        if self._closed:
            coro.close()
            return
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)

    def _task_done(self, task: asyncio.Task[Any]) -> None:
        """A background task ended: forget it; log its error, if any."""
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("%s: background task failed", self._name, exc_info=task.exception())


class ServiceLoop(_Background):
    """Starts its thread on first use; :meth:`close` stops it."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.forget()

    def forget(self) -> None:
        """The state a new loop starts with; after ``os.fork()``, in the child: the thread
        did not survive; start afresh lazily."""
        self._mutex = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._tasks = set()

    @property
    def started(self) -> bool:
        """Whether the thread is running."""
        return self._loop is not None

    def loop(self) -> asyncio.AbstractEventLoop:
        """The running loop, starting the thread if needed.

        Raises:
            ClientClosedError: after :meth:`close`.
        """
        loop = self._loop
        if loop is not None:
            return loop
        with self._mutex:
            if self._closed:
                raise ClientClosedError(f"{self._name} is shut down")
            if self._loop is None:
                ready = threading.Event()
                thread = threading.Thread(
                    target=self._run, args=(ready,), name=f"{self._name}-services", daemon=True
                )
                thread.start()
                ready.wait()
                self._thread = thread
            assert self._loop is not None
            return self._loop

    def _run(self, ready: threading.Event) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        ready.set()
        try:
            loop.run_forever()
            pending = [t for t in asyncio.all_tasks(loop) if not t.done()]
            for task in pending:
                task.cancel()
            if pending:
                loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            loop.run_until_complete(loop.shutdown_asyncgens())
            # A blocking call still out on a worker thread (the janitor's UNLINK, a renewal:
            # a cancelled task's thread runs on) ends before the loop does, so that its
            # connection is back when the client's shutdown returns (each call is bounded
            # by its own timeout; close() waits at most its own).
            loop.run_until_complete(loop.shutdown_default_executor())
        finally:
            loop.close()

    def in_loop_thread(self) -> bool:
        """Whether the caller runs on the services thread."""
        return self._thread is threading.current_thread()

    def call_soon(self, fn: Callable[..., object], *args: Any) -> None:
        """Run ``fn(*args)`` on the loop soon; never blocks. A no-op after :meth:`close`."""
        with contextlib.suppress(ClientClosedError, RuntimeError):  # closed, or closing
            self.loop().call_soon_threadsafe(fn, *args)

    def run(self, coro: Coroutine[Any, Any, T], timeout: float) -> T:
        """Run ``coro`` on the loop; wait for it at most ``timeout`` seconds (not on the loop)."""
        future = asyncio.run_coroutine_threadsafe(coro, self.loop())
        return future.result(timeout)

    def close(self, timeout: float = 5.0) -> None:
        """Stop the loop and join the thread (at most ``timeout`` seconds). Idempotent."""
        with self._mutex:
            self._closed = True
            loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(loop.stop)
        if thread is not threading.current_thread():
            thread.join(timeout)


class CallerLoop(_Background):
    """The asyncio face's services loop: the client's own event loop."""

    def __init__(self, loop: asyncio.AbstractEventLoop, name: str) -> None:
        super().__init__(name)
        self._loop = loop

    def call_soon(self, fn: Callable[..., object], *args: Any) -> None:
        """Run ``fn(*args)`` on the loop soon; a no-op once the loop or this is closed."""
        if self._closed:
            return
        with contextlib.suppress(RuntimeError):
            self._loop.call_soon_threadsafe(fn, *args)

    def close(self) -> None:
        """The client is shut down: no more background work (its keys expire by TTL)."""
        self._closed = True

    async def drain(self, timeout: float) -> None:
        """Wait (at most ``timeout`` seconds) for the background tasks, then cancel those
        left (and wait a second more for them)."""
        if not self._tasks:
            return
        _, pending = await asyncio.wait(list(self._tasks), timeout=timeout)
        for task in pending:
            task.cancel()
        if pending:
            await asyncio.wait(pending, timeout=1)
