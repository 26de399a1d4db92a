"""The shapes the layers agree on, in one neutral module.

Pure: typing only, no I/O. The core algorithms (``syncprims._core``) are written against
``Executor``; the transport (``syncprims._transport``) and the services
(``syncprims._services``) implement parts of it and depend on these small protocols, never
on each other's modules; the executors (``syncprims._runtime``) put them together.

* ``ScriptCall`` is a script call: the script, its ``KEYS`` and its ``ARGV``. A fan-out
  call (``Call``) is a script call on a given executor.
* ``Wakeable`` is what a wake-up rule (``WakePolicy``) may do to the local waiters of
  one channel; each primitive's rule lives beside its algorithm.
* ``RenewalKind`` says how one kind of hold is renewed by the watchdog.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

import attrs

from syncprims._protocol.loss import LossReason
from syncprims._protocol.scripts import Script

if TYPE_CHECKING:
    from syncprims._protocol.timing import Bounds
    from syncprims.config import Config

__all__ = [
    "Call",
    "Executor",
    "HoldLostCallback",
    "KeyJanitor",
    "LostCallback",
    "Orphan",
    "RenewalKind",
    "RenewalRegistry",
    "ScriptCall",
    "Subscription",
    "WakePolicy",
    "Wakeable",
]

Arg = str | int | bytes

Orphan = Callable[[Any], Awaitable[None]]
"""Awaited with the late reply of a call whose caller gave up (an abandoned acquire)."""

LostCallback = Callable[[str, LossReason], None]
"""``on_lost(name, reason)``: a lock's hold was lost (the public callback of ``get_lock``).

``reason`` is a [LossReason][syncprims.LossReason], a ``str`` enum: a callback written as
``(name: str, reason: str) -> None`` fits too."""

HoldLostCallback = Callable[[str, str, LossReason], None]
"""``callback(name, owner_field, reason)``: the watchdog found a hold lost."""


@attrs.frozen
class ScriptCall:
    """One script call: the script, its ``KEYS`` and its ``ARGV``.

    Attributes:
        script: the Lua script.
        keys: ``KEYS`` (every key of one call is in one cluster slot).
        args: ``ARGV`` (text, integers or raw bytes).
    """

    script: Script
    keys: Sequence[str]
    args: Sequence[Arg]


@attrs.frozen
class Call:
    """A script call of a fan-out (``Executor.eval_many``), on its own executor.

    Attributes:
        executor: the client that runs it.
        call: the script call.
        context: what it does, for messages.
        on_orphan: undoes it if its caller goes away before the reply (asyncio face).
    """

    executor: Executor
    call: ScriptCall
    context: str
    on_orphan: Orphan | None = None


class Wakeable(Protocol):
    """The local waiters of one channel, as a wake-up rule sees them."""

    def wake(self, n: int) -> None:
        """Wake up to ``n`` waiters (a waiter between two waits gets a permit instead)."""

    def wake_all(self) -> None:
        """Wake every waiter, blocked now or about to wait."""


WakePolicy = Callable[[Wakeable, bytes], None]
"""How a message on a channel wakes that channel's local waiters."""


class Subscription(Protocol):
    """A reference on a channel subscription, as the core holds it."""

    @property
    def channel(self) -> str:
        """The channel."""


@attrs.frozen
class RenewalKind:
    """How one kind of hold is renewed: a script and how to call it for a batch.

    Attributes:
        name: for messages, e.g. ``"lock"``.
        script: returns one integer per registration of the batch, 1 renewed, 0 gone.
        command: ``command(lease_ms, [(name, field), ...]) -> (KEYS, ARGV)``.
    """

    name: str
    script: Script
    command: Callable[[int, list[tuple[str, str]]], tuple[list[str], list[Arg]]]


