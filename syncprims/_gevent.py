"""The sync face refuses a process monkey-patched by gevent or eventlet.

The sync face runs a services thread with an asyncio event loop (the watchdog, the janitor),
a pub/sub reader thread, and owners keyed by ``threading.get_ident()``. Under
``gevent.monkey.patch_all()`` those threads become greenlets of one OS thread, and:

* asyncio keeps its running loop per OS thread, not per greenlet: the services loop is seen
  as running by every greenlet of the process, so the application's own ``asyncio.run()``
  fails ("cannot be called from a running event loop"), and a second client's services loop
  cannot start ("Cannot run the event loop while another loop is running"): its watchdog
  never renews, and a lock taken through it expires while its holder still runs;
* with ``socket`` patched but not ``threading``, every greenlet is the same owner (the lock is
  reentrant, so greenlets no longer exclude each other) and the services threads die with
  gevent's ``LoopExit``;
* a native thread (gevent's threadpool) using the client fails with "Cannot switch to a
  different thread" (the pooled sockets belong to the main thread's hub).

Measured with gevent 26.9 on CPython 3.11 (docs/asyncio.md, "gevent and eventlet").
Eventlet's green threads and sockets share these failures. Rather than work sometimes and
lose a lock silently, the sync face refuses such a process when it connects; the asyncio face
(one event loop, no services thread) is unaffected.
"""

from __future__ import annotations

import sys

from syncprims.errors import MonkeyPatchedError

__all__ = ["refuse_if_monkey_patched"]


_ADVICE = (
    "the sync face of syncprims needs real threads and blocking sockets; run it in a process "
    "that is not monkey-patched (Celery's prefork or threads pool, gunicorn's sync or gthread "
    "workers), or use syncprims.asyncio from an asyncio event loop "
    "(docs/asyncio.md, 'gevent and eventlet')"
)


def _patched(module: str, check: str, names: tuple[str, str]) -> list[str]:
    """Which of ``names`` the library's ``module`` says it patched (``check(name)``); never
    imports the library: only one the application imported already is asked."""
    is_patched = getattr(sys.modules.get(module), check, None)
    if is_patched is None:
        return []
    return [name for name in names if is_patched(name)]


def refuse_if_monkey_patched() -> None:
    """Raise when gevent or eventlet has monkey-patched ``socket`` or the threads.

    Only looks: gevent or eventlet is consulted only if the application imported it already.

    Raises:
        MonkeyPatchedError: the process is monkey-patched (also a ``RuntimeError``).
    """
    for library, modules in (
        ("gevent", _patched("gevent.monkey", "is_module_patched", ("socket", "threading"))),
        ("eventlet", _patched("eventlet.patcher", "is_monkey_patched", ("socket", "thread"))),
    ):
        if modules:
            raise MonkeyPatchedError(
                f"this process is monkey-patched by {library} ({', '.join(modules)}): {_ADVICE}"
            )
