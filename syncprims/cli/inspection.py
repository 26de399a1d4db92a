"""``syncprims inspect NAME`` and ``syncprims unlock NAME --force``: for operators.

``inspect`` reads (never writes) what a lock, fair lock, read-write lock, fenced lock,
semaphore, permit-expirable semaphore or count-down latch keeps in Redis under ``NAME``, in
Redisson's layout (``redisson-spec.md`` section 1.1): the holders (``<client uuid>:<owner>``
hash fields) and their hold counts, the TTL, a fair lock's queue with each waiter's
deadline, a read-write lock's mode and each reader's lease, a fenced lock's last token, a
semaphore's permits and leases, a latch's count, and how many clients subscribe to the
object's channel (``PUBSUB NUMSUB`` plus ``SHARDNUMSUB``, for a cluster's sharded pub/sub;
on a cluster, summed over every node).

``unlock --force`` frees a lock whose holder is gone, with the public ``force_unlock`` of
the matching object, after asking (``--yes`` skips the question).
"""

from __future__ import annotations

import contextlib
import json
import sys
import time
from collections.abc import Callable
from typing import Any, TextIO

import attrs
import redis
import redis.exceptions

import syncprims
from syncprims._protocol.names import (
    lock_channel,
    prefix_name,
    rw_lease_prefix,
    suffix_name,
)
from syncprims.cli._common import CommandError, checked_redis, default_url, redact

__all__ = ["KINDS", "Holder", "Lease", "Snapshot", "Waiter", "force_unlock", "main", "snapshot"]

KINDS = {
    "lock": "lock (RLock)",
    "fair": "fair lock",
    "rw": "read-write lock",
    "fenced": "fenced lock",
    "semaphore": "semaphore",
    "pes": "permit-expirable semaphore",
    "latch": "count-down latch",
}
"""What ``--kind`` accepts, and how each kind is named in the output."""

LOCK_KINDS = ("lock", "fair", "rw", "fenced")
NEVER_MS = 922337203685477
"""The lease score of a permit that never expires (Redisson's constant)."""


@attrs.frozen
class Holder:
    """One owner in a lock's hash.

    Attributes:
        field: the hash field, ``<client uuid>:<owner>`` (``...:write`` for a writer).
        client_id: the holding client's id (a UUID); ``""`` when the field has another form.
        owner: the thread or task within that client.
        hold_count: how many times it holds the lock (reentrant holds).
        side: ``"write"`` or ``"read"`` in a read-write lock, else ``""``.
        lease: seconds left on a reader's longest lease; ``None`` for other holders.
    """

    field: str
    client_id: str
    owner: str
    hold_count: int
    side: str = ""
    lease: float | None = None


@attrs.frozen
class Waiter:
    """A fair lock's waiter: its place in the queue and its deadline.

    Attributes:
        field: ``<client uuid>:<owner>``.
        position: 1 for the next to acquire.
        deadline_in: seconds (by this machine's clock) until it counts as gone unless it
            asks again; ``None`` when it has no deadline entry.
    """

    field: str
    position: int
    deadline_in: float | None


@attrs.frozen
class Lease:
    """A leased permit of a permit-expirable semaphore.

    Attributes:
        permit_id: the id, 32 hex characters.
        expires_in: seconds until the lease ends (negative: ended, not yet reclaimed);
            ``None`` when it never expires.
    """

    permit_id: str
    expires_in: float | None


@attrs.frozen
class Snapshot:
    """What ``NAME`` holds in Redis at one moment.

    Attributes:
        name: the object's name.
        kind: a key of :data:`KINDS`, ``"semaphore-or-latch"`` when a number alone cannot
            tell (pass ``--kind``), ``"none"`` when nothing is stored (a free lock leaves no
            key), or ``"other"`` for a key of another type.
        redis_type: ``TYPE NAME``.
        ttl: seconds until ``NAME`` expires; ``None`` without expiry or key.
        held: a lock with at least one holder.
        holders: the owners of a lock.
        mode: a read-write lock's ``"read"`` or ``"write"``.
        waiters: a fair lock's queue, in order.
        token: a fenced lock's last token handed out.
        value: a semaphore's available permits or a latch's count.
        leases: a permit-expirable semaphore's leased permits.
        subscribers: for each channel looked at, how many clients subscribe to it.
    """

    name: str
    kind: str
    redis_type: str
    ttl: float | None = None
    held: bool = False
    holders: tuple[Holder, ...] = ()
    mode: str | None = None
    waiters: tuple[Waiter, ...] = ()
    token: int | None = None
    value: int | None = None
    leases: tuple[Lease, ...] = ()
    subscribers: dict[str, int] = attrs.field(factory=dict)

    def as_dict(self) -> dict[str, Any]:
        """JSON-friendly form (``--json``)."""
        return attrs.asdict(self)


