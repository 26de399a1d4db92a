"""Owner ids, captured at the edge by each face.

The sync face's owner is the calling thread (``threading.get_ident()``, like Redisson's
thread id). The asyncio face's owner is the calling *task*: two tasks on one thread must
exclude each other. Tasks are numbered from a per-process counter on first use (never
``id(task)``, which is reused after a task is freed).
"""

from __future__ import annotations

import asyncio
import itertools
import threading
import weakref

__all__ = ["current_task_owner", "current_thread_owner"]

_task_owners: weakref.WeakKeyDictionary[asyncio.Task[object], int] = weakref.WeakKeyDictionary()
_next_task_owner = itertools.count(1)


def current_thread_owner() -> int:
    """The calling thread's owner id."""
    return threading.get_ident()


def current_task_owner() -> int:
    """The calling asyncio task's owner id.

    Raises:
        RuntimeError: not called from inside an asyncio task.
    """
    task = asyncio.current_task()
    if task is None:
        raise RuntimeError("syncprims.asyncio objects must be used from inside an asyncio task")
    owner = _task_owners.get(task)
    if owner is None:
        owner = _task_owners[task] = next(_next_task_owner)
    return owner
