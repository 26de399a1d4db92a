"""Celery: run a task at most once at a time per key, with the watchdog.

```python
from syncprims.contrib.celery import ExclusiveTask

@app.task(base=ExclusiveTask, lock_key="reports:{account_id}", on_taken="skip")
def build_report(account_id: int) -> None:
    ...  # one build_report per account at a time, across every worker
```

The run lock is an [RLock][syncprims.RLock] taken **in the worker when the run starts**
(never at enqueue) with an explicit owner per run, renewed by the watchdog as long as the
run lasts, and released (owner-checked) when the run ends, however it ends; a process that
dies holding it frees it within the client's ``lock_watchdog_timeout``. Enqueue-time
de-duplication (``dedup_ttl``) is a separate, optional lease. Every decision is in
docs/celery.md.

Configuration, in the Celery app's settings: ``syncprims_url`` (default: the broker URL if
it is a Redis URL, else ``REDIS_URL``, else ``redis://127.0.0.1:6379``) and
``syncprims_options`` (the options of [`syncprims.connect`][syncprims.connect]). Each
process connects its own client on first use (a prefork child after the fork).
"""

from __future__ import annotations

import ctypes
import hashlib
import inspect
import json
import logging
import threading
import uuid
import weakref
from collections.abc import Callable, Mapping
from contextvars import ContextVar
from typing import Any, Literal, get_args

import attrs
import celery
from celery.exceptions import Ignore
from celery.result import EagerResult
from celery.signals import worker_process_shutdown, worker_shutdown

import syncprims
from syncprims.contrib._shared import ProcessClient
from syncprims.errors import LockLostError, LockNotHeldError, SyncPrimsError
from syncprims.naming import Namer, lock_namer

__all__ = ["SKIPPED", "ExclusiveTask", "RunLockLostError", "TakenPolicy", "get_client"]

log = logging.getLogger("syncprims.celery")

SKIPPED = "SKIPPED"
"""The state of a run skipped because its key was taken (its ``result`` is a dict with
``lock`` and ``reason``), and of a send de-duplicated by ``dedup_ttl``."""

TakenPolicy = Literal["skip", "retry", "wait"]
"""What a run does when its key is taken: ``"skip"`` (state ``SKIPPED``), ``"retry"``
(``self.retry(countdown=lock_retry_countdown)``) or ``"wait"`` (up to ``lock_wait``
seconds, then skip)."""

_DEDUP_HEADER = "syncprims_dedup"
_clients: weakref.WeakKeyDictionary[celery.Celery, ProcessClient] = weakref.WeakKeyDictionary()


def get_client(app: celery.Celery) -> syncprims.Client:
    """This process's syncprims client for ``app`` (connected on first use, made anew in a
    forked worker child).

    Args:
        app: the Celery app, whose ``syncprims_url`` and ``syncprims_options`` settings are
            read when the client connects.

    Returns:
        A blocking [`Client`][syncprims.Client]; shut down with the worker process.

    Raises:
        TypeError, ValueError: bad settings.
        TransportError: Redis could not be reached.
    """
    holder = _clients.get(app)
    if holder is None:

        def settings() -> tuple[str | None, Mapping[str, Any]]:
            url = app.conf.get("syncprims_url")
            broker = str(app.conf.broker_url or "")
            if url is None and broker.startswith(("redis://", "rediss://", "unix://")):
                url = broker
            return url, app.conf.get("syncprims_options") or {}

        holder = _clients.setdefault(app, ProcessClient(settings))
    return holder.get()


@worker_process_shutdown.connect
@worker_shutdown.connect
def _close_clients(**_: object) -> None:
    """A worker process (a prefork child, or the main process of the solo and threads
    pools) stops: shut its clients down."""
    for holder in list(_clients.values()):
        holder.close()


class RunLockLostError(LockLostError):
    """A run's lock was lost while it ran, and the task had ``lock_lost_cancel=True``: raised
    inside the run (its state becomes ``FAILURE``).

    Constructible from its message alone, so that result backends can rebuild it.
    """

    def __init__(
        self,
        message: str = "a task's run lock was lost",
        *,
        name: str = "",
        owner: str | None = None,
    ) -> None:
        super().__init__(message, name=name, owner=owner)