# -- reading ----------------------------------------------------------------------------------


def _text(value: object) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


def _ttl(r: Any, key: str) -> float | None:
    ms = int(r.pttl(key))
    return ms / 1000 if ms >= 0 else None


def _int(value: object) -> int | None:
    try:
        return int(_text(value)) if value is not None else None
    except ValueError:
        return None


def _split(field: str) -> tuple[str, str, str]:
    """``(client id, owner, side)`` from ``<uuid>:<owner>[:write]``."""
    side = ""
    rest = field
    if rest.endswith(":write"):
        rest, side = rest[: -len(":write")], "write"
    client, sep, owner = rest.rpartition(":")
    if not sep:
        return "", rest, side
    return client, owner, side


def subscribers(r: Any, channel: str) -> int:
    """Clients subscribed to ``channel``: classic pub/sub plus sharded (Redis 7+).

    Each node counts only its own subscribers, and redis-py sends ``PUBSUB`` commands of a
    ``RedisCluster`` to one node unless told otherwise: on a cluster every node is asked and
    the counts are added up (redis-py's reply callback does the sum).
    """
    where: dict[str, Any] = {}
    if isinstance(r, redis.RedisCluster):
        where["target_nodes"] = redis.RedisCluster.ALL_NODES
    total = sum(int(n) for _, n in r.pubsub_numsub(channel, **where))
    with contextlib.suppress(redis.exceptions.ResponseError):  # Redis < 7: no sharded pub/sub
        total += sum(int(n) for _, n in r.pubsub_shardnumsub(channel, **where))
    return total


def detect(r: Any, name: str) -> tuple[str, str]:
    """``(kind, TYPE)`` of what is stored under ``name`` (see :attr:`Snapshot.kind`)."""
    redis_type = _text(r.type(name))
    if redis_type == "hash":
        if r.hexists(name, "mode"):
            return "rw", redis_type
        if r.exists(prefix_name("redisson_lock_token", name)):
            return "fenced", redis_type
        if r.exists(prefix_name("redisson_lock_queue", name)):
            return "fair", redis_type
        return "lock", redis_type
    if redis_type == "string":
        if r.exists(suffix_name(name, "timeout")):
            return "pes", redis_type
        semaphore = subscribers(r, prefix_name("redisson_sc", name))
        latch = subscribers(r, _latch_channel(name))
        if semaphore and not latch:
            return "semaphore", redis_type
        if latch and not semaphore:
            return "latch", redis_type
        return "semaphore-or-latch", redis_type
    if redis_type == "none":
        if r.exists(prefix_name("redisson_lock_token", name)):
            return "fenced", redis_type
        if r.exists(prefix_name("redisson_lock_queue", name)):
            return "fair", redis_type
        if r.exists(suffix_name(name, "timeout")):
            return "pes", redis_type
        return "none", redis_type
    return "other", redis_type


def _latch_channel(name: str) -> str:
    return "redisson_countdownlatch__channel__{" + name + "}"  # always braced (Redisson)


def snapshot(r: Any, name: str, kind: str | None = None) -> Snapshot:
    """Read what ``name`` holds, as ``kind`` (a key of :data:`KINDS`) or as detected.

    Args:
        r: a redis-py client (``Redis`` or ``RedisCluster``) for the server.
        name: the object's name.
        kind: ``None`` to detect it.

    Raises:
        redis.exceptions.RedisError: Redis could not be read.
    """
    detected, redis_type = detect(r, name)
    kind = kind or detected
    ttl = _ttl(r, name)
    channels: list[str] = []
    fields: dict[str, str] = {}
    if redis_type == "hash":
        fields = {_text(k): _text(v) for k, v in r.hgetall(name).items()}
    out: dict[str, Any] = {}
    if kind in LOCK_KINDS:
        mode = fields.pop("mode", None)
        holders = []
        for field, count in sorted(fields.items()):
            client, owner, side = _split(field)
            lease = None
            if kind == "rw" and not side:
                side = "read"
                lease = _reader_lease(r, name, field, _int(count) or 0)
            holders.append(Holder(field, client, owner, _int(count) or 0, side, lease))
        out.update(holders=tuple(holders), held=bool(holders), mode=mode)
        channels.append(
            prefix_name("redisson_rwlock", name) if kind == "rw" else lock_channel(name)
        )
        if kind == "fenced":
            out["token"] = _int(r.get(prefix_name("redisson_lock_token", name))) or 0
        if kind == "fair":
            waiters = _waiters(r, name)
            out["waiters"] = waiters
            channels += [f"{lock_channel(name)}:{w.field}" for w in waiters]
    elif kind in ("semaphore", "latch", "semaphore-or-latch", "pes"):
        out["value"] = _int(r.get(name)) if redis_type == "string" else None
        if kind != "latch":
            channels.append(prefix_name("redisson_sc", name))
        if kind in ("latch", "semaphore-or-latch"):
            channels.append(_latch_channel(name))
        if kind == "pes":
            out["leases"] = _leases(r, name)
    return Snapshot(
        name=name,
        kind=kind,
        redis_type=redis_type,
        ttl=ttl,
        subscribers={channel: subscribers(r, channel) for channel in channels},
        **out,
    )


