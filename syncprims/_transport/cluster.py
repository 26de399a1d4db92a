"""Redis Cluster routing on redis-py's ``RedisCluster``, written once for both faces.

redis-py keeps the slot map (its ``NodesManager``: ``CLUSTER SLOTS`` at start, ``MOVED``
corrections, re-initialization) and one connection pool per node; syncprims uses both. What
stays here is the routing loop around *one attempt* of a call: ``RedisCluster``'s own
``execute_command`` re-sends a command after a connection error or a timeout, which an
acquire script must never be (``docs/design.md``, "One attempt per command").

* A call goes to the node of its first key's slot (every key of one object shares a hash tag,
  so one slot).
* ``MOVED``: redis-py's slot map is corrected (``move_slot``) and the call goes to the new
  node; ``ASK`` (a slot being migrated): the call goes once to the named node, after
  ``ASKING``; ``TRYAGAIN`` (keys of one call on both sides of a migration) and
  ``CLUSTERDOWN`` (a failover in progress): the call is repeated after a short back-off.
  None of these ran the command, so even an acquire is re-sent.
* A call that fails before reaching a node makes the next call reload the slot map
  (redis-py's ``initialize``): a failover moves slots to a promoted replica.

The per-node servers are the faces' own (``blocking.server.SyncServer``,
``aio.server.AsyncServer``), whose methods the router awaits: it satisfies the same
:class:`~syncprims._transport.server.NodeServer` interface as they do, and each face's router
(``SyncRouter``, ``AsyncRouter``) adds what that face's servers alone do. The blocking ones
never suspend, so the sync face still runs its core in one step. A fan-out sends each call
to its node once (:meth:`ClusterRouter.server_for`), and :func:`follow` then follows the
redirections its calls met.
"""

from __future__ import annotations

import threading
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Generic, TypeVar

import redis.crc

from syncprims._protocol.contracts import Call, ScriptCall, Then
from syncprims._transport.caching import cache_free_pool
from syncprims._transport.compat import amove_slot, move_slot, node_pool
from syncprims._transport.errors import ClusterRedirectError
from syncprims._transport.server import NodeServer
from syncprims.errors import RedisConnectionError, ServerReplyError, SyncPrimsError, TransportError

__all__ = [
    "AsyncTopology",
    "ClusterRouter",
    "NodePool",
    "SyncTopology",
    "follow",
    "key_slot",
]

MAX_HOPS = 6
Address = tuple[str, int]
S = TypeVar("S", bound=NodeServer)
T = TypeVar("T")


def key_slot(key: str) -> int:
    """The cluster slot of ``key`` (CRC16 of its hash tag; redis-py's implementation)."""
    return int(redis.crc.key_slot(key.encode("utf-8")))


class _Nodes:
    """What both faces' topologies read alike from a redis-py (or valkey-py) cluster."""

    def __init__(self, cluster: Any) -> None:
        self._cluster = cluster

    def node_of_slot(self, slot: int) -> Address:
        node = self._cluster.nodes_manager.get_node_from_slot(slot)
        return (node.host, int(node.port))

    def any_node(self) -> Address:
        node = self._cluster.get_default_node() or self._cluster.get_nodes()[0]
        return (node.host, int(node.port))

    def _node(self, address: Address, **kwargs: Any) -> Any:
        """The cluster's node at ``address``; one made with ``kwargs`` when redis-py has not
        seen it yet (an ASK target), of the class of the nodes it knows (redis-py's or
        valkey-py's ``ClusterNode``, either face)."""
        cluster = self._cluster
        node = cluster.get_node(host=address[0], port=address[1])
        if node is None:
            return type(cluster.get_nodes()[0])(address[0], address[1], **kwargs)
        return node


class SyncTopology(_Nodes):
    """A blocking ``redis.RedisCluster``'s slot map and node pools (a node pool with a
    client-side cache is replaced by a cache-free twin: :mod:`syncprims._transport.caching`)."""

    def __init__(self, cluster: Any) -> None:
        super().__init__(cluster)
        self._twins: list[Any] = []

    def pool_of(self, address: Address) -> Any:
        pool, made = cache_free_pool(node_pool(self._cluster, self._node(address)))
        if made:
            self._twins.append(pool)
        return pool

    def close(self) -> None:
        """Disconnect the twin pools made here."""
        for pool in self._twins:
            pool.disconnect()

    async def moved(self, error: ClusterRedirectError) -> None:
        move_slot(self._cluster.nodes_manager, error.cause)

    async def refresh(self) -> None:
        self._cluster.nodes_manager.initialize()


class NodePool:
    """The connections of one ``redis.asyncio`` cluster node, with a pool's interface."""

    def __init__(self, node: Any) -> None:
        self._node = node
        self.connection_kwargs: dict[str, Any] = node.connection_kwargs

    async def get_connection(self) -> Any:
        """A connection of the node (redis-py's ``acquire_connection``), not checked or
        connected yet: the server does both before each use (``AsyncServer._pooled``)."""
        return self._node.acquire_connection()

    async def release(self, conn: Any) -> None:
        """Give a connection back to the node."""
        self._node.release(conn)

    @property
    def connection_class(self) -> Any:
        """The node's connection class (for :func:`~syncprims._transport.compat.
        own_connection`)."""
        return self._node.connection_class


class AsyncTopology(_Nodes):
    """A ``redis.asyncio.RedisCluster``'s slot map and node connections."""

    def pool_of(self, address: Address) -> Any:
        return NodePool(self._node(address, **self._cluster.get_connection_kwargs()))

    async def moved(self, error: ClusterRedirectError) -> None:
        await amove_slot(self._cluster.nodes_manager, error.cause)

    async def refresh(self) -> None:
        await self._cluster.nodes_manager.initialize()

    def close(self) -> None:
        """Nothing to close: redis.asyncio clusters have no client-side cache."""


