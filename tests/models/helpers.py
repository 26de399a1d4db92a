"""What the state machines share: a face driven step by step, the faults, loss notices.

* :class:`Face`: clients of the blocking face, or of the asyncio face on a private event
  loop that runs only while a step awaits (:meth:`Face.run`, :meth:`Face.sleep`). The
  asyncio face's services (the watchdog) run on that loop, so a wait for a notice sleeps
  through :meth:`Face.sleep`.
* Reply loss (:func:`losing_reply`): the client's next script call runs in Redis, then fails
  as a lost reply does (``RedisTimeoutError`` with ``maybe_executed``), without waiting out
  a real timeout (``tests/faults/proxy.py`` drops real replies, at a timeout's cost each:
  about 20 per run here). The reply may come late (:meth:`Lost.deliver`), as the asyncio
  face's shared connection hands a reply that came after its caller gave up to the call's
  ``on_orphan`` (an acquire's undo); the blocking face drops such a connection.
* Loss notices (:class:`Hold`, :func:`all_lost`): which holds must be told, may be told, or
  must not be, and with which reason.
* Eviction (:func:`evict_leases`): ``maxmemory`` 1 under ``volatile-ttl`` evicts every key
  with a TTL (leases first), then the limit is lifted: a real eviction, counted in
  ``INFO``'s ``evicted_keys``, which is how the library notices one.
* Empty restarts (``RedisServer.restart``) and expiry (``PEXPIRE`` 1 ms) are plain calls.

Runs are bounded and deterministic (:func:`SETTINGS`: ``derandomize``, no example
database), so CI cannot meet a new example; only the server's timing varies.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Iterator
from typing import Any

from hypothesis import HealthCheck, Phase, settings

import syncprims
import syncprims.asyncio
from syncprims import LossReason
from syncprims.errors import RedisTimeoutError

__all__ = [
    "SETTINGS",
    "TOLD_WITHIN",
    "Face",
    "Hold",
    "Lost",
    "Told",
    "all_lost",
    "evict_leases",
    "losing_reply",
]


def SETTINGS(examples: int, steps: int) -> settings:  # noqa: N802 (reads as a constant)
    """A bounded, deterministic run: ``examples`` machines of at most ``steps`` steps.

    Without shrinking: every replay of an example restarts servers and sleeps, so shrinking
    one took minutes (past the per-test timeout, which then hides the example); the failing
    example is reported as found, ``steps`` steps at most.
    """
    return settings(
        max_examples=examples,
        stateful_step_count=steps,
        deadline=None,
        derandomize=True,
        database=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )


class Face:
    """Clients of one face for one machine; ``run`` turns a call's result into its value."""

    def __init__(self, name: str) -> None:
        self.loop = asyncio.new_event_loop() if name == "async" else None
        self.clients: list[Any] = []

    def run(self, result: Any) -> Any:
        """The value of a call: itself (blocking face), or the coroutine awaited (asyncio)."""
        return result if self.loop is None else self.loop.run_until_complete(result)

    def connect(self, url: str, **options: Any) -> Any:
        """A client of this face, shut down by :meth:`close`."""
        if self.loop is None:
            client = syncprims.connect(url, **options)
        else:
            client = self.run(syncprims.asyncio.connect(url, **options))
        self.clients.append(client)
        return client

    def sleep(self, seconds: float) -> None:
        """Sleep, letting the asyncio face's services run meanwhile."""
        if self.loop is None:
            time.sleep(seconds)
        else:
            self.run(asyncio.sleep(seconds))

    def wait_for(self, done: Callable[[], bool], seconds: float) -> bool:
        """Poll ``done`` until it is true or ``seconds`` have passed; its last value."""
        deadline = time.monotonic() + seconds
        while not done() and time.monotonic() < deadline:
            self.sleep(0.01)
        return done()

    def settle(self, client: Any) -> None:
        """Let ``client``'s services finish the step they are in. The watchdog forgets a
        lost hold, then calls its ``on_lost``, in one step of its loop: a caller that saw
        the hold forgotten sees the notice after this. The asyncio face's services run on
        this loop, only while it awaits: nothing to wait for there."""
        if self.loop is None:
            client._ex.services.run(asyncio.sleep(0), 5.0)

    def close(self) -> None:
        """Shut every client down (and close the event loop)."""
        for client in self.clients:
            self.run(client.shutdown())
        if self.loop is not None:
            self.loop.close()


class Told:
    """An ``on_lost(name, reason)`` callback that keeps the reasons it was given."""

    def __init__(self) -> None:
        self.reasons: list[str] = []

    def __call__(self, name: str, reason: str) -> None:
        self.reasons.append(reason)


TOLD_WITHIN = 5.0
"""Seconds a lost hold may take to be told ("within about a second", under CI's load)."""