def _reader_lease(r: Any, name: str, field: str, count: int) -> float | None:
    prefix = rw_lease_prefix(name, field)
    left = [_ttl(r, f"{prefix}:{n}") for n in range(1, count + 1)]
    known = [t for t in left if t is not None]
    return max(known) if known else None


def _waiters(r: Any, name: str) -> tuple[Waiter, ...]:
    queue = [_text(f) for f in r.lrange(prefix_name("redisson_lock_queue", name), 0, -1)]
    deadlines = {
        _text(member): float(score)
        for member, score in r.zrange(
            prefix_name("redisson_lock_timeout", name), 0, -1, withscores=True
        )
    }
    now_ms = time.time() * 1000
    return tuple(
        Waiter(
            field,
            position,
            round((deadlines[field] - now_ms) / 1000, 3) if field in deadlines else None,
        )
        for position, field in enumerate(queue, start=1)
    )


def _leases(r: Any, name: str) -> tuple[Lease, ...]:
    now_ms = time.time() * 1000
    leases = []
    for member, score in r.zrange(suffix_name(name, "timeout"), 0, -1, withscores=True):
        permit = member.hex() if isinstance(member, bytes) else _text(member)
        expires = None if int(score) >= NEVER_MS else round((float(score) - now_ms) / 1000, 3)
        leases.append(Lease(permit, expires))
    return tuple(leases)


# -- showing ----------------------------------------------------------------------------------


def _seconds(value: float | None) -> str:
    return "no expiry" if value is None else f"{value:.3f} s"


def _plural(count: int, word: str) -> str:
    return f"{count} {word}{'' if count == 1 else 's'}"


def describe(shot: Snapshot) -> list[str]:
    """The lines ``inspect`` prints for one snapshot."""
    if shot.kind == "none":
        return [
            f"{shot.name!r}: nothing stored (a free lock, an unused name, or a latch at 0)",
            *_channel_lines(shot),
        ]
    if shot.kind == "other":
        return [f"{shot.name!r}: a {shot.redis_type}, not a syncprims object"]
    kind = KINDS.get(shot.kind, "semaphore or count-down latch (pass --kind to say which)")
    state = ""
    if shot.kind in LOCK_KINDS:
        state = ", held" if shot.held else ", free"
    rows: list[tuple[str, str]] = []
    if shot.redis_type != "none":
        rows.append(("TTL", _seconds(shot.ttl)))
    if shot.mode is not None:
        rows.append(("mode", shot.mode))
    for h in shot.holders:
        who = f"client {h.client_id}, owner {h.owner}" if h.client_id else f"field {h.field!r}"
        text = f"{who}, hold count {h.hold_count}"
        if h.lease is not None:
            text += f", longest read lease {_seconds(h.lease)}"
        rows.append((h.side or "holder", text))
    for w in shot.waiters:
        client, owner, _ = _split(w.field)
        deadline = (
            "no deadline entry"
            if w.deadline_in is None
            else f"counted as gone in {w.deadline_in:.3f} s unless it asks again"
        )
        rows.append((f"waiter {w.position}", f"client {client}, owner {owner}, {deadline}"))
    if shot.token is not None:
        rows.append(("token", f"{shot.token} (the last one handed out)"))
    if shot.value is not None:
        label = {"latch": "count", "semaphore": "permits", "pes": "permits"}.get(shot.kind)
        if label is None:
            rows.append(("value", f"{shot.value} (semaphore: permits available; latch: count)"))
        elif label == "permits":
            rows.append(("permits", f"{shot.value} available"))
        else:
            rows.append(("count", str(shot.value)))
    if shot.kind == "pes":
        rows.append(("leased", _plural(len(shot.leases), "permit")))
        for lease in shot.leases:
            if lease.expires_in is None:
                ends = "never expires"
            elif lease.expires_in < 0:
                ends = f"expired {-lease.expires_in:.3f} s ago, not yet reclaimed"
            else:
                ends = f"expires in {lease.expires_in:.3f} s"
            rows.append(("lease", f"{lease.permit_id}: {ends}"))
    lines = [f"{shot.name!r}: {kind}{state}"]
    lines += [f"  {key:<13} {value}" for key, value in rows]
    return lines + _channel_lines(shot)


