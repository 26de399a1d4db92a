"""Thread-safe wake-up primitives that both faces can wait on.

A waiter of the sync face blocks its thread on a ``threading`` lock; a waiter of the asyncio
face awaits a future of its own event loop. Either is woken by the pub/sub reader (a thread,
or a task on the waiter's own loop) without blocking it.

:class:`Latch` is Redisson's ``RedissonLockEntry`` latch: a counting semaphore that starts at
zero; an unlock message releases one permit (or every waiter); a permit nobody waits for is
kept, so that the next wait returns at once and the waiter re-checks the lock.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections import deque
from collections.abc import Callable

from syncprims._protocol.contracts import Armed

__all__ = ["Latch", "Signal"]


class _ThreadWaiter:
    __slots__ = ("_lock",)

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._lock.acquire()

    def wake(self) -> None:
        self._lock.release()

    def block(self, timeout: float | None) -> bool:
        if timeout is None:
            return self._lock.acquire()
        return self._lock.acquire(True, max(timeout, 0.0))


class _CallbackWaiter:
    __slots__ = ("_wake",)

    def __init__(self, wake: Callable[[], None]) -> None:
        self._wake = wake

    def wake(self) -> None:
        self._wake()


def _resolve(fut: asyncio.Future[bool], value: bool) -> None:
    if not fut.done():
        fut.set_result(value)


class _TaskWaiter:
    __slots__ = ("_fut", "_loop")

    def __init__(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._fut: asyncio.Future[bool] = self._loop.create_future()

    def wake(self) -> None:
        try:
            running: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:  # woken from a thread without a loop
            running = None
        if running is self._loop:  # the asyncio face's reader task: no thread hop
            _resolve(self._fut, True)
            return
        # RuntimeError: the waiter's loop is closed, so nobody is waiting any more.
        with contextlib.suppress(RuntimeError):
            self._loop.call_soon_threadsafe(_resolve, self._fut, True)

    async def block(self, timeout: float | None) -> bool:
        if timeout is None:
            return await self._fut
        handle = self._loop.call_later(max(timeout, 0.0), _resolve, self._fut, False)
        try:
            return await self._fut
        finally:
            handle.cancel()


_Waiter = _ThreadWaiter | _CallbackWaiter | _TaskWaiter


class _WaiterQueue:
    """Waiters in FIFO order, under one mutex."""

    def __init__(self) -> None:
        self._mutex = threading.Lock()
        self._waiters: deque[_Waiter] = deque()

    def _detach(self, waiter: _Waiter) -> bool:
        """Remove a waiter that stopped waiting; ``False`` when it had been woken already."""
        with self._mutex:
            try:
                self._waiters.remove(waiter)
            except ValueError:
                return False
            return True

    def waiting(self) -> int:
        """How many waiters are blocked now."""
        return len(self._waiters)


class Latch(_WaiterQueue):
    """A counting wake-up latch (Redisson ``RedissonLockEntry``)."""

    def __init__(self) -> None:
        super().__init__()
        self._permits = 0

    def release(self, n: int = 1, cap: int | None = None) -> None:
        """Wake up to ``n`` waiters; keep the rest as permits, at most ``cap`` in total."""
        with self._mutex:
            while n > 0 and self._waiters:
                self._waiters.popleft().wake()
                n -= 1
            if n > 0:
                permits = self._permits + n
                self._permits = permits if cap is None else min(permits, cap)

    def drain(self) -> None:
        """Drop every kept permit."""
        with self._mutex:
            self._permits = 0

    def _wake_one(self, waiter: _Waiter) -> None:
        """Wake ``waiter`` if it is still queued (not woken, not timed out)."""
        if self._detach(waiter):
            waiter.wake()

    def _park(self, waiter: _Waiter, armed: Armed | None) -> bool:
        """Queue ``waiter`` (then tell ``armed`` how to wake it alone); ``True`` when a
        permit was taken instead and nothing was queued."""
        with self._mutex:
            if self._permits > 0:
                self._permits -= 1
                return True
            self._waiters.append(waiter)
        if armed is not None:
            armed(lambda: self._wake_one(waiter))
        return False

    def _interrupted(self, waiter: _Waiter) -> None:
        """A wait ended by an exception: interrupted after being woken, it passes the
        wake-up on."""
        if not self._detach(waiter):
            self.release(1)

    def wait_sync(self, timeout: float | None, armed: Armed | None = None) -> bool:
        """Block the calling thread until woken, a permit is available, or ``timeout`` seconds.
        ``armed``: see :data:`Armed` (not called when a permit was taken).

        Returns:
            ``True`` when woken (or a permit was taken), ``False`` on timeout.
        """
        waiter = _ThreadWaiter()
        if self._park(waiter, armed):
            return True
        try:
            woken = waiter.block(timeout)
        except BaseException:  # interrupted (KeyboardInterrupt...)
            self._interrupted(waiter)
            raise
        return woken or not self._detach(waiter)  # else woken concurrently with the timeout

    def enlist(self, wake: Callable[[], None]) -> object | None:
        """Wait elsewhere: ``wake()`` is called (on the waking thread, so it must not block)
        in place of a blocked waiter's wake-up; ``None`` when a permit was taken instead (the
        caller is woken already). Leave with :meth:`delist`."""
        waiter = _CallbackWaiter(wake)
        return None if self._park(waiter, None) else waiter

    def delist(self, token: object) -> bool:
        """Stop a wait of :meth:`enlist`; ``False`` when it was woken already."""
        assert isinstance(token, _Waiter)
        return self._detach(token)

    async def wait_async(self, timeout: float | None, armed: Armed | None = None) -> bool:
        """As :meth:`wait_sync`, awaited on the running loop."""
        waiter = _TaskWaiter()
        if self._park(waiter, armed):
            return True
        try:
            woken = await waiter.block(timeout)
        except BaseException:  # cancelled
            self._interrupted(waiter)
            raise
        return woken or not self._detach(waiter)  # else woken concurrently with the timeout


class Signal(_WaiterQueue):
    """A one-shot event that can also carry a failure; waitable from both faces."""

    def __init__(self) -> None:
        super().__init__()
        self._set = False
        self._error: BaseException | None = None

    @property
    def is_set(self) -> bool:
        """Whether :meth:`set` was called."""
        return self._set

    def set(self, error: BaseException | None = None) -> None:
        """Set the signal (with ``error``, waiters raise it) and wake every waiter."""
        with self._mutex:
            if self._set:
                return
            self._error = error  # before _set: the waits read _set without the mutex
            self._set = True
            waiters, self._waiters = self._waiters, deque()
        for waiter in waiters:
            waiter.wake()

    def _result(self) -> bool:
        if self._error is not None:
            raise self._error
        return True

    def _park(self, waiter: _Waiter) -> bool:
        """Queue ``waiter``; ``False`` when set meanwhile (nothing queued)."""
        with self._mutex:
            if self._set:
                return False
            self._waiters.append(waiter)
            return True

    def wait_sync(self, timeout: float | None) -> bool:
        """Block until set or ``timeout`` seconds; ``True`` when set.

        Raises:
            BaseException: the error given to :meth:`set`.
        """
        if not self._set:
            waiter = _ThreadWaiter()
            if self._park(waiter):
                try:
                    woken = waiter.block(timeout)
                finally:
                    self._detach(waiter)
                if not (woken or self._set):
                    return False
        return self._result()

    async def wait_async(self, timeout: float | None) -> bool:
        """As :meth:`wait_sync`, awaited on the running loop."""
        if not self._set:
            waiter = _TaskWaiter()
            if self._park(waiter):
                try:
                    woken = await waiter.block(timeout)
                finally:
                    self._detach(waiter)
                if not (woken or self._set):
                    return False
        return self._result()
