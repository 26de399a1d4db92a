"""Replica sync of an acquisition (``Config.lock_synced_replicas``, ``lock_synced_aof``):
``WAIT`` (or ``WAITAOF``) written in the same round trip as the acquire script, as
Redisson's batch, and judged after it; too few acknowledgements undo the acquisition and
raise ``ReplicaSyncError``. A lock object owns one :class:`ReplicaSync`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from syncprims._core.lock.release import Releases
from syncprims._core.lock.view import LockView
from syncprims._core.retry import with_retry
from syncprims._protocol.contracts import ScriptCall
from syncprims._protocol.replication import sync_then
from syncprims.errors import ReplicaSyncError, ServerReplyError, SyncPrimsError, TransportError

__all__ = ["ReplicaSync"]


class ReplicaSync:
    """One lock object's replica sync of its acquisitions."""

    __slots__ = ("_ex", "_lock", "_releases")

    def __init__(self, lock: LockView, releases: Releases) -> None:
        self._lock = lock
        self._ex = lock.executor
        self._releases = releases

    async def required(self) -> int:
        """How many replicas an acquisition must reach (``"auto"``: the master's)."""
        known = self.known_required()
        return known if known is not None else await self._ex.replicas(self._lock.name)

    def known_required(self) -> int | None:
        """:meth:`required` without I/O (the setting, or the remembered count while fresh);
        ``None`` when the count is due to be read again: then await :meth:`required`
        ([hot-2])."""
        ex = self._ex
        setting = ex.config.lock_synced_replicas
        if setting == "auto":
            return ex.known_replicas(self._lock.name)
        return setting

    async def run(
        self,
        call: ScriptCall,
        required: int,
        context: str,
        orphan: Callable[[Any], Awaitable[None]],
    ) -> tuple[Any, Any]:
        """Run the acquire ``call`` and, in the same write, ``WAIT`` for ``required``
        replicas (``WAITAOF`` with ``lock_synced_aof``): the script's reply and the sync
        command's. Never re-sent once it may have run.

        Raises:
            TransportError: Redis failed.
            ServerReplyError: Redis refused the script.
        """
        ex = self._ex
        then = sync_then(required, ex.config.lock_synced_aof, ex.config.replica_sync_timeout)
        assert then is not None  # called only when something is to be waited for
        return await with_retry(
            ex,
            lambda: ex.eval_then(call, then, context=context, on_orphan=orphan),
            idempotent=False,
        )

    async def check(self, field: str, lease: int, required: int, reply: Any) -> None:
        """Judge the ``WAIT`` reply of an acquisition; undo it and raise if too few replicas
        acknowledged (or ``WAIT`` failed). A ``WAIT`` that Redis ended because the master
        became a replica (``UNBLOCKED``, a failover) is raised, once undone, as a
        ``TransportError`` that did not run: the wait goes on, against the new master.

        Raises:
            ReplicaSyncError: too few replicas acknowledged (the acquisition was undone).
            TransportError, ServerReplyError: ``WAIT``/``WAITAOF`` failed (undone too).
        """
        lock = self._lock
        ex = self._ex
        aof = ex.config.lock_synced_aof
        if isinstance(reply, SyncPrimsError):
            await self._releases.unlock_field(field, lease)
            if isinstance(reply, ServerReplyError) and reply.code == "UNBLOCKED":
                raise TransportError(
                    f"{lock.context('acquiring')}: the master became a replica while its "
                    f"WAIT ran ({reply}); the acquisition was undone",
                    maybe_executed=False,
                ) from reply
            if isinstance(reply, ServerReplyError) and aof is not None:
                raise ServerReplyError(
                    f"{lock.context('acquiring')}: the server refused WAITAOF "
                    f"(lock_synced_aof={aof!r} needs Redis 7.2+ or Valkey 7.2+, and "
                    f"appendonly yes for numlocal 1); the acquisition was undone: {reply}",
                    code=reply.code,
                ) from reply
            raise reply
        if aof is not None:
            await self._check_aof(field, lease, aof, max(aof[1], required), reply)
            return
        acknowledged = int(reply)
        if ex.config.lock_synced_replicas == "auto" and acknowledged != required:
            # A replica joined (counted at once) or left (counted only after a hold down:
            # a demoted master in a split brain also reports fewer): count again.
            required = await ex.replicas(lock.name, recheck=True)
        if acknowledged >= required:
            return
        await self._releases.unlock_field(field, lease)
        raise ReplicaSyncError(
            f"only {acknowledged} of {required} replicas acknowledged {lock.kind} {lock.name!r} "
            f"within {ex.config.replica_sync_timeout:g} s; the acquisition was undone",
            name=lock.name,
            acknowledged=acknowledged,
            required=required,
        )

    async def _check_aof(
        self, field: str, lease: int, aof: tuple[int, int], replicas: int, reply: Any
    ) -> None:
        """Judge the ``WAITAOF`` reply (``[local fsynced, replicas fsynced]``); undo the
        acquisition and raise ``ReplicaSyncError`` if fewer fsynced it than required."""
        lock = self._lock
        local, acknowledged = int(reply[0]), int(reply[1])
        if local >= aof[0] and acknowledged >= replicas:
            return
        await self._releases.unlock_field(field, lease)
        raise ReplicaSyncError(
            f"{lock.kind} {lock.name!r} was fsynced by {local} of {aof[0]} local and "
            f"{acknowledged} of {replicas} replica append-only files within "
            f"{self._ex.config.replica_sync_timeout:g} s (lock_synced_aof); the acquisition "
            "was undone",
            name=lock.name,
            acknowledged=acknowledged,
            required=replicas,
        )
