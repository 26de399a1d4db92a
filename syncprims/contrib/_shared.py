"""What the integrations share: one client per process, and lock names per call.

Both are built on the public API only (``syncprims.connect``), as the rest of
``syncprims.contrib``.
"""

from __future__ import annotations

import inspect
import os
import string
import threading
import weakref
from collections.abc import Callable, Mapping
from typing import Any

import syncprims

__all__ = ["Namer", "ProcessClient", "lock_namer"]

Namer = Callable[[tuple[Any, ...], Mapping[str, Any]], str]
"""The lock name for one call's ``(args, kwargs)``."""


def lock_namer(name: str | Callable[..., str], func: Callable[..., object]) -> Namer:
    """How to name the lock of each call of ``func`` (as ``Client.synchronized`` does).

    Args:
        name: a ``str.format`` template whose fields name ``func``'s parameters
            (``"orders:{order_id}"``, ``"user:{user.id}"``; defaults apply), or a callable
            taking ``func``'s arguments and returning the name.
        func: the function whose calls are named.

    Raises:
        TypeError: ``name`` is neither; a template field that names no parameter of
            ``func``, or a malformed template.
    """
    if callable(name):
        namer = name

        def call(args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> str:
            value = namer(*args, **kwargs)
            if not isinstance(value, str):
                raise TypeError(f"the lock name function returned {type(value).__name__}, not str")
            return value

        return call
    if not isinstance(name, str):
        raise TypeError(f"a lock name is a str template or a callable, not {type(name).__name__}")
    template = name
    signature = inspect.signature(func)
    try:
        fields = [field for _, field, _, _ in string.Formatter().parse(template) if field]
    except ValueError as error:
        raise TypeError(f"bad lock name template {template!r}: {error}") from None
    for field in fields:
        if field.split(".", 1)[0].split("[", 1)[0] not in signature.parameters:
            raise TypeError(
                f"lock name template {template!r}: {{{field}}} names no parameter of "
                f"{getattr(func, '__qualname__', func)}{signature}"
            )

    def format_call(args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> str:
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        return template.format_map(bound.arguments)

    return format_call if fields else lambda args, kwargs: template


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
