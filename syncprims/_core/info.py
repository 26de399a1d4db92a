"""``info()``: read what an object keeps in Redis (both faces and ``syncprims inspect``;
``docs/locks.md``, "Who holds it"). The values are in ``syncprims._protocol.info``.

Every read goes through :meth:`ObjectCore.read` (retried as other reads) and never writes.
A subscriber count or client record that Redis refuses (an ACL) becomes "unknown"
(``None``); only a transport error or a refusal of the object's own keys raises.
:func:`detect` tells an object's kind from its keys, for ``syncprims inspect NAME``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, TypeVar

import attrs

from syncprims._core.objects import ObjectCore
from syncprims._protocol.info import (
    ClientProcess,
    LatchInfo,
    LockHolder,
    LockInfo,
    LockWaiter,
    PermitLease,
    SemaphoreInfo,
    parse_field,
    parse_record,
    record_key,
)
from syncprims._protocol.kinds import KINDS
from syncprims._protocol.names import lock_channel, prefix_name, rw_lease_prefix, suffix_name
from syncprims.errors import ServerReplyError

__all__ = [
    "NEVER_MS",
    "detect",
    "latch_info",
    "lock_info",
    "semaphore_info",
]

NEVER_MS = 922337203685477
"""The lease score of a permit that never expires (Redisson's constant)."""

_Process = tuple[ClientProcess | None, bool | None]
"""A client's process, and whether it has a record (``None``: the record was unreadable)."""

_Entry = TypeVar("_Entry", LockHolder, LockWaiter)


def _text(value: object) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


def _int(value: object) -> int | None:
    try:
        return int(_text(value)) if value is not None else None
    except ValueError:
        return None


def _pairs(reply: Any) -> list[tuple[Any, Any]]:
    """``(a, b)`` pairs of a reply that is a map, a list of pairs (RESP3) or a flat list."""
    if reply is None:
        return []
    if isinstance(reply, dict):
        return list(reply.items())
    items = list(reply)
    if items and isinstance(items[0], (list, tuple)):
        return [(item[0], item[1]) for item in items]
    return list(zip(items[::2], items[1::2], strict=True))


def _seconds(ms: float) -> float:
    return round(ms / 1000, 3)


async def _ttl(core: ObjectCore, key: str) -> float | None:
    ms = int(await core.read("PTTL", key, action="reading the TTL of"))
    return ms / 1000 if ms >= 0 else None


async def _subscribers(
    core: ObjectCore, channels: Sequence[str]
) -> tuple[int | None, dict[str, int]]:
    """The total and per-channel subscriber counts; ``(None, {})`` when refused.

    A channel the client publishes with ``SPUBLISH`` (a Redis 7+ cluster) is counted with
    ``PUBSUB SHARDNUMSUB`` on its shard; any other with ``PUBSUB NUMSUB`` on the object's
    node (every channel of an object is in its slot: on a cluster without sharded pub/sub,
    a subscriber connected to another node is not counted).
    """
    counts: dict[str, int] = {}
    ex = core.executor
    try:
        for channel in channels:
            sharded = ex.publish_command_for(channel, core.name) == "SPUBLISH"
            reply = await core.read(
                "PUBSUB", "SHARDNUMSUB" if sharded else "NUMSUB", channel,
                action="counting the subscribers of",
            )  # fmt: skip
            counts[channel] = sum(_int(n) or 0 for _, n in _pairs(reply))
    except ServerReplyError:  # an ACL without +pubsub|numsub: unknown
        return None, {}
    return sum(counts.values()), counts


async def _processes(core: ObjectCore, client_ids: Iterable[str]) -> dict[str, _Process]:
    """Each client id's process and whether it has a record (``None``: unreadable)."""
    found: dict[str, _Process] = {}
    for client_id in client_ids:
        if not client_id or client_id in found:
            continue
        key = record_key(client_id)
        try:
            raw = await core.read("GET", key, action="reading the client records of", route=key)
        except ServerReplyError:  # an ACL without ~syncprims_client:*: cannot tell
            found[client_id] = (None, None)
            continue
        process = parse_record(raw)
        found[client_id] = (process, process is not None)
    return found


def _waiter(member: str, position: int, deadline_in: float | None) -> LockWaiter:
    """A waiter from a queue or registry member: an owner field, a client id (an RLock's
    client registration) or ``<g or b>|<lease>|<wait id>.<n>|<owner field>`` (a wait that a
    release may grant the lock to: ``syncprims._protocol.grantwait.GrantWait``)."""
    member = member.rpartition("|")[2]
    client, owner, _, _ = parse_field(member)
    if not client and ":" not in member:  # a whole client's registration
        return LockWaiter("", member, "", position, deadline_in)
    return LockWaiter(member, client, owner, position, deadline_in)


async def _scored(core: ObjectCore, key: str) -> tuple[LockWaiter, ...]:
    """A registry's waiters; its scores (deadlines, epoch ms) are by the server's clock."""
    seconds, micros = await core.read("TIME", action="reading the server time for")
    now_ms = int(seconds) * 1000 + int(micros) / 1000
    reply = await core.read("ZRANGE", key, 0, -1, "WITHSCORES", action="reading the waiters of")
    return tuple(
        _waiter(_text(member), position, _seconds(float(score) - now_ms))
        for position, (member, score) in enumerate(_pairs(reply), start=1)
    )


async def lock_info(core: ObjectCore, layout: str) -> LockInfo:
    """Read the lock ``core`` names, in ``layout`` (a kind's, :mod:`syncprims._protocol.kinds`).

    Args:
        core: any core object of the lock's name (its executor and name are used).
        layout: ``"lock"``, ``"fair"``, ``"spin"``, ``"fenced"`` or ``"rw"``.

    Returns:
        A [`LockInfo`][syncprims.LockInfo] (a few reads, not atomic together).

    Raises:
        TransportError: Redis could not be reached (after retries).
        ServerReplyError: Redis refused to read the lock's own keys (an ACL).
    """
    name = core.name
    reply = await core.read("HGETALL", name, action="reading")
    fields = {_text(k): _text(v) for k, v in _pairs(reply)}
    ttl = await _ttl(core, name) if fields else None
    mode = fields.pop("mode", None) if layout == "rw" else None
    holders: list[LockHolder] = []
    for field, count in sorted(fields.items()):
        client, owner, incarnation, side = parse_field(field)
        hold_count = _int(count) or 0
        lease = None
        if layout == "rw" and not side:
            side = "read"
            lease = await _reader_lease(core, field, hold_count)
        holders.append(LockHolder(field, client, owner, hold_count, incarnation, side, lease))
    waiters: tuple[LockWaiter, ...] = ()
    channels = [prefix_name("redisson_rwlock", name) if layout == "rw" else lock_channel(name)]
    token = None
    if layout == "fair":
        waiters = await _fair_queue(core)
        channels += [f"{lock_channel(name)}:{w.field}" for w in waiters]
    elif layout == "lock":
        waiters = await _scored(core, prefix_name("syncprims_lock_waiters", name))
    elif layout == "rw":
        writers = prefix_name("syncprims_rwlock_writers", name)
        if await core.read("EXISTS", writers, action="reading the waiters of"):
            waiters = await _scored(core, writers)
    elif layout == "fenced":
        raw = await core.read("GET", prefix_name("redisson_lock_token", name), action="reading")
        token = _int(raw) or 0
    processes = await _processes(
        core, [h.client_id for h in holders] + [w.client_id for w in waiters]
    )
    subscribers, counts = await _subscribers(core, channels if layout != "spin" else [])
    return LockInfo(
        name=name,
        kind=KINDS[layout].display,
        held=bool(holders),
        ttl=ttl,
        holders=tuple(_with_process(h, processes) for h in holders),
        mode=mode,
        waiters=tuple(_with_process(w, processes) for w in waiters),
        token=token,
        subscribers=subscribers if layout != "spin" else 0,
        channels=counts,
    )


def _with_process(entry: _Entry, processes: dict[str, _Process]) -> _Entry:
    """A holder or waiter with its client's process."""
    process, known = processes.get(entry.client_id, (None, False))
    return attrs.evolve(entry, process=process, syncprims_client=known)


async def _reader_lease(core: ObjectCore, field: str, count: int) -> float | None:
    prefix = rw_lease_prefix(core.name, field)
    left = [await _ttl(core, f"{prefix}:{n}") for n in range(1, count + 1)]
    known = [t for t in left if t is not None]
    return max(known) if known else None


async def _fair_queue(core: ObjectCore) -> tuple[LockWaiter, ...]:
    name = core.name
    queue = await core.read(
        "LRANGE", prefix_name("redisson_lock_queue", name), 0, -1, action="reading the queue of"
    )
    reply = await core.read(
        "ZRANGE", prefix_name("redisson_lock_timeout", name), 0, -1, "WITHSCORES",
        action="reading the queue of",
    )  # fmt: skip
    now_ms = core.executor.wall_ms()  # Redisson's deadlines are by the clients' clocks
    left = {_text(member): _seconds(float(score) - now_ms) for member, score in _pairs(reply)}
    fields = [_text(raw) for raw in queue or []]
    return tuple(
        LockWaiter(field, *parse_field(field)[:2], position, left.get(field))
        for position, field in enumerate(fields, start=1)
    )


async def semaphore_info(core: ObjectCore, expirable: bool) -> SemaphoreInfo:
    """Read the semaphore ``core`` names (``expirable``: a permit-expirable semaphore).

    Returns:
        A [`SemaphoreInfo`][syncprims.SemaphoreInfo] (a few reads, not atomic together).

    Raises:
        TransportError: Redis could not be reached (after retries).
        ServerReplyError: Redis refused to read the semaphore's keys.
    """
    name = core.name
    permits = _int(await core.read("GET", name, action="reading"))
    leases: tuple[PermitLease, ...] = ()
    if expirable:
        now_ms = core.executor.wall_ms()
        reply = await core.read(
            "ZRANGE", suffix_name(name, "timeout"), 0, -1, "WITHSCORES", action="reading"
        )
        leases = tuple(
            PermitLease(
                member.hex() if isinstance(member, bytes) else _text(member),
                None if int(float(score)) >= NEVER_MS else _seconds(float(score) - now_ms),
            )
            for member, score in _pairs(reply)
        )
    subscribers, counts = await _subscribers(core, [prefix_name("redisson_sc", name)])
    return SemaphoreInfo(
        name=name,
        kind=KINDS["pes" if expirable else "semaphore"].display,
        permits=permits,
        leases=leases,
        ttl=await _ttl(core, name),
        subscribers=subscribers,
        channels=counts,
    )


def latch_channel(name: str) -> str:
    """A count-down latch's channel (always braced, as Redisson's)."""
    return "redisson_countdownlatch__channel__{" + name + "}"


async def latch_info(core: ObjectCore) -> LatchInfo:
    """Read the count-down latch ``core`` names.

    Returns:
        A [`LatchInfo`][syncprims.LatchInfo].

    Raises:
        TransportError: Redis could not be reached (after retries).
        ServerReplyError: Redis refused to read the latch's key.
    """
    count = _int(await core.read("GET", core.name, action="reading")) or 0
    subscribers, counts = await _subscribers(core, [latch_channel(core.name)])
    return LatchInfo(
        name=core.name,
        count=count,
        ttl=await _ttl(core, core.name),
        subscribers=subscribers,
        channels=counts,
    )


async def detect(core: ObjectCore) -> tuple[str, str]:
    """``(kind, TYPE)`` of what is stored under ``core.name``, from its keys.

    The kind is ``"lock"``, ``"fair"``, ``"fenced"``, ``"rw"``, ``"semaphore"``, ``"pes"``,
    ``"latch"``, ``"semaphore-or-latch"`` (a number alone cannot tell, and nobody waits on
    either channel), ``"none"`` (nothing stored: a free lock, an unused name, an open latch)
    or ``"other"`` (a key of another type). A spin lock is read as a ``"lock"`` (same layout).

    Raises:
        TransportError: Redis could not be reached (after retries).
    """
    name = core.name

    async def exists(key: str) -> bool:
        return bool(await core.read("EXISTS", key, action="detecting the kind of"))

    redis_type = _text(await core.read("TYPE", name, action="detecting the kind of"))
    mode = redis_type == "hash" and await core.read(
        "HEXISTS", name, "mode", action="detecting the kind of"
    )
    if mode:
        return "rw", redis_type
    if redis_type in ("hash", "none"):
        if await exists(prefix_name("redisson_lock_token", name)):
            return "fenced", redis_type
        if await exists(prefix_name("redisson_lock_queue", name)):
            return "fair", redis_type
        if redis_type == "hash":
            return "lock", redis_type
    if redis_type in ("string", "none") and await exists(suffix_name(name, "timeout")):
        return "pes", redis_type
    if redis_type == "string":
        _, semaphore = await _subscribers(core, [prefix_name("redisson_sc", name)])
        _, latch = await _subscribers(core, [latch_channel(name)])
        waits_semaphore, waits_latch = any(semaphore.values()), any(latch.values())
        if waits_semaphore and not waits_latch:
            return "semaphore", redis_type
        if waits_latch and not waits_semaphore:
            return "latch", redis_type
        return "semaphore-or-latch", redis_type
    return ("none" if redis_type == "none" else "other"), redis_type
