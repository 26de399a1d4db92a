"""What ``info()`` returns: frozen snapshots of what an object keeps in Redis, for operators.

``info()`` (every lock kind, the semaphores, the latch) and ``syncprims inspect`` read the
object's keys in Redisson's layout (``redisson-spec.md`` 1.1) plus syncprims' own (the
waiting clients' registry of an RLock, the waiting writers of a read-write lock with writer
preference), and each holder's or waiter's *client record*: what a syncprims client wrote
about itself (host, pid, client name) under ``syncprims_client:{<client id>}``
(``syncprims._services.record``; a holder without one: ``LockHolder.syncprims_client``).

A snapshot is a few reads, not atomic together; it may be stale as soon as it is returned.
Pure values and parsing: no I/O.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping

import attrs

__all__ = [
    "ClientProcess",
    "LatchInfo",
    "LockHolder",
    "LockInfo",
    "LockWaiter",
    "PermitLease",
    "SemaphoreInfo",
    "parse_field",
    "parse_record",
    "record_key",
]


def record_key(client_id: str) -> str:
    """The key of a syncprims client's record: ``syncprims_client:{<client id>}``."""
    return "syncprims_client:{" + client_id + "}"


@attrs.frozen
class ClientProcess:
    """The process a syncprims client runs in, from the record it keeps in Redis.

    Attributes:
        host: the host name (``socket.gethostname()``).
        pid: the process id on that host.
        client_name: the client name of the redis-py client it was given
            (``client_name=...``), ``None`` when it has none.
        version: the syncprims version of that process.
    """

    host: str
    pid: int
    client_name: str | None
    version: str


def parse_record(raw: object) -> ClientProcess | None:
    """A client record as written by ``syncprims._services.record`` (JSON); ``None`` when
    ``raw`` is missing or malformed (never raises: the value comes from Redis)."""
    if raw is None:
        return None
    try:
        text = raw.decode("utf-8") if isinstance(raw, bytes) else str(raw)
        data = json.loads(text)
    except (UnicodeDecodeError, ValueError):
        return None
    if not isinstance(data, dict):
        return None
    host, pid, name, version = (data.get(k) for k in ("host", "pid", "client_name", "version"))
    if not isinstance(host, str) or type(pid) is not int or not isinstance(version, str):
        return None
    return ClientProcess(host, pid, name if isinstance(name, str) else None, version)


_FIELD = re.compile(
    r"(?P<client>[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12})"
    r":(?P<owner>-?[0-9]+)(?:\.(?P<n>[0-9]+))?(?P<write>:write)?"
)


def parse_field(field: str) -> tuple[str, str, int, str]:
    """``(client id, owner id, incarnation, side)`` of a lock's hash field.

    The field is Redisson's ``<client uuid>:<owner id>`` (``...:write`` for a read-write
    lock's writer), where syncprims may add ``.<n>`` to the owner id after a release whose
    outcome was unknown (``syncprims._core.lock``). ``side`` is ``"write"`` for a writer's
    field, else ``""``; the incarnation is 0 without a suffix. A field of another form gives
    ``("", <field>, 0, "")`` (or its last ``:`` part as the owner).
    """
    match = _FIELD.fullmatch(field)
    if match is not None:
        n = match.group("n")
        side = "write" if match.group("write") else ""
        return match.group("client").lower(), match.group("owner"), int(n) if n else 0, side
    side = ""
    rest = field
    if rest.endswith(":write"):
        rest, side = rest[: -len(":write")], "write"
    client, sep, owner = rest.rpartition(":")
    return (client, owner, 0, side) if sep else ("", rest, 0, side)


@attrs.frozen
class LockHolder:
    """One owner in a lock's hash.

    Attributes:
        field: the hash field, ``<client uuid>:<owner id>`` (``.<n>`` after the owner id for
            a later incarnation, ``...:write`` for a read-write lock's writer).
        client_id: the holding client's id (a UUID); ``""`` when the field has another form.
        owner: the thread, task or explicit owner within that client (its id, as text).
        incarnation: the field's ``.<n>`` suffix (0: none): see ``syncprims._core.lock``.
        hold_count: how many times it holds the lock (reentrant holds).
        side: ``"read"`` or ``"write"`` in a read-write lock, else ``""``.
        lease: seconds left on a reader's longest lease; ``None`` for other holders.
        process: the host, pid and client name of the holding client, from its record;
            ``None`` when there is none (see ``syncprims_client``).
        syncprims_client: ``True`` when the holder is a syncprims client with a record;
            ``False`` when no record exists (not a syncprims client, e.g. a Redisson Java
            client, or a syncprims process gone for longer than the record's TTL);
            ``None`` when the record could not be read (an ACL refusing the key).
    """

    field: str
    client_id: str
    owner: str
    hold_count: int
    incarnation: int = 0
    side: str = ""
    lease: float | None = None
    process: ClientProcess | None = None
    syncprims_client: bool | None = None