class RenewalRegistry(Protocol):
    """The watchdog, as the core uses it. Never blocks."""

    def register(
        self,
        name: str,
        field: str,
        on_lost: HoldLostCallback | None = None,
        *,
        kind: RenewalKind,
        since: float | None = None,
    ) -> None:
        """Keep ``name`` alive while ``field`` holds it (once per watchdog acquire)."""

    def cancel(self, name: str, field: str) -> None:
        """Undo one ``register``."""

    def cancel_all(self, name: str) -> None:
        """Stop renewing ``name`` for every owner."""

    def lease_end(self, name: str, field: str) -> float | None:
        """Until when (monotonic seconds) the hold is known valid; ``None``: not renewed."""


class KeyJanitor(Protocol):
    """Background deletion of short-lived keys. Never blocks."""

    def discard(self, key: str) -> None:
        """Delete ``key`` soon."""


class Executor(Protocol):
    """Operations every core object may await. One executor per client.

    The sync face's executor completes every operation on the calling thread without
    suspending (so a core coroutine finishes in one step); the asyncio face's awaits its
    event loop.
    """

    @property
    def config(self) -> Config:
        """The client's options."""

    @property
    def bounds(self) -> Bounds:
        """How long calls may take (resolved from the options and the redis-py client)."""

    @property
    def cluster(self) -> bool:
        """Whether the client talks to a Redis Cluster."""

    @property
    def client_id(self) -> str:
        """This client's UUID (a new one in a forked child)."""

    @property
    def watchdog(self) -> RenewalRegistry:
        """Lease renewal."""

    @property
    def janitor(self) -> KeyJanitor:
        """Background deletion of short-lived keys."""

    def publish_command_for(self, channel: str, key: str) -> str:
        """``"PUBLISH"``, or ``"SPUBLISH"`` where ``channel`` (of the object at ``key``) is
        sharded (a Redis 7+ cluster, channel and key in one slot)."""

    async def eval(
        self,
        script: Script,
        keys: Sequence[str],
        args: Sequence[Arg],
        *,
        context: str,
        on_orphan: Orphan | None = None,
    ) -> Any:
        """Run a script once on the node that owns ``keys``.

        Raises:
            TransportError: ``maybe_executed`` tells whether it may have run.
            ServerReplyError: Redis answered with an error.
        """

    async def command(
        self, *args: str | int, context: str, route: str | None = None, timeout: float | None = None
    ) -> Any:
        """Run one plain command once on the node of ``route`` (a key); ``timeout``: seconds
        for its reply instead of the usual (blocking commands). Raises as ``eval``."""

    async def eval_many(self, calls: Sequence[Call]) -> list[Any]:
        """Run several scripts at once, each on its own executor (all of this face's type).

        The cost is the slowest call, not the sum. Never raises a ``SyncPrimsError``.

        Returns:
            One entry per call: the reply, or the ``SyncPrimsError`` it failed with.
        """

    async def subscribe(
        self, channel: str, policy: WakePolicy, route: str | None = None
    ) -> Subscription:
        """Take a reference on a channel subscription (``route``: the key of the object the
        channel belongs to). Wait with ``wait_ready`` before relying on its messages."""

    def unsubscribe(self, sub: Subscription) -> None:
        """Drop a reference taken by ``subscribe`` (never blocks)."""

    async def wait_ready(self, sub: Subscription, timeout: float) -> bool:
        """Wait until Redis confirmed the subscription; ``False`` after ``timeout`` seconds.

        Raises:
            ServerReplyError: Redis refused the subscription (an ACL without the channel).
        """

    async def wait(self, sub: Subscription, timeout: float | None) -> bool:
        """Wait for a wake-up on the subscription; ``False`` after ``timeout`` seconds."""

    async def sleep(self, seconds: float) -> None:
        """Sleep ``seconds``."""

    def monotonic(self) -> float:
        """A monotonic clock, seconds."""

    def wall_ms(self) -> int:
        """The wall clock, epoch milliseconds (for scripts that compare client times)."""

    def retry_delay(self, attempt: int) -> float:
        """The pause, seconds, before retry number ``attempt`` (0 first): equal jitter
        between the ``retry_delay`` bounds."""
