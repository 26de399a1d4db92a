"""The interface both faces' transports satisfy: what an executor and its services run calls
on (httpcore's ``_backends/base.py``: one interface, two I/O flavours).

A face's transport is one server (:class:`~syncprims._transport.blocking.server.SyncServer`,
:class:`~syncprims._transport.aio.server.AsyncServer`) or a cluster router of them
(:class:`~syncprims._transport.cluster.ClusterRouter`); each call is one attempt, and a
failure is a ``syncprims.errors`` error that says whether the call may have run
(``TransportError.maybe_executed``). The blocking face's methods block and return without
suspending; the asyncio face's await its event loop.

What one face has beyond :class:`NodeServer` it alone can honour: the asyncio server and router
take an ``on_orphan`` for a reply whose caller went away while it was out (a cancelled
task; a blocking caller cannot go away then), and the blocking ones run a command Redis
blocks on a connection of syncprims' own (``command_held``: the direct grant's ``BLPOP``,
which the asyncio face does not use). Each face's executor reaches those through its own
transport's type; the fan-out over several servers is a module of each face
(``blocking/fanout.py``, ``aio/fanout.py``).
"""

from __future__ import annotations

from collections.abc import Coroutine
from typing import Any, Protocol

from syncprims._protocol.contracts import ScriptCall, Then
from syncprims._transport.replicas import ReplicaCount

__all__ = ["NodeServer"]


class NodeServer(Protocol):
    """One server (a master), as its executor and a cluster router send to it. A cluster
    router takes the same calls but for ``asking`` (it follows redirections itself), on the
    node that owns the call's keys.
    """

    replicas: ReplicaCount
    """Its master's replicas, for ``lock_synced_replicas="auto"`` (``replicas.py``)."""
    pool: Any
    """The redis-py pool its connections come from (a subscriber's are made with its
    settings)."""

    @property
    def address(self) -> str:
        """Where it is, for messages (a cluster: its seed nodes)."""

    def eval(
        self, call: ScriptCall, *, context: str, asking: bool = False
    ) -> Coroutine[Any, Any, Any]:
        """Run the script ``call`` once (``EVALSHA``; on ``NOSCRIPT``, ``SCRIPT LOAD`` and
        again: it did not run), after ``ASKING`` with ``asking`` (a cluster ``ASK``
        redirection names this node for one call). ``context``: what it does, for messages.

        Raises:
            RedisConnectionError, RedisTimeoutError: with ``maybe_executed`` set when the
                script may have run.
            ServerReplyError: Redis answered with an error.
        """

    def eval_then(
        self, call: ScriptCall, then: Then, *, context: str, asking: bool = False
    ) -> Coroutine[Any, Any, tuple[Any, Any]]:
        """Run the script ``call`` once and the plain command ``then`` right behind it, in one
        write on one connection (one round trip: an acquire and its ``WAIT``).

        Returns:
            The script's reply, and ``then``'s reply or the ``SyncPrimsError`` it failed with.

        Raises:
            As :meth:`eval`, for the script.
        """

    def command(
        self,
        *args: str | int,
        context: str,
        route: str | None = None,
        timeout: float | None = None,
        asking: bool = False,
    ) -> Coroutine[Any, Any, Any]:
        """Run one plain command once (``route``: the key whose node runs it; any node for
        ``None``); ``timeout``: seconds for its reply instead of the usual (a command Redis
        may block). Raises as :meth:`eval`."""

    def close(self) -> None:
        """Refuse new calls (``ClientClosedError``); the redis-py pools are their owner's."""