@attrs.frozen
class LockWaiter:
    """A waiter recorded in Redis: in a fair lock's queue, in an RLock's registry of waiting
    syncprims clients, or among a read-write lock's waiting writers (writer preference).

    Attributes:
        field: the owner field that waits; ``""`` for an RLock registration that names a
            whole client (its threads or tasks wait behind one entry).
        client_id: the waiting client's id.
        owner: the owner id within that client; ``""`` when the entry names the client.
        position: 1 for the first (the next to acquire in a fair lock; the oldest
            registration elsewhere).
        deadline_in: seconds until the entry counts as gone unless the waiter refreshes
            it (a fair lock: by this machine's clock, as Redisson compares client clocks;
            the registries: by the server's clock); ``None`` when it has no deadline entry.
        process: as in [`LockHolder`][syncprims.LockHolder].
        syncprims_client: as in [`LockHolder`][syncprims.LockHolder].
    """

    field: str
    client_id: str
    owner: str
    position: int
    deadline_in: float | None
    process: ClientProcess | None = None
    syncprims_client: bool | None = None


@attrs.frozen
class LockInfo:
    """What a lock keeps in Redis at one moment (``lock.info()``, every lock kind).

    Attributes:
        name: the lock's name.
        kind: ``"lock"``, ``"fair lock"``, ``"spin lock"``, ``"fenced lock"`` or
            ``"read-write lock"`` (both sides of a read-write lock show the whole lock).
        held: whether any owner holds it.
        ttl: seconds until the lock's key expires; ``None`` when it is free (or has no TTL).
        holders: the owners, in field order (a read-write lock: readers and the writer).
        mode: a read-write lock's ``"read"`` or ``"write"``; ``None`` otherwise or free.
        waiters: the waiters Redis records, in order: a fair lock's queue; an RLock's
            registry of waiting syncprims clients (a Redisson client's waiters are not
            recorded, only its subscription counts); a read-write lock's waiting writers
            with writer preference. Empty for a spin lock, whose waiters only poll.
        token: a fenced lock's last token handed out (it outlives the holds); ``None``
            for other kinds.
        subscribers: clients subscribed to the lock's channels (waiting, or about to),
            the sum of ``channels``; ``None`` when Redis refused to count them.
        channels: for each channel looked at, how many clients subscribe to it
            (``PUBSUB NUMSUB``; ``PUBSUB SHARDNUMSUB`` for a cluster's sharded channel).
    """

    name: str
    kind: str
    held: bool
    ttl: float | None
    holders: tuple[LockHolder, ...] = ()
    mode: str | None = None
    waiters: tuple[LockWaiter, ...] = ()
    token: int | None = None
    subscribers: int | None = None
    channels: Mapping[str, int] = attrs.field(factory=dict)


@attrs.frozen
class PermitLease:
    """A leased permit of a permit-expirable semaphore.

    Attributes:
        permit_id: the id, 32 hex characters.
        expires_in: seconds until the lease ends (negative: ended, not yet reclaimed);
            ``None`` when it never expires.
    """

    permit_id: str
    expires_in: float | None


@attrs.frozen
class SemaphoreInfo:
    """What a semaphore keeps in Redis at one moment (``semaphore.info()``).

    Attributes:
        name: the semaphore's name.
        kind: ``"semaphore"`` or ``"permit-expirable semaphore"``.
        permits: permits available now; ``None`` when the semaphore was never set.
        leases: a permit-expirable semaphore's leased permits (empty for a plain one, whose
            permits belong to nobody).
        ttl: seconds until the semaphore's key expires; ``None`` without one.
        subscribers: clients waiting on its channel; ``None`` when Redis refused to count.
        channels: for each channel looked at, how many clients subscribe to it.
    """

    name: str
    kind: str
    permits: int | None
    leases: tuple[PermitLease, ...] = ()
    ttl: float | None = None
    subscribers: int | None = None
    channels: Mapping[str, int] = attrs.field(factory=dict)


@attrs.frozen
class LatchInfo:
    """What a count-down latch keeps in Redis at one moment (``latch.info()``).

    Attributes:
        name: the latch's name.
        count: the count left; 0 when open (an open latch keeps no key).
        ttl: seconds until the latch's key expires; ``None`` without one.
        subscribers: clients waiting on its channel; ``None`` when Redis refused to count.
        channels: for each channel looked at, how many clients subscribe to it.
    """

    name: str
    count: int
    ttl: float | None = None
    subscribers: int | None = None
    channels: Mapping[str, int] = attrs.field(factory=dict)
