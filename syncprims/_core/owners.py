"""Owner ids, captured at the edge by each face.

The sync face's owner is the calling thread (``threading.get_ident()``, like Redisson's
thread id). The asyncio face's owner is the calling *task*: two tasks on one thread must
exclude each other. Tasks are numbered from a per-process counter on first use (never
``id(task)``, which is reused after a task is freed).

An explicit owner (:class:`OwnerId`, from ``client.new_owner()``) replaces the thread or
task for the calls that pass it, so that a hold can be taken in one thread or task and
released in another (Redisson's ``threadId`` overloads, redis-py's token). Its ids are
negative, from a per-process counter: they never equal a thread ident or a task number.
"""

from __future__ import annotations

import asyncio
import itertools
import threading
from collections.abc import Callable
from typing import Any

import attrs

__all__ = ["OwnerId", "current_task_owner", "current_thread_owner", "explicit_owner", "new_owner"]

# A plain dict, emptied by each task's done callback, not a WeakKeyDictionary ([hot-4]).
_task_owners: dict[asyncio.Future[Any], int] = {}
_current_task: Callable[[], asyncio.Task[Any] | None] = asyncio.current_task
_next_task_owner = itertools.count(1)
_next_explicit_owner = itertools.count(1)


def _negative(instance: object, attribute: attrs.Attribute[int], value: int) -> None:
    if type(value) is not int or value >= 0:
        raise ValueError(
            f"an OwnerId's value is a negative int made by client.new_owner(), not {value!r}"
        )


@attrs.frozen
class OwnerId:
    """An explicit lock owner: pass it as ``owner=`` to take a hold in one thread or task
    and release it (or renew, check, count it) in another.

    Make one with ``client.new_owner()`` (either face). A hold belongs to the pair (the
    client, the owner): the same ``OwnerId`` used on another client's objects is another
    owner there. Holds taken with it are reentrant as usual (count them with
    ``get_hold_count(owner=...)``), renewed by the watchdog until the last release, and
    reported through ``on_lost`` like any other hold.

    Attributes:
        value: the owner id in the lock's hash field ``<client id>:<value>``; negative, so it
            never names a thread or a task.

    Raises:
        ValueError: made with a value that is not a negative ``int`` (use
            ``client.new_owner()``).
    """

    value: int = attrs.field(validator=_negative)


def new_owner() -> OwnerId:
    """A new explicit owner, unique in this process."""
    return OwnerId(-next(_next_explicit_owner))


def explicit_owner(owner: object) -> int:
    """The owner id of an ``owner=`` argument.

    Raises:
        TypeError: ``owner`` is not an :class:`OwnerId`.
    """
    if type(owner) is not OwnerId:
        raise TypeError(
            f"owner must be an OwnerId (client.new_owner()), not {type(owner).__name__}"
        )
    return owner.value


def current_thread_owner() -> int:
    """The calling thread's owner id."""
    return threading.get_ident()


def current_task_owner() -> int:
    """The calling asyncio task's owner id.

    Raises:
        RuntimeError: not called from inside an asyncio task.
    """
    task = _current_task()
    if task is None:
        raise RuntimeError("syncprims.asyncio objects must be used from inside an asyncio task")
    owner = _task_owners.get(task)
    if owner is None:
        owner = _task_owners[task] = next(_next_task_owner)
        task.add_done_callback(_task_owners.pop)  # the entry lives as long as the task
    return owner