_set_async_exc = ctypes.pythonapi.PyThreadState_SetAsyncExc
_set_async_exc.argtypes = (ctypes.c_ulong, ctypes.py_object)


@attrs.define(eq=False)
class _Run:
    """One run holding its lock: what ``on_lost`` (the client's services thread) and the
    run's own thread share, under ``guard``."""

    name: str
    owner: syncprims.OwnerId
    thread: int = attrs.field(factory=threading.get_ident)
    lost: syncprims.LossReason | None = None
    active: bool = True
    cancelled: bool = False
    guard: threading.Lock = attrs.field(factory=threading.Lock)

    def cancel(self) -> None:
        """Raise ``RunLockLostError`` in the run's thread, once, if the run is still on."""
        with self.guard:
            if self.active and not self.cancelled:
                self.cancelled = True
                _set_async_exc(self.thread, RunLockLostError)

    def stop(self) -> None:
        """The run's body is over: no cancel from now on, and one pending is withdrawn."""
        with self.guard:
            self.active = False
            if self.cancelled:
                _set_async_exc(self.thread, ctypes.py_object())


_current: ContextVar[_Run | None] = ContextVar("syncprims_celery_run", default=None)


class ExclusiveTask(celery.Task[Any, Any]):
    """A Celery task base class: at most one run at a time per key, across every worker.

    Options (class attributes, or keywords of ``@app.task(base=ExclusiveTask, ...)``):

    Attributes:
        lock_key: the run lock's name for a call: a ``str.format`` template whose fields
            name the task's parameters (``"reports:{account_id}"``), or a callable taking
            the task's arguments and returning the name. ``None`` (default):
            ``celery:<task name>:<digest of the arguments>`` (bound to the parameters, as
            JSON; values JSON cannot write are written with ``str()``).
        on_taken: the [policy][syncprims.contrib.celery.TakenPolicy] when the key is taken:
            ``"skip"`` (default), ``"retry"`` or ``"wait"``.
        lock_wait: with ``on_taken="wait"``, the longest wait for the key, seconds.
        lock_retry_countdown: with ``on_taken="retry"``, the retry's countdown, seconds
            (retries count against ``max_retries``, as any).
        lock_lost_cancel: ``True``: when the lock is lost while the run goes on (the
            watchdog found it gone, or could not renew it before its lease ran out), raise
            ``RunLockLostError`` inside the run (at its next Python instruction; a blocking
            call in C finishes first). ``False`` (default): the run is only told
            (``on_lock_lost``, ``lock_lost_reason``).
        dedup_ttl: seconds; when set, ``apply_async`` (and ``delay``) sends a message only if
            no message of the same key was sent and not yet started within that time: a
            lease taken at send, given back when the run starts. ``None`` (default): no
            de-duplication.
    """

    lock_key: str | Callable[..., str] | None = None
    on_taken: TakenPolicy = "skip"
    lock_wait: float = 10.0
    lock_retry_countdown: float = 5.0
    lock_lost_cancel: bool = False
    dedup_ttl: float | None = None

    _namer: Namer | None = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """Check the options when the task is declared (``@app.task`` makes a subclass).

        Raises:
            ValueError: an unknown ``on_taken``, or a duration that is not positive.
            TypeError: a ``lock_key`` template field that names no parameter of ``run``.
        """
        super().__init_subclass__(**kwargs)
        if cls.on_taken not in get_args(TakenPolicy):
            choices = ", ".join(map(repr, get_args(TakenPolicy)))
            raise ValueError(f"task {cls.__name__}: on_taken must be one of {choices}")
        for option in ("lock_wait", "lock_retry_countdown", "dedup_ttl"):
            value = getattr(cls, option)
            if value is not None and not (isinstance(value, int | float) and value > 0):
                raise ValueError(f"task {cls.__name__}: {option} must be positive seconds")
        cls._namer = None
        run = cls.__dict__.get("run")
        if cls.lock_key is not None and run is not None:
            # bind=True, or a class-based task: bound to anything, its signature has no self
            function = run.__func__ if isinstance(run, staticmethod) else run.__get__(object())
            cls._namer = staticmethod(lock_namer(cls.lock_key, function))

    # -- the run: in the worker --------------------------------------------------------

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Run the task holding its key's lock (in the worker, or in a direct call)."""
        client = get_client(self.app)
        self._release_dedup(client)
        name = self.lock_name(args, kwargs)
        run = _Run(name, client.new_owner())
        lock = client.get_lock(name, on_lost=lambda _, reason: self._lost(run, reason))
        if not self._take(lock, run, client):
            return self._skip(name, "its lock is held by another run")
        token = _current.set(run)
        try:
            try:
                return super().__call__(*args, **kwargs)
            finally:
                run.stop()
        except RunLockLostError:
            if not run.cancelled:
                raise
            message = f"task {self.name!r}: lock {name!r} was lost while it ran: {run.lost}"
            raise RunLockLostError(message, name=name) from None
        finally:
            _current.reset(token)
            self._release(lock, run)

    def lock_name(self, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> str:
        """The run lock's name for these arguments (``lock_key``, or the default).

        Raises:
            TypeError: the arguments do not fit the template's parameters.
        """
        if self._namer is not None:
            return self._namer(args, kwargs)
        if self.lock_key is not None:  # a task made without a ``run`` in its class body
            type(self)._namer = staticmethod(lock_namer(self.lock_key, self.run))
            return self.lock_name(args, kwargs)
        try:
            bound = inspect.signature(self.run).bind(*args, **kwargs)
            bound.apply_defaults()
            values: object = bound.arguments
        except TypeError:
            values = [list(args), dict(kwargs)]
        text = json.dumps(values, sort_keys=True, default=str, separators=(",", ":"))
        return f"celery:{self.name}:{hashlib.sha256(text.encode()).hexdigest()[:32]}"

    @property
    def lock_lost_reason(self) -> syncprims.LossReason | None:
        """Why the current run's lock was lost, or ``None`` while it holds it (no Redis call
        is made; read it between steps of a long run)."""
        run = _current.get()
        return None if run is None else run.lost

    def ensure_lock(self) -> None:
        """Check, with Redis, that the current run still holds its lock.

        Raises:
            LockLostError: it was lost.
            LockNotHeldError: called outside a run of this task.
            TransportError: Redis could not be reached.
        """
        run = _current.get()
        if run is None:
            raise LockNotHeldError(f"task {self.name!r} is not running", name=self.name)
        get_client(self.app).get_lock(run.name).ensure_held(owner=run.owner)

    # -- hooks: override to count or react ---------------------------------------------

    def on_skipped(self, lock: str, reason: str) -> None:
        """Called when a run is skipped (its key taken) or a send de-duplicated (after the
        log line): override it to count skips (a metric). Does nothing by default.

        Args:
            lock: the lock's name.
            reason: why, as in the log line.
        """

    def on_lock_lost(self, lock: str, reason: syncprims.LossReason) -> None:
        """Called once when the running task's lock is lost (after the WARNING log line), on
        the syncprims client's services thread: keep it short. Does nothing by default;
        ``lock_lost_cancel`` cancels the run after it.

        Args:
            lock: the lock's name.
            reason: why it was lost.
        """

    # -- enqueue: in the sender --------------------------------------------------------

    def apply_async(self, args: Any = None, kwargs: Any = None, *more: Any, **options: Any) -> Any:
        """Send the task, as Celery's ``apply_async``; with ``dedup_ttl``, only if no message
        of the same key is queued (a retry is never de-duplicated).

        Returns:
            The ``AsyncResult``; for a de-duplicated send, an ``EagerResult`` in state
            ``SKIPPED`` (nothing was sent).

        Raises:
            TransportError: with ``dedup_ttl``, Redis could not be reached.
        """
        if self.dedup_ttl is None or options.get("retries"):
            return super().apply_async(args, kwargs, *more, **options)
        name = self.lock_name(tuple(args or ()), dict(kwargs or {})) + ":queued"
        semaphore = get_client(self.app).get_permit_expirable_semaphore(name, server_time=True)
        for _ in range(2):  # twice: the semaphore may expire between the two calls
            semaphore.try_set_permits(1)
            permit = semaphore.try_acquire(0, lease_time=self.dedup_ttl)
            if permit is not None or semaphore.get_permits() > 0:
                break
        if permit is None:
            reason = "a message of the same key is queued"
            self._log_skip(name, reason)
            return EagerResult(
                uuid.uuid4().hex, {"lock": name, "reason": reason}, SKIPPED, name=self.name
            )
        semaphore.expire(self.dedup_ttl)  # the keys go after the last lease
        headers = {**(options.pop("headers", None) or {}), _DEDUP_HEADER: [name, permit]}
        try:
            return super().apply_async(args, kwargs, *more, headers=headers, **options)
        except BaseException:
            semaphore.try_release(permit)
            raise

    # -- internals ---------------------------------------------------------------------

    def _take(self, lock: syncprims.RLock, run: _Run, client: syncprims.Client) -> bool:
        """Take the run lock per ``on_taken``; ``False``: skip the run.

        A redelivered message (its worker died with ``acks_late``) may find its own earlier
        run's lock, held by a dead process until its lease runs out: it waits that long
        (the client's ``lock_watchdog_timeout``, plus a second) first, whatever the policy.
        """
        wait = self.lock_wait if self.on_taken == "wait" else 0.0
        if (self.request.delivery_info or {}).get("redelivered"):
            wait = max(wait, client.config.lock_watchdog_timeout + 1.0)
        if lock.try_lock(wait, owner=run.owner):
            return True
        if self.on_taken == "retry" and not self.request.called_directly:
            log.info(
                "task %s[%s]: lock %r is taken; retrying", self.name, self.request.id, run.name
            )
            raise self.retry(countdown=self.lock_retry_countdown)
        return False

    def _skip(self, name: str, reason: str) -> None:
        self._log_skip(name, reason)
        if self.request.called_directly:
            return None
        self.update_state(state=SKIPPED, meta={"lock": name, "reason": reason})
        raise Ignore()

    def _log_skip(self, name: str, reason: str) -> None:
        log.info("task %s[%s] skipped: lock %r: %s", self.name, self.request.id, name, reason)
        try:
            self.on_skipped(name, reason)
        except Exception:
            log.exception("on_skipped of task %s raised", self.name)

    def _lost(self, run: _Run, reason: syncprims.LossReason) -> None:
        """``on_lost`` of the run lock (the client's services thread)."""
        run.lost = reason
        log.warning("task %s: lock %r was lost while it ran: %s", self.name, run.name, reason)
        try:
            self.on_lock_lost(run.name, reason)
        except Exception:
            log.exception("on_lock_lost of task %s raised", self.name)
        if self.lock_lost_cancel:
            run.cancel()

    def _release(self, lock: syncprims.RLock, run: _Run) -> None:
        """Release the run lock, checked against the run's owner; never raises."""
        try:
            lock.unlock(owner=run.owner)
        except LockNotHeldError:
            log.warning("task %s: lock %r was no longer held at the run's end", self.name, run.name)
        except SyncPrimsError as error:  # the lease frees it
            log.warning("task %s: lock %r not released (%s)", self.name, run.name, error)

    def _release_dedup(self, client: syncprims.Client) -> None:
        """The message was taken from the queue: give its de-duplication lease back."""
        header = self.request.get(_DEDUP_HEADER) or (self.request.headers or {}).get(_DEDUP_HEADER)
        if not header:
            return
        name, permit = header
        try:
            client.get_permit_expirable_semaphore(name, server_time=True).try_release(permit)
        except SyncPrimsError as error:  # its lease frees it
            log.warning(
                "task %s: de-duplication lease %r not given back (%s)", self.name, name, error
            )
