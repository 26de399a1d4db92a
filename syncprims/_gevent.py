"""The sync face refuses a process monkey-patched by gevent or eventlet.

Its services thread (an asyncio loop: the watchdog), pub/sub reader and per-thread owners
would become greenlets of one OS thread, and a lock could expire while its holder runs; a
native thread of gevent's threadpool fails with "Cannot switch to a different thread". The
failures, measured with gevent 26.9 on CPython 3.11: docs/asyncio.md, "gevent and eventlet".
The asyncio face (one event loop, no services thread) is unaffected.
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