def _channel_lines(shot: Snapshot) -> list[str]:
    return [
        f"  {'subscribers':<13} {_plural(count, 'client')} on {channel}"
        for channel, count in shot.subscribers.items()
    ]


# -- commands ---------------------------------------------------------------------------------


def _url(args: Any) -> str:
    url = args.url or default_url()
    if url is None:
        raise CommandError("no Redis URL: pass --url or set REDIS_URL")
    return str(url)


def main(args: Any, out: TextIO | None = None) -> int:
    """The ``inspect`` subcommand: print a snapshot, or one a second with ``--watch``.

    Raises:
        CommandError: the server cannot be used, or was lost while watching.
    """
    out = out or sys.stdout
    r = checked_redis(_url(args))
    clear = args.watch and not args.json and out.isatty()
    try:
        while True:
            try:
                shot = snapshot(r, args.name, args.kind)
            except (redis.exceptions.RedisError, OSError) as error:
                raise CommandError(f"lost Redis while reading {args.name!r}: {error}") from None
            if args.json:
                print(json.dumps(shot.as_dict(), indent=None if args.watch else 2), file=out)
            else:
                if clear:
                    out.write("\x1b[H\x1b[2J")
                elif args.watch:
                    print(time.strftime("-- %H:%M:%S"), file=out)
                print("\n".join(describe(shot)), file=out)
            out.flush()
            if not args.watch:
                return 0
            time.sleep(args.interval)
    except KeyboardInterrupt:
        return 0  # the way out of --watch
    finally:
        r.close()


def force_unlock(r: Any, shot: Snapshot) -> bool:
    """Release the lock in ``shot`` whoever holds it, with the public ``force_unlock``.

    Returns:
        ``True`` if it was held.
    """
    with syncprims.connect(r) as client:  # r stays open: the caller closes it
        name = shot.name
        if shot.kind == "fair":
            return client.get_fair_lock(name).force_unlock()
        if shot.kind == "fenced":
            return client.get_fenced_lock(name).force_unlock()
        if shot.kind == "rw":
            rw = client.get_read_write_lock(name)
            side = rw.write_lock() if shot.mode == "write" else rw.read_lock()
            return side.force_unlock()
        return client.get_lock(name).force_unlock()


def unlock_main(args: Any, out: TextIO | None = None, ask: Callable[[str], str] = input) -> int:
    """The ``unlock`` subcommand.

    Returns:
        0 when the lock was released; 1 when it was not held or the answer was not yes.

    Raises:
        CommandError: no ``--force``, a name that is not a lock, or an unusable server.
    """
    out = out or sys.stdout
    if not args.force:
        raise CommandError(
            "unlock frees a lock whoever holds it: pass --force to mean it "
            "(see `syncprims inspect NAME` first)"
        )
    r = checked_redis(_url(args))
    try:
        shot = snapshot(r, args.name, args.kind)
        if shot.kind not in LOCK_KINDS and shot.kind != "none":
            what = KINDS.get(shot.kind, "semaphore or count-down latch")
            raise CommandError(f"{args.name!r} is a {what}, not a lock: nothing to unlock")
        if not shot.held:
            print(f"{args.name!r} is not locked: nothing to unlock", file=out)
            return 1
        print("\n".join(describe(shot)), file=out)
        if not args.yes:
            try:
                answer = ask(f"Force-unlock {args.name!r}, whoever holds it? [y/N] ")
            except EOFError:
                answer = ""
            if answer.strip().lower() not in ("y", "yes"):
                print("not unlocked", file=out)
                return 1
        released = force_unlock(r, shot)
    except (redis.exceptions.RedisError, syncprims.SyncPrimsError) as error:
        where = redact(_url(args))
        raise CommandError(f"could not unlock {args.name!r} at {where}: {error}") from None
    finally:
        r.close()
    if not released:
        print(f"{args.name!r} was released meanwhile: nothing to unlock", file=out)
        return 1
    print(f"force-unlocked {KINDS[shot.kind]} {args.name!r}", file=out)
    return 0
