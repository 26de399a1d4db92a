"""Which operations are retried after a transport error, and how.

Redisson sends acquire scripts with "no retry" and admin operations with retry
(redisson-spec.md 1.4). Here:

* an operation that **certainly did not run** (the connection failed before the command was
  sent) is retried, whatever it is;
* an **idempotent** operation (reads, unlock with its request id, force unlock, renewals) is
  retried after any connection error or timeout;
* anything else that may have run (an acquire) is never re-sent: the error propagates.

At most ``Config.retry_attempts`` retries, with equal-jitter back-off between
``Config.retry_delay`` bounds, and never one that could end after
``Bounds.operation_timeout`` from the first attempt: that is the hard bound of a call.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from syncprims._protocol.contracts import Executor, Orphan, ScriptCall
from syncprims.errors import TransportError

__all__ = ["releasing", "retry_eval", "with_retry"]

T = TypeVar("T")


async def with_retry(
    ex: Executor,
    op: Callable[[], Awaitable[T]],
    *,
    idempotent: bool,
    failed: TransportError | None = None,
) -> T:
    """Await ``op()``, retrying on transport errors as the module docstring says.

    ``failed``: the error the caller's own first attempt ended with (the hot paths make
    their first attempt themselves, without this coroutine and a closure around it); the
    retries then go on from it as if this function had made that attempt.

    Raises:
        TransportError: the last error, once retries are spent or not allowed.
    """
    bounds = ex.bounds
    deadline = ex.monotonic() + bounds.operation_timeout
    per_attempt = bounds.connect_timeout + bounds.timeout
    attempt = 0
    error = failed
    while True:
        if error is None:
            try:
                return await op()
            except TransportError as raised:
                error = raised
        if attempt >= bounds.retry_attempts or (error.maybe_executed and not idempotent):
            raise error
        delay = ex.retry_delay(attempt)
        if ex.monotonic() + delay + per_attempt > deadline:
            raise error
        error = None
        await ex.sleep(delay)
        attempt += 1


async def releasing(ex: Executor, release: Awaitable[T]) -> T:
    """Await ``release`` counted as a release in flight, which shutdown lets finish
    (``Executor.release_started``): a client shut down while a task or thread releases
    must not leave that lock held until its lease runs out."""
    ex.release_started()
    try:
        return await release
    finally:
        ex.release_ended()


def retry_eval(
    ex: Executor, call: ScriptCall, context: str, on_orphan: Orphan | None, failed: TransportError
) -> Awaitable[Any]:
    """:func:`with_retry` of an acquire's ``ex.eval(call)`` (not idempotent) after the
    caller's own first attempt failed with ``failed``: the closure lives here, so the hot
    paths' frames hold no cells ([hot-3])."""
    return with_retry(
        ex,
        lambda: ex.eval(call, context=context, on_orphan=on_orphan),
        idempotent=False,
        failed=failed,
    )
