"""Django: a client per process from the settings, and "one host of the fleet runs this".

```python
# settings.py
INSTALLED_APPS = [..., "syncprims.contrib.django"]   # the system check
SYNCPRIMS = {"URL": "redis://cache:6379/0", "OPTIONS": {"lock_watchdog_timeout": 30}}

# anywhere
from syncprims.contrib.django import exclusive, get_client

@exclusive("reports:nightly")              # a management command's handle(), a view, a task
def handle(self, *args, **options): ...
```

[`get_client`][syncprims.contrib.django.get_client] gives this process's blocking client,
connected on first use and made anew after a fork (gunicorn, uwsgi and Celery prefork
workers fork after Django is set up). The decorator
[`exclusive`][syncprims.contrib.django.exclusive] runs a call only if its lock is free
(within ``wait_time``); otherwise it skips it cleanly, without an exception. Decisions and
the settings: docs/django.md.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
from collections.abc import Callable, Mapping
from typing import Any, TypeVar, cast

import syncprims
from syncprims.contrib._shared import ProcessClient
from syncprims.errors import SyncPrimsError
from syncprims.naming import lock_namer

__all__ = ["client_settings", "exclusive", "get_client", "reset_client"]

log = logging.getLogger("syncprims.django")

F = TypeVar("F", bound=Callable[..., Any])


def client_settings() -> tuple[str, Mapping[str, Any]]:
    """The ``SYNCPRIMS`` setting: its ``URL`` and its ``OPTIONS`` (the options of
    [`syncprims.connect`][syncprims.connect]).

    Raises:
        django.core.exceptions.ImproperlyConfigured: the setting is missing, is not a dict,
            has no ``URL`` string, or has keys other than ``URL`` and ``OPTIONS``.
    """
    from django.conf import settings
    from django.core.exceptions import ImproperlyConfigured

    value = getattr(settings, "SYNCPRIMS", None)
    if not isinstance(value, Mapping) or not isinstance(value.get("URL"), str):
        raise ImproperlyConfigured(
            'the SYNCPRIMS setting must be a dict with a "URL" string, such as '
            '{"URL": "redis://localhost:6379/0", "OPTIONS": {}}'
        )
    unknown = sorted(set(value) - {"URL", "OPTIONS"})
    options = value.get("OPTIONS") or {}
    if unknown or not isinstance(options, Mapping):
        raise ImproperlyConfigured(
            'the SYNCPRIMS setting takes "URL" and "OPTIONS" (a dict) only, not '
            f"{', '.join(map(repr, unknown)) or 'OPTIONS=' + repr(options)}"
        )
    return value["URL"], options


_holder = ProcessClient(client_settings)


def get_client() -> syncprims.Client:
    """This process's client, from the ``SYNCPRIMS`` setting: connected on first use,
    made anew in a forked child, shut down and remade when the setting changes (in tests,
    ``override_settings``).

    Returns:
        A blocking [`Client`][syncprims.Client], shared by the process's threads.

    Raises:
        django.core.exceptions.ImproperlyConfigured: a bad ``SYNCPRIMS`` setting.
        TypeError, ValueError: bad ``OPTIONS``.
        TransportError: Redis could not be reached.
    """
    return _holder.get()


def reset_client(**_: object) -> None:
    """Shut this process's client down; the next ``get_client()`` connects anew (called
    on Django's ``setting_changed`` for ``SYNCPRIMS``)."""
    _holder.close()


def exclusive(
    name: str | Callable[..., str],
    *,
    wait_time: float = 0,
    lease_time: float | None = None,
    on_taken: Callable[..., Any] | None = None,
) -> Callable[[F], F]:
    """Run each call only while holding its lock: one host of the fleet at a time; a call
    that finds the lock taken is skipped (no exception).

    For a view, a management command's ``handle``, a ``django.tasks`` task (put ``@task``
    above it) or any function, plain or ``async def`` (an async one takes and gives back
    the lock in a worker thread, so that a wait never blocks the event loop).

    Example:
        ```python
        @exclusive("orders:{order_id}", wait_time=2)
        def ship(request: HttpRequest, order_id: int) -> HttpResponse: ...
        ```

    Args:
        name: the lock's name per call: a ``str.format`` template whose fields name the
            function's parameters (``"orders:{order_id}"``), or a callable taking its
            arguments and returning the name.
        wait_time: the longest wait for the lock, seconds; 0 (default) tries once.
        lease_time: as in [`RLock.lock`][syncprims.RLock.lock]; ``None`` (default): the
            watchdog renews the lock until the call returns.
        on_taken: called with the call's arguments when the lock is taken; its result is
            returned. ``None`` (default): a view (an ``HttpRequest`` among the first two
            arguments) answers ``409 Conflict``; a management command (a ``BaseCommand``
            first) writes a line to its stdout and returns, so the command exits 0;
            anything else returns ``None``. Each skip is logged at INFO
            (``syncprims.django``).

    Returns:
        The decorator; the function keeps its signature and type (a skipped call of a
        function that is neither a view nor a command returns ``None`` unless
        ``on_taken`` says otherwise).

    Raises:
        TypeError: a bad ``name`` (at decoration time).
    """

    def decorate(func: F) -> F:
        namer = lock_namer(name, func)

        def begin(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, Any, bool]:
            lock_name = namer(args, kwargs)
            client = get_client()
            lock, owner = client.get_lock(lock_name), client.new_owner()
            return lock, owner, lock.try_lock(wait_time, lease_time, owner=owner)

        def skip(lock: syncprims.RLock, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
            log.info("%s skipped: lock %r is held elsewhere", func.__qualname__, lock.name)
            if on_taken is not None:
                return on_taken(*args, **kwargs)
            return _skipped(lock.name, args)

        if inspect.iscoroutinefunction(func):

            @functools.wraps(func)
            async def run_async(*args: Any, **kwargs: Any) -> Any:
                lock, owner, held = await asyncio.to_thread(begin, args, kwargs)
                if not held:
                    return skip(lock, args, kwargs)
                try:
                    return await func(*args, **kwargs)
                finally:
                    await asyncio.to_thread(_release, lock, owner)

            return cast(F, run_async)

        @functools.wraps(func)
        def run(*args: Any, **kwargs: Any) -> Any:
            lock, owner, held = begin(args, kwargs)
            if not held:
                return skip(lock, args, kwargs)
            try:
                return func(*args, **kwargs)
            finally:
                _release(lock, owner)

        return cast(F, run)

    return decorate


def _skipped(lock_name: str, args: tuple[Any, ...]) -> Any:
    """The default skip: 409 for a view, a line and exit 0 for a command, else ``None``."""
    from django.core.management import BaseCommand
    from django.http import HttpRequest, HttpResponse

    if any(isinstance(arg, HttpRequest) for arg in args[:2]):
        return HttpResponse(f"lock {lock_name!r} is held elsewhere\n", status=409)
    if args and isinstance(args[0], BaseCommand):
        args[0].stdout.write(f"skipped: lock {lock_name!r} is held elsewhere")
    return None


def _release(lock: syncprims.RLock, owner: syncprims.OwnerId) -> None:
    """Release the call's hold (checked against its owner); a hold lost meanwhile is
    logged, not raised: the call has run."""
    try:
        lock.unlock(owner=owner)
    except SyncPrimsError as error:
        log.warning("lock %r was not released at the end of the call: %s", lock.name, error)
