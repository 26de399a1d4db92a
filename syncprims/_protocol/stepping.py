"""Run a core coroutine to completion on the calling thread (the sync face).

With the sync executor every awaited operation completes before it returns, so the core
coroutine finishes in one ``send`` (not on a background loop: docs/design.md, "Sync over
async, without a thread hop").
"""

from __future__ import annotations

from collections.abc import Coroutine
from typing import Any, TypeVar

__all__ = ["run"]

T = TypeVar("T")


def run(coro: Coroutine[Any, Any, T]) -> T:
    """Step ``coro`` to completion and return its result (exceptions propagate).

    Raises:
        RuntimeError: the coroutine suspended: an internal error (an asyncio operation
            reached the sync face).
    """
    try:
        coro.send(None)
    except StopIteration as stop:
        return stop.value  # type: ignore[no-any-return]
    coro.close()
    raise RuntimeError("syncprims internal error: a blocking call suspended on an event loop")
