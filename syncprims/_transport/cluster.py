"""Redis Cluster routing over per-node pools, written once for both faces.

The router keeps ``slot -> node`` from ``CLUSTER SLOTS`` and one pool per node (the faces'
own :class:`~syncprims._transport.sync.SyncConnections` or
:class:`~syncprims._transport.aio.AsyncConnections`, whose methods the router awaits; the
blocking ones never suspend, so the sync face still runs its core in one step).

* A call goes to the node of its first key's slot (every key of one object shares a hash tag,
  so one slot).
* ``MOVED``: the slot map is corrected and the call goes to the new node; ``ASK`` (a slot
  being migrated): the call goes once to the named node, after ``ASKING``; ``TRYAGAIN``
  (keys of one call on both sides of a migration) and ``CLUSTERDOWN`` (a failover in
  progress): the call is repeated after a short back-off. None of these ran the command,
  so even an acquire is re-sent.
* A call that fails before reaching a node marks the map stale: the next call reloads it
  from any node that answers (a failover moves slots to a promoted replica).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Generic, Protocol, TypeVar
from urllib.parse import urlsplit

from syncprims._protocol.scripts import Script
from syncprims._transport.aio import Orphan
from syncprims._transport.connections import ClusterRedirectError, key_slot
from syncprims.errors import RedisConnectionError, ServerReplyError, TransportError

__all__ = ["ClusterRouter", "NodePool"]

SLOTS = 16384
MAX_HOPS = 6
Address = tuple[str, int]


class NodePool(Protocol):
    """One node's pool (either face's)."""

    @property
    def address(self) -> str: ...

    async def eval(
        self,
        script: Script,
        keys: Sequence[str],
        args: Sequence[str | int | bytes],
        *,
        context: str,
        on_orphan: Orphan | None = None,
        asking: bool = False,
    ) -> Any: ...

    async def command(
        self, *args: str | int, context: str, route: str | None = None, asking: bool = False
    ) -> Any: ...


P = TypeVar("P", bound=NodePool)


class ClusterRouter(Generic[P]):
    """Routes calls to the node that owns their slot.

    Args:
        seeds: node URLs to learn the cluster from.
        make_pool: a new pool for a node ``(host, port)``.
        sleep: the face's sleep, for TRYAGAIN/CLUSTERDOWN back-off.
        timeout: the per-call timeout, for messages.
    """

    def __init__(
        self,
        seeds: Sequence[str],
        make_pool: Callable[[str, int], P],
        sleep: Callable[[float], Awaitable[None]],
    ) -> None:
        self._seeds: list[Address] = []
        for url in seeds:
            parts = urlsplit(url)
            self._seeds.append((parts.hostname or "127.0.0.1", parts.port or 6379))
        self._make_pool = make_pool
        self._sleep = sleep
        self._pools: dict[Address, P] = {}
        self._slots: list[Address | None] = [None] * SLOTS
        self._stale = True
        self.sharded: bool | None = None  # sharded pub/sub (Redis 7+), learned on refresh
        self.address = ",".join(f"{h}:{p}" for h, p in self._seeds)

    # -- topology -----------------------------------------------------------------------------

    def pool(self, node: Address) -> P:
        """The pool of ``node`` (made on first use)."""
        pool = self._pools.get(node)
        if pool is None:
            pool = self._pools[node] = self._make_pool(*node)
        return pool

    def pools(self) -> list[P]:
        """Every pool made so far."""
        return list(self._pools.values())

    def node_of(self, key: str | None) -> Address:
        """The node that owns ``key``'s slot (any known node for ``None``)."""
        if key is not None:
            node = self._slots[key_slot(key)]
            if node is not None:
                return node
        known = [n for n in self._slots if n is not None]
        return known[0] if known else self._seeds[0]

    def route(self, keys: Sequence[str]) -> P:
        """The pool for a call on ``keys`` (by the first key)."""
        return self.pool(self.node_of(keys[0] if keys else None))

    def slot_of(self, key: str) -> int:
        """``key``'s slot."""
        return key_slot(key)

    def mark_stale(self) -> None:
        """Reload the slot map before the next call."""
        self._stale = True

    async def refresh(self) -> None:
        """Reload the slot map from the first node that answers.

        Raises:
            TransportError: no known node answered.
        """
        candidates = list(dict.fromkeys([*self._pools, *self._seeds]))
        error: Exception | None = None
        for node in candidates:
            try:
                reply = await self.pool(node).command(
                    "CLUSTER", "SLOTS", context="discovering the cluster's slots"
                )
            except (TransportError, ServerReplyError) as exc:
                error = exc
                continue
            slots: list[Address | None] = [None] * SLOTS
            for entry in reply:
                start, end, master = int(entry[0]), int(entry[1]), entry[2]
                host = master[0].decode() if isinstance(master[0], bytes) else str(master[0])
                address = (host or node[0], int(master[1]))
                for slot in range(start, end + 1):
                    slots[slot] = address
            self._slots = slots
            self._stale = False
            if self.sharded is None:
                await self._probe_sharded(node)
            return
        raise error or RedisConnectionError(
            f"no node of the cluster at {self.address} answered", maybe_executed=False
        )

    async def _probe_sharded(self, node: Address) -> None:
        try:
            await self.pool(node).command(
                "PUBSUB", "SHARDNUMSUB", context="probing for sharded pub/sub"
            )
            self.sharded = True
        except ServerReplyError:
            self.sharded = False

    async def _ready(self) -> None:
        if self._stale:
            await self.refresh()

    # -- calls --------------------------------------------------------------------------------

    async def _routed(self, keys: Sequence[str], call: Callable[[P, bool], Awaitable[Any]]) -> Any:
        await self._ready()
        target: Address | None = None
        asking = False
        last: ClusterRedirectError | None = None
        for hop in range(MAX_HOPS):
            pool = self.pool(target) if target is not None else self.route(keys)
            try:
                return await call(pool, asking)
            except ClusterRedirectError as redirect:
                last = redirect
                target, asking = None, False
                if redirect.kind == "moved" and redirect.slot is not None and redirect.node:
                    self._slots[redirect.slot] = redirect.node
                elif redirect.kind == "ask" and redirect.node:
                    target, asking = redirect.node, True
                else:  # tryagain / down: a migration or a failover in progress
                    await self._sleep(min(0.025 * 2**hop, 0.5))
                    if redirect.kind == "down":
                        self.mark_stale()
                        await self._ready()
            except TransportError as error:
                if not error.maybe_executed:
                    self.mark_stale()
                raise
        assert last is not None
        raise last

    async def eval(
        self,
        script: Script,
        keys: Sequence[str],
        args: Sequence[str | int | bytes],
        *,
        context: str,
        on_orphan: Orphan | None = None,
        asking: bool = False,
    ) -> Any:
        """Run ``script`` once on the node of its keys (following redirections)."""
        return await self._routed(
            keys,
            lambda pool, ask: pool.eval(
                script, keys, args, context=context, on_orphan=on_orphan, asking=ask
            ),
        )

    async def command(
        self, *args: str | int, context: str, route: str | None = None, asking: bool = False
    ) -> Any:
        """Run a plain command once on the node of ``route`` (any node for ``None``)."""
        keys = [route] if route is not None else []
        return await self._routed(
            keys, lambda pool, ask: pool.command(*args, context=context, asking=ask)
        )