class Hold:
    """One owner's hold of one lock (or one side) as the model sees it, with the notices
    its lock object was given (``told``: pass it as ``on_lost``)."""

    def __init__(self) -> None:
        self.told = Told()
        self.field = ""  # its field in Redis
        self.count = 0  # its hold count in Redis
        self.renewed = False  # an acquire of it had no lease: the watchdog renews it
        self.leased = False  # an acquire of it had an explicit lease
        # its client's registration with the watchdog: one per acquire, less one per
        # unlock; dropped when told, or when an explicit lease ends
        self.registered = 0

    def acquired(self, field: str, *, watchdog: bool) -> None:
        if not self.count:
            self.field, self.renewed, self.leased = field, False, False
        assert field == self.field, "a reentrant hold changed its field"
        self.count += 1
        self.registered += 1
        self.renewed |= watchdog
        self.leased |= not watchdog

    def unlocked(self) -> None:
        """An unlock call, whatever it answered."""
        self.count = max(0, self.count - 1)
        self.registered = max(0, self.registered - 1)

    def heard(self, *, required: bool) -> None:
        """Take the notices given: one if ``required``; else none for a hold still there,
        and at most one for a hold gone unseen that the client still has registered (an
        explicit lease expired or force-unlocked): the data-loss check tells it, after a
        data loss or when a client that held nothing across one reads the server again
        (its last reading is older than its holds: harmless, and true)."""
        reasons, self.told.reasons = self.told.reasons, []
        allowed = 1 if required or (self.registered and not self.count) else 0
        assert len(reasons) == required or 0 < len(reasons) <= allowed, reasons
        if reasons and not (required and self.renewed):  # only the data-loss check sees it
            assert reasons == [LossReason.DATA_LOST], reasons
        if reasons:
            self.registered = 0


def all_lost(face: Face, holds: list[Hold], *, data_lost: bool) -> None:
    """Every hold is gone (a restart or an eviction if ``data_lost``, else an expiry or a
    force unlock): each is told once within :data:`TOLD_WITHIN` seconds, after a data loss
    every hold its client registered, else the watchdog's (an explicit lease is checked by
    nothing until a data loss or its end: documented)."""
    must = [h for h in holds if (h.registered if data_lost else h.count and h.renewed)]
    done = face.wait_for(lambda: all(h.told.reasons for h in must), TOLD_WITHIN)
    assert done, f"{len(must)} lost holds were not all told within {TOLD_WITHIN} s"
    face.sleep(0.02)  # a second notice would come now
    for hold in holds:
        hold.count = 0
        hold.heard(required=hold in must)


class Lost:
    """A reply lost by :func:`losing_reply`: the reply Redis gave, and the call's
    ``on_orphan`` (what the asyncio face's shared connection does with a reply that comes
    after its caller gave up: an acquire's undo)."""

    def __init__(self) -> None:
        self.replies: list[object] = []
        self.on_orphan: Any = None

    def deliver(self, face: Face) -> None:
        """The reply comes late, as the asyncio face's shared connection hands it over
        (the blocking face drops a connection that timed out: no reply comes there)."""
        if face.loop is not None and self.on_orphan is not None:
            face.run(self.on_orphan(self.replies[0]))


@contextlib.contextmanager
def losing_reply(client: Any) -> Iterator[Lost]:
    """Within the block, the next script call ``client`` makes for its caller runs in Redis
    and its reply is lost (``RedisTimeoutError``, ``maybe_executed``). The services' calls
    (renewals, checks) go another way and are not touched."""
    ex = client._ex
    real = ex.eval
    lost = Lost()

    async def eval(call: Any, *, context: str, on_orphan: Any = None) -> Any:
        reply = await real(call, context=context, on_orphan=on_orphan)
        if lost.replies:
            return reply
        lost.replies.append(reply)
        lost.on_orphan = on_orphan
        raise RedisTimeoutError(f"{context}: its reply was lost (a fault)", maybe_executed=True)

    setattr(ex, "eval", eval)  # noqa: B010 (mypy refuses assigning to a method)
    try:
        yield lost
    finally:
        delattr(ex, "eval")


def evict_leases(raw: Any) -> int:
    """Make the server evict every key with a TTL (as ``volatile-ttl`` under memory
    pressure would, shortest TTL first); the number of keys it evicted."""
    before = int(raw.info("stats")["evicted_keys"])
    raw.config_set("maxmemory-policy", "volatile-ttl")
    try:
        raw.config_set("maxmemory", 1)  # evicts at once, and before each command after it
        raw.ping()
    finally:
        raw.config_set("maxmemory", 0)
        raw.config_set("maxmemory-policy", "noeviction")
    return int(raw.info("stats")["evicted_keys"]) - before
