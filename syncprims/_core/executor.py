"""The command executor as the core sees it.

The core is written once, as ``async def`` code that awaits **only** these operations (never
``asyncio`` directly). Two implementations exist (``syncprims._transport.executor``):

* the sync executor completes every operation on the calling thread (blocking redis-py
  sockets, ``threading`` waits), so the sync face runs a core coroutine to completion in a
  single step (:func:`syncprims._core.stepping.run`);
* the asyncio executor awaits ``redis.asyncio`` connections and loop futures on the caller's
  event loop.

Both share the services (pub/sub registry, watchdog, janitor) that run on the client's own
services thread.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import attrs

from syncprims._protocol.scripts import Script
from syncprims._services.janitor import Janitor
from syncprims._services.pubsub import Subscription, WakePolicy
from syncprims._services.watchdog import Watchdog
from syncprims._transport.aio import Orphan
from syncprims.config import Config

__all__ = ["Call", "Executor"]


@attrs.frozen
class Call:
    """One script call of a fan-out (:meth:`Executor.eval_many`), on its own executor."""

    executor: Executor
    script: Script
    keys: Sequence[str]
    args: Sequence[str | int | bytes]
    context: str
    on_orphan: Orphan | None = None


class Executor(Protocol):
    """Operations every core object may await. One executor per client."""

    @property
    def config(self) -> Config:
        """The client's configuration."""

    @property
    def cluster(self) -> bool:
        """Whether the client talks to a Redis Cluster."""

    @property
    def client_id(self) -> str:
        """This client's UUID (a new one in a forked child)."""

    @property
    def watchdog(self) -> Watchdog:
        """Lease renewal; ``register``/``cancel`` never block."""

    @property
    def janitor(self) -> Janitor:
        """Background deletion of short-lived keys."""

    def publish_command_for(self, channel: str, key: str) -> str:
        """``"PUBLISH"``, or ``"SPUBLISH"`` where ``channel`` (of the object at ``key``) is
        sharded (a Redis 7+ cluster, channel and key in one slot)."""

    async def eval(
        self,
        script: Script,
        keys: Sequence[str],
        args: Sequence[str | int | bytes],
        *,
        context: str,
        on_orphan: Orphan | None = None,
    ) -> Any:
        """Run a script once on the node that owns ``keys``.

        Raises:
            TransportError: ``maybe_executed`` tells whether it may have run.
            ServerReplyError: Redis answered with an error.
        """

    async def command(self, *args: str | int, context: str, route: str | None = None) -> Any:
        """Run one plain command once on the node of ``route`` (a key). Raises as :meth:`eval`."""

    async def eval_many(self, calls: Sequence[Call]) -> list[Any]:
        """Run several scripts at once, each on its own executor (all of this face's type).

        The cost is the slowest call, not the sum. Never raises a ``SyncPrimsError``.

        Returns:
            One entry per call: the reply, or the ``SyncPrimsError`` it failed with.
        """

    def subscribe(self, channel: str, policy: WakePolicy, route: str | None = None) -> Subscription:
        """Take a reference on a channel subscription (never blocks).

        Wait with :meth:`wait_ready` before relying on its messages.
        """

    def unsubscribe(self, sub: Subscription) -> None:
        """Drop a reference taken by :meth:`subscribe` (never blocks)."""

    async def wait_ready(self, sub: Subscription, timeout: float) -> bool:
        """Wait until Redis confirmed the subscription; ``False`` after ``timeout`` seconds."""

    async def wait(self, sub: Subscription, timeout: float | None) -> bool:
        """Wait for a wake-up on the subscription; ``False`` after ``timeout`` seconds."""

    async def sleep(self, seconds: float) -> None:
        """Sleep ``seconds``."""

    def monotonic(self) -> float:
        """A monotonic clock, seconds."""

    def wall_ms(self) -> int:
        """The wall clock, epoch milliseconds (for scripts that compare client times)."""