Topology = SyncTopology | AsyncTopology


class ClusterRouter(Generic[S]):
    """Routes calls to the node that owns their slot.

    Args:
        topology: redis-py's cluster, seen through :class:`SyncTopology` or
            :class:`AsyncTopology`.
        make_server: a face's server for a node's pool and address.
        sleep: the face's sleep, for TRYAGAIN/CLUSTERDOWN back-off.
        address: the cluster, for messages.
    """

    def __init__(
        self,
        topology: Topology,
        make_server: Callable[[Any, str], S],
        sleep: Callable[[float], Awaitable[None]],
        address: str,
    ) -> None:
        self._topology = topology
        self._make_server = make_server
        self._sleep = sleep
        self._servers: dict[Address, S] = {}
        self._mutex = threading.Lock()
        self._stale = False
        self.sharded: bool | None = None  # sharded pub/sub (Redis 7+), probed on first use
        self.address = address

    # -- topology -----------------------------------------------------------------------------

    def server(self, node: Address) -> S:
        """The server of ``node`` (made on first use)."""
        server = self._servers.get(node)
        if server is None:
            with self._mutex:
                server = self._servers.get(node)
                if server is None:
                    pool = self._topology.pool_of(node)
                    server = self._servers[node] = self._make_server(pool, f"{node[0]}:{node[1]}")
        return server

    def servers(self) -> list[S]:
        """Every server made so far."""
        return list(self._servers.values())

    def node_of(self, key: str | None) -> Address:
        """The node that owns ``key``'s slot (any node for ``None``)."""
        if key is None:
            return self._topology.any_node()
        return self._topology.node_of_slot(key_slot(key))

    def route(self, keys: Sequence[str]) -> S:
        """The server for a call on ``keys`` (by the first key)."""
        return self.server(self.node_of(keys[0] if keys else None))

    async def server_for(self, keys: Sequence[str]) -> S:
        """:meth:`route`, once the slot map is ready: where a fan-out sends a call on
        ``keys`` (a redirection it meets is then followed by :func:`follow`)."""
        await self.ready()
        return self.route(keys)

    async def ready(self) -> None:
        """Reload the slot map if a call found it stale, and probe for sharded pub/sub once."""
        if self._stale:
            self._stale = False
            try:
                await self._topology.refresh()
            except Exception as error:  # no node answered: the next call tries again
                self._stale = True
                raise RedisConnectionError(
                    f"no node of the cluster at {self.address} answered: {error}",
                    maybe_executed=False,
                ) from error
        if self.sharded is None:
            try:
                await self.server(self._topology.any_node()).command(
                    "PUBSUB", "SHARDNUMSUB", context="probing for sharded pub/sub"
                )
                self.sharded = True
            except ServerReplyError:
                self.sharded = False

    # -- calls --------------------------------------------------------------------------------

    async def routed(self, keys: Sequence[str], call: Callable[[S, bool], Awaitable[T]]) -> T:
        """``call(server, asking)`` on the node that owns ``keys``, following redirections
        (each face's calls and its router's own are made through this)."""
        await self.ready()
        target: Address | None = None
        asking = False
        last: ClusterRedirectError | None = None
        for hop in range(MAX_HOPS):
            server = self.server(target) if target is not None else self.route(keys)
            try:
                return await call(server, asking)
            except ClusterRedirectError as redirect:
                last = redirect
                target, asking = None, False
                if redirect.kind == "moved":
                    await self._topology.moved(redirect)
                elif redirect.kind == "ask" and redirect.node:
                    target, asking = redirect.node, True
                else:  # tryagain / down: a migration or a failover in progress
                    await self._sleep(min(0.025 * 2**hop, 0.5))
                    if redirect.kind == "down":
                        self._stale = True
                        await self.ready()
            except TransportError as error:
                if not error.maybe_executed:
                    self._stale = True
                raise
        assert last is not None
        raise last

    async def eval(self, call: ScriptCall, *, context: str) -> Any:
        """Run the script ``call`` once on the node of its keys (following redirections)."""
        return await self.routed(
            call.keys, lambda server, ask: server.eval(call, context=context, asking=ask)
        )

    async def eval_then(self, call: ScriptCall, then: Then, *, context: str) -> tuple[Any, Any]:
        """Run the script ``call`` and the command ``then`` behind it in one write, on the
        node of its keys (following redirections)."""
        result: tuple[Any, Any] = await self.routed(
            call.keys,
            lambda server, ask: server.eval_then(call, then, context=context, asking=ask),
        )
        return result

    async def command(
        self,
        *args: str | int,
        context: str,
        route: str | None = None,
        timeout: float | None = None,
    ) -> Any:
        """Run a plain command once on the node of ``route`` (any node for ``None``)."""
        return await self.routed(
            [route] if route is not None else [],
            lambda server, ask: server.command(*args, context=context, timeout=timeout, asking=ask),
        )

    def close(self) -> None:
        """Refuse new calls on every node."""
        for server in self.servers():
            server.close()
        self._topology.close()


async def follow(calls: Sequence[Call], replies: list[Any]) -> list[Any]:
    """``replies``, a fan-out's to ``calls`` (each sent to its node once, by either face's
    fan-out), with every cluster redirection followed: such a call did not run, and goes
    again alone through its executor, whose router follows redirections."""
    for i, reply in enumerate(replies):
        if not isinstance(reply, ClusterRedirectError):
            continue
        call = calls[i]
        try:
            replies[i] = await call.executor.eval(
                call.script_call, context=call.context, on_orphan=call.on_orphan
            )
        except SyncPrimsError as error:
            replies[i] = error
    return replies
