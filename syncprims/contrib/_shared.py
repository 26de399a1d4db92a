"""What the integrations share: one client per process, built on the public API only
(``syncprims.connect``), as the rest of ``syncprims.contrib``; lock names per call come from
``syncprims.naming``.
"""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Callable, Mapping
from typing import Any

import syncprims

__all__ = ["ProcessClient"]


class ProcessClient:
    """One blocking client per process: connected on first use, made anew in a forked
    child (gunicorn, uwsgi and Celery prefork workers fork after import), never shared
    across a fork.

    The child drops its parent's client without shutting it down (its services thread
    did not survive the fork; syncprims gives a forked child a new client id anyway), and
    connects its own on first use. Safe to call from several threads.
    """

    def __init__(self, settings: Callable[[], tuple[str | None, Mapping[str, Any]]]) -> None:
        """Args:
        settings: called on each connect: the URL (``None``: ``REDIS_URL``, else
            ``redis://127.0.0.1:6379``) and the options of ``syncprims.connect``.
        """
        self._settings = settings
        self._client: syncprims.Client | None = None
        self._pid = os.getpid()
        self._lock = threading.Lock()
        os.register_at_fork(after_in_child=_forget_in_child(self))

    def get(self) -> syncprims.Client:
        """This process's client, connected now if it has none.

        Raises:
            TypeError, ValueError: bad settings.
            TransportError: Redis could not be reached.
        """
        client = self._client
        if client is not None and self._pid == os.getpid():
            return client
        with self._lock:
            if self._pid != os.getpid():
                self._client, self._pid = None, os.getpid()
            if self._client is None:
                url, options = self._settings()
                self._client = syncprims.connect(url, **options)
            return self._client

    def close(self) -> None:
        """Shut this process's client down, if it has one (a later ``get`` connects again)."""
        with self._lock:
            client, self._client = self._client, None
        if client is not None and self._pid == os.getpid():
            client.shutdown()

    def forget(self) -> None:
        """Drop the client without shutting it down (in a forked child: the parent's)."""
        self._client, self._pid, self._lock = None, os.getpid(), threading.Lock()


def _forget_in_child(holder: ProcessClient) -> Callable[[], None]:
    ref = weakref.ref(holder)

    def forget() -> None:
        alive = ref()
        if alive is not None:
            alive.forget()

    return forget
