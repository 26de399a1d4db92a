"""The shapes the layers agree on, in one neutral module.

Pure: typing (and ``ClientParts``, a client's registry of parts), no I/O. The core
algorithms (``syncprims._core``) are written against ``Executor``; the transport
(``syncprims._transport``) and the services (``syncprims._services``) implement parts of it
and depend on these small protocols, never on each other's modules; the executors
(``syncprims._runtime``) put them together.
"""

from __future__ import annotations

import threading
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, Literal, Protocol, TypeVar, cast

import attrs

from syncprims._protocol.loss import LossReason
from syncprims._protocol.scripts import Script
from syncprims._protocol.wire import Wired, wired

if TYPE_CHECKING:
    from syncprims._protocol.timing import Bounds

__all__ = [
    "PENDING",
    "PUSHED_TTL_MS",
    "WAKE_TOKEN",
    "Call",
    "ClientPart",
    "ClientParts",
    "Enough",
    "Executor",
    "HoldLostCallback",
    "KeyJanitor",
    "ListenerRegistry",
    "LostCallback",
    "ObjectCallback",
    "Orphan",
    "RenewalKind",
    "RenewalRegistry",
    "ScriptCall",
    "Settings",
    "Subscription",
    "Then",
    "Wakeable",
    "WakePolicy",
    "WiredCall",
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

ObjectCallback = Callable[[str], None]
"""``on_expired(name)`` / ``on_deleted(name)``: an object listener's callback (Redisson's
``ExpiredObjectListener.onExpired`` / ``DeletedObjectListener.onDeleted``)."""


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

    def command(self) -> tuple[Any, ...]:
        """The ``EVALSHA`` command that runs it."""
        keys = self.keys
        return ("EVALSHA", self.script.sha, len(keys), *keys, *self.args)


@attrs.frozen
class WiredCall(ScriptCall):
    """A :class:`ScriptCall` whose ``EVALSHA`` command is encoded already
    (:mod:`syncprims._protocol.wire`): kept and sent again (an owner's acquire), or spliced
    per call (an unlock's key). The transports send :attr:`wired`'s bytes as they are.

    Attributes:
        wired: the command, with its encoding.
    """

    wired: Wired = attrs.field(eq=False, repr=False)

    def command(self) -> tuple[Any, ...]:
        """The ``EVALSHA`` command that runs it, encoded already."""
        return self.wired

    @classmethod
    def of(cls, call: ScriptCall) -> WiredCall:
        """``call`` with its command encoded now."""
        return cls(call.script, call.keys, call.args, wired(call.command()))


@attrs.frozen
class Then:
    """A plain command written right behind a script call, in the same write on the same
    connection (``WAIT`` or ``WAITAOF`` behind an acquire: one round trip for both).

    Attributes:
        command: the command and its arguments.
        timeout: how long it may block in Redis (``WAIT``'s timeout), seconds; its reply is
            awaited that much longer than the usual timeout.
    """

    command: Sequence[str | int]
    timeout: float


@attrs.frozen
class Call:
    """A script call of a fan-out (``Executor.eval_many``), on its own executor: the one
    object that goes from the core to the transport's fan-out, whose server sends
    :attr:`script_call`'s command as it is.

    Attributes:
        executor: the client that runs it.
        script_call: the script call.
        context: what it does, for messages.
        on_orphan: what to do with its reply when nobody waits for it any more: the caller
            went away (a cancelled asyncio task), or the fan-out stopped early (``enough``)
            and the reply came later. An acquire undoes itself here.
        skip_if_busy: ``True`` when the call may be skipped on a server still finishing an
            earlier call of this kind that a fan-out stopped waiting for (a sick quorum
            member): it then fails at once with a ``RedisTimeoutError`` that did not run.
            Behind other calls only (a release left to finish, as after a reply that merely
            missed the grace on a loaded host) it is queued, as any call is: so a server
            holds at most one such call at a time, and a slow one is not taken for a
            sick one.
            ``False`` (a release): always queued behind, and finished in the background.
    """

    executor: Executor
    script_call: ScriptCall
    context: str
    on_orphan: Orphan | None = None
    skip_if_busy: bool = False


class _Pending:
    """The type of :data:`PENDING` (one instance, compared with ``is``)."""

    def __repr__(self) -> str:
        return "PENDING"


PENDING = _Pending()
"""A fan-out entry whose reply had not come when ``enough`` stopped the wait; the call is
finished in the background (its ``on_orphan`` gets the reply)."""

Enough = Callable[[Sequence[Any]], bool]
"""Whether a fan-out may stop waiting, given the replies so far (``PENDING`` where none)."""


class Wakeable(Protocol):
    """The local waiters of one channel, as a wake-up rule sees them."""

    def wake(self, n: int) -> None:
        """Wake up to ``n`` waiters (a waiter between two waits gets a permit instead)."""

    def wake_all(self) -> None:
        """Wake every waiter, blocked now or about to wait."""

    def tell(self, channel: str, note: bytes) -> None:
        """Leave ``note`` on ``channel``'s entry of the same subscriber connection, for the
        next message on that channel (nothing when this client does not subscribe to it).
        Messages of one connection are handled in order, so a note left by one message is
        seen by the next message on ``channel`` when both were published by one script."""

    def take_note(self) -> bytes | None:
        """The note left on this channel (see :meth:`tell`), removing it."""

    def wake_paired(self, channel: str) -> None:
        """Wake every local waiter of ``channel`` on the same subscriber connection (nothing
        when this client does not subscribe to it)."""


WakePolicy = Callable[[Wakeable, bytes], None]
"""How a message on a channel wakes that channel's local waiters."""

Armed = Callable[[Callable[[], None]], None]
"""Called once a wait is queued on a subscription's latch, with a function that wakes that
one wait (if it still waits; it must not block): a wake-up aimed at one waiter (an RLock's
grant message), where a release of the latch wakes the first in line."""


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
    """The watchdog, as the core calls it. Never blocks. Each method is documented on its
    implementation, :class:`syncprims._services.watchdog.Watchdog`."""

    def register(
        self,
        name: str,
        field: str,
        on_lost: HoldLostCallback,
        *,
        kind: RenewalKind,
        until: float | None,
        since: float | None = None,
        renew: bool = True,
        lease: float | None = None,
    ) -> None: ...

    def cancel(self, name: str, field: str) -> None: ...

    def cancel_all(self, name: str) -> None: ...

    def lease_end(self, name: str, field: str) -> float | None: ...

    def renews_late(self) -> bool: ...

    def may_renew_late(self, name: str, field: str) -> bool: ...

    def forget_late(self, name: str, field: str) -> None: ...


class ListenerRegistry(Protocol):
    """A client's object listeners. Never blocks. Each method is documented on its
    implementation, :class:`syncprims._services.listeners.ObjectListeners`."""

    def channel(self, name: str) -> str: ...

    def policy(self, channel: str) -> WakePolicy: ...

    def register(
        self,
        name: str,
        sub: Subscription,
        on_expired: ObjectCallback | None,
        on_deleted: ObjectCallback | None,
    ) -> int: ...

    def unregister(self, listener_id: int, name: str) -> Subscription | None: ...


class KeyJanitor(Protocol):
    """Background deletion of short-lived keys (:class:`syncprims._services.janitor.Janitor`).
    Never blocks."""

    def discard(self, key: str) -> None: ...


class Settings(Protocol):
    """The options the algorithms read, each documented on :class:`syncprims.Config`, which
    provides them (a Protocol here so that this leaf does not import the public module that
    builds on it)."""

    @property
    def lock_watchdog_timeout(self) -> float: ...

    @property
    def lock_synced_replicas(self) -> int | Literal["auto"]: ...

    @property
    def lock_synced_aof(self) -> tuple[int, int] | None: ...

    @property
    def replica_sync_timeout(self) -> float: ...

    @property
    def fair_lock_wait_timeout(self) -> float: ...

    @property
    def subscription_timeout(self) -> float: ...

    @property
    def wait_recheck_interval(self) -> float: ...

    @property
    def lock_grant_handoff(self) -> bool: ...

    @property
    def raise_on_release_error(self) -> bool: ...


class ClientPart(Protocol):
    """One core mechanism's state of a client (:class:`ClientParts` makes it at its first
    use, with no arguments)."""

    def clear(self) -> None:
        """Forget everything, in place (a forked child: its clients have new ids, and the
        parent's holds, waits and refusals are not its own)."""


PartT = TypeVar("PartT", bound=ClientPart)


class ClientParts:
    """A client's state of the core's mechanisms, one part per mechanism (the lock's
    book-keeping, the waiters counted for ``statistics()``): one registry per client, owned
    by its executor (``Executor.state``), which empties every part in place in a forked
    child (:meth:`clear`), so that the core objects holding a part keep it."""

    __slots__ = ("_making", "_parts")

    def __init__(self) -> None:
        self._parts: dict[type[ClientPart], ClientPart] = {}
        self._making = threading.Lock()

    def of(self, kind: type[PartT]) -> PartT:
        """The part of type ``kind``, made at its first use (once, even when two threads ask
        at the same moment)."""
        part = self._parts.get(kind)
        if part is None:
            with self._making:
                part = self._parts.get(kind)
                if part is None:
                    part = self._parts[kind] = kind()
        return cast(PartT, part)

    def clear(self) -> None:
        """In a forked child: every part forgets the parent's entries."""
        self._making = threading.Lock()  # the parent's may have been taken when it forked
        for part in self._parts.values():
            part.clear()


WAKE_TOKEN = b"w"
"""What a wake-up pushes on a waiter's grant list (``Executor.wait_pushed``): not a grant."""
PUSHED_TTL_MS = 10_000
"""Lifetime of a waiter's grant list after a push, ms (a token nobody popped goes with it)."""


class Executor(Protocol):
    """Operations every core object may await. One executor per client.

    The sync face's executor completes every operation on the calling thread without
    suspending (so a core coroutine finishes in one step); the asyncio face's awaits its
    event loop.
    """

    @property
    def config(self) -> Settings:
        """The client's options."""

    bounds: Bounds
    """How long calls may take (resolved from the options and the redis-py client)."""

    cluster: bool
    """Whether the client talks to a Redis Cluster."""

    client_id: str
    """This client's UUID (a new one in a forked child)."""

    late_reply_window: float
    """How long after it was sent the late reply of an abandoned call may still be read
    (and handed to its ``on_orphan``), seconds."""

    @property
    def watchdog(self) -> RenewalRegistry:
        """Lease renewal."""

    @property
    def janitor(self) -> KeyJanitor:
        """Background deletion of short-lived keys."""

    @property
    def listeners(self) -> ListenerRegistry:
        """The client's object listeners."""

    state: ClientParts
    """The client's state of the core's mechanisms (one registry, one fork hook)."""

    closers: dict[int, Callable[[], Awaitable[object]]]
    """What shutdown ends first, once no acquisition may start, while the client still
    works (a leader election's leadership), by owner id."""

    def publish_command_for(self, channel: str, key: str) -> str:
        """``"PUBLISH"``, or ``"SPUBLISH"`` where ``channel`` (of the object at ``key``) is
        sharded (a Redis 7+ cluster, channel and key in one slot)."""

    async def eval(self, call: ScriptCall, *, context: str, on_orphan: Orphan | None = None) -> Any:
        """Run the script ``call`` once on the node that owns its keys.

        Raises:
            TransportError: ``maybe_executed`` tells whether it may have run.
            ServerReplyError: Redis answered with an error.
        """

    async def eval_then(
        self, call: ScriptCall, then: Then, *, context: str, on_orphan: Orphan | None = None
    ) -> tuple[Any, Any]:
        """Run the script ``call`` once and the plain command ``then`` right behind it, in
        one write on the same connection (one round trip: an acquire and its ``WAIT``).

        Returns:
            The script's reply, and ``then``'s reply or the ``SyncPrimsError`` it failed with.

        Raises:
            As ``eval``, for the script.
        """

    async def replicas(self, route: str, *, recheck: bool = False) -> int:
        """The replicas in sync of the master that owns ``route`` (``INFO replication``,
        ``state=online``), as last seen; looked up again when that is a few seconds old
        or ``recheck`` is set. Never raises a transport error (the last count stands)."""

    def known_replicas(self, route: str) -> int | None:
        """:meth:`replicas` as remembered, without I/O; ``None`` when it would look again."""

    async def command(
        self, *args: str | int, context: str, route: str | None = None, timeout: float | None = None
    ) -> Any:
        """Run one plain command once on the node of ``route`` (a key); ``timeout``: seconds
        for its reply instead of the usual (blocking commands). Raises as ``eval``."""

    async def eval_many(self, calls: Sequence[Call], enough: Enough | None = None) -> list[Any]:
        """Run several scripts at once, each on its own executor (all of this face's type).

        The cost is the slowest call, not the sum; with ``enough``, the cost of the replies
        it needed: the wait stops as soon as ``enough(replies so far)`` is true, and the
        calls still out are finished in the background, each within its server's timeout,
        their late replies going to their ``on_orphan``. Never raises a ``SyncPrimsError``.

        Returns:
            One entry per call: the reply, the ``SyncPrimsError`` it failed with, or
            ``PENDING`` (only when ``enough`` stopped the wait).
        """

    async def subscribe(
        self, channel: str, policy: WakePolicy, route: str | None = None
    ) -> Subscription:
        """Take a reference on a channel subscription (``route``: the key of the object the
        channel belongs to). Wait with ``wait_ready`` before relying on its messages."""

    def subscribed(self, channel: str, route: str | None = None) -> bool:
        """Whether ``channel`` is subscribed and confirmed now, as a recent wait leaves it
        for a moment (no Redis call; never blocks)."""

    def unsubscribe(self, sub: Subscription) -> None:
        """Drop a reference taken by ``subscribe`` (never blocks)."""

    async def wait_ready(self, sub: Subscription, timeout: float) -> bool:
        """Wait until Redis confirmed the subscription; ``False`` after ``timeout`` seconds.

        Raises:
            ServerReplyError: Redis refused the subscription (an ACL without the channel).
        """

    async def wait(
        self, sub: Subscription, timeout: float | None, armed: Armed | None = None
    ) -> bool:
        """Wait for a wake-up on the subscription; ``False`` after ``timeout`` seconds.
        ``armed``: see :data:`Armed`."""

    def refuse_if_closing(self, context: str) -> None:
        """Raise ``ClientClosedError`` once shutdown began (an acquisition's first step);
        else make sure the client's record is kept (``syncprims._services.record``: in the
        background, never waited for)."""

    def release_started(self) -> None:
        """A release began (unlock, a permit given back): shutdown waits for it."""

    def release_ended(self) -> None:
        """The release counted by :meth:`release_started` ended."""

    def claim_pop(self) -> bool:
        """Whether a new wait pops its grant (:meth:`wait_pushed` blocks on the list): in the
        blocking face with ``Config.lock_grant_direct``, while fewer than
        ``Config.lock_grant_direct_limit`` waits of the client do. ``True`` counts the wait
        until :meth:`free_pop`."""

    def free_pop(self) -> None:
        """A wait counted by :meth:`claim_pop` ended."""

    async def wait_pushed(
        self, sub: Subscription, key: str, timeout: float, route: str
    ) -> bytes | bool:
        """Wait for an element pushed on the list ``key`` (``BLPOP``, on a connection held
        meanwhile) or a wake-up on the subscription, at most ``timeout`` seconds (> 0). A
        wake-up pushes a token on ``key`` (in the background), so that the pop returns.

        Returns:
            The element popped (a token, or what a script pushed), ``True`` when woken
            otherwise (a kept permit; a failed pop, after waiting on the subscription
            instead), ``False`` after ``timeout``.

        Raises:
            ServerReplyError: Redis refused the subscription.
        """

    async def sleep(self, seconds: float) -> None:
        """Sleep ``seconds``."""

    def monotonic(self) -> float:
        """A monotonic clock, seconds."""

    def wall_ms(self) -> int:
        """The wall clock, epoch milliseconds (for scripts that compare client times)."""

    def retry_delay(self, attempt: int) -> float:
        """The pause, seconds, before retry number ``attempt`` (0 first): equal jitter
        between the ``retry_delay`` bounds."""

    def background(self, work: Callable[[], Awaitable[None]]) -> None:
        """Run ``work()`` in the background, off the caller's thread (never blocks; callable
        from a wake-up rule). Its errors are logged; a closed client drops it."""
