"""``syncprims inspect NAME`` and ``syncprims unlock NAME --force``: for operators (what they
show and take: docs/operations.md).

``inspect`` prints the object's ``info()``, the kind told from its keys by
``syncprims._core.info``; ``unlock --force`` asks, then calls the lock's public
``force_unlock``.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Mapping
from typing import Any, TextIO

import attrs
import redis
import redis.exceptions

import syncprims
from syncprims._core.info import detect
from syncprims._core.objects import ObjectCore
from syncprims._protocol.info import ClientProcess, LockHolder, LockWaiter, PermitLease
from syncprims._protocol.kinds import KINDS as TABLE
from syncprims._protocol.kinds import make
from syncprims._protocol.stepping import run
from syncprims.cli._common import CommandError, checked_redis, default_url, redact

__all__ = ["KINDS", "Snapshot", "force_unlock", "main", "read"]

KINDS = {kind.name: kind.title for kind in TABLE.values() if kind.inspect}
"""What ``--kind`` accepts, and how each kind is named in the output (from the table of
kinds, :mod:`syncprims._protocol.kinds`)."""

LOCK_KINDS = tuple(name for name in KINDS if TABLE[name].layout)
"""The lock kinds among them: ``unlock`` takes these."""

_LOCK_FIELDS = ("ttl", "held", "holders", "mode", "waiters", "token")
"""The :class:`Snapshot` fields that a lock's ``info()`` has under the same name."""


@attrs.frozen
class Snapshot:
    """What ``NAME`` holds in Redis at one moment: the object's ``info()``, with its kind
    as ``--kind`` names it (the ``--json`` output).

    Attributes:
        name: the object's name.
        kind: a key of :data:`KINDS`, ``"semaphore-or-latch"`` when a number alone cannot
            tell (pass ``--kind``), ``"none"`` when nothing is stored (a free lock leaves no
            key), or ``"other"`` for a key of another type.
        redis_type: ``TYPE NAME``.
        ttl: seconds until ``NAME`` expires; ``None`` without expiry or key.
        held: a lock with at least one holder.
        holders: the owners of a lock, each with its process where known
            ([`LockHolder`][syncprims.LockHolder]).
        mode: a read-write lock's ``"read"`` or ``"write"``.
        waiters: the waiters Redis records, in order ([`LockWaiter`][syncprims.LockWaiter]).
        token: a fenced lock's last token handed out.
        value: a semaphore's available permits or a latch's count.
        leases: a permit-expirable semaphore's leased permits.
        subscribers: for each channel looked at, how many clients subscribe to it (empty
            when Redis refused to count them).
    """

    name: str
    kind: str
    redis_type: str
    ttl: float | None = None
    held: bool = False
    holders: tuple[LockHolder, ...] = ()
    mode: str | None = None
    waiters: tuple[LockWaiter, ...] = ()
    token: int | None = None
    value: int | None = None
    leases: tuple[PermitLease, ...] = ()
    subscribers: Mapping[str, int] = attrs.field(factory=dict)

    def as_dict(self) -> dict[str, Any]:
        """JSON-friendly form (``--json``)."""
        return attrs.asdict(self)


# -- reading: the library's info() -----------------------------------------------------------


def read(client: syncprims.Client, name: str, kind: str | None = None) -> Snapshot:
    """Read what ``name`` holds through ``client``, as ``kind`` (a key of :data:`KINDS`) or
    as detected from its keys.

    Raises:
        syncprims.TransportError, syncprims.ServerReplyError: Redis could not be read.
    """
    core = ObjectCore(client._ex, name)  # the CLI is part of the library: no public detect()
    detected, redis_type = run(detect(core))
    kind = kind or detected
    base = Snapshot(name=name, kind=kind, redis_type=redis_type)
    if kind in LOCK_KINDS:
        lock = make(TABLE[kind], client, name).info()
        same = {field: getattr(lock, field) for field in _LOCK_FIELDS}
        return attrs.evolve(base, subscribers=lock.channels, **same)
    if kind in ("semaphore", "pes", "semaphore-or-latch"):
        semaphore = make(TABLE["pes" if kind == "pes" else "semaphore"], client, name).info()
        channels = dict(semaphore.channels)
        if kind == "semaphore-or-latch":
            channels.update(client.get_count_down_latch(name).info().channels)
        value = semaphore.permits if redis_type == "string" else None
        return attrs.evolve(
            base, ttl=semaphore.ttl, value=value, leases=semaphore.leases, subscribers=channels
        )
    if kind == "latch":
        latch = client.get_count_down_latch(name).info()
        value = latch.count if redis_type == "string" else None
        return attrs.evolve(base, ttl=latch.ttl, value=value, subscribers=latch.channels)
    return attrs.evolve(base, ttl=client.get_lock(name).remain_time_to_live())


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
        rows.append((h.side or "holder", f"{text}; {_process(h.process, h.syncprims_client)}"))
    for w in shot.waiters:
        who = f"client {w.client_id}, owner {w.owner}" if w.owner else f"client {w.client_id}"
        deadline = (
            "no deadline entry"
            if w.deadline_in is None
            else f"counted as gone in {w.deadline_in:.3f} s unless it asks again"
        )
        process = _process(w.process, w.syncprims_client)
        rows.append((f"waiter {w.position}", f"{who}, {deadline}; {process}"))
    if shot.token is not None:
        rows.append(("token", f"{shot.token} (the last one handed out)"))
    if shot.value is not None:
        if shot.kind == "latch":
            rows.append(("count", str(shot.value)))
        elif shot.kind in ("semaphore", "pes"):
            rows.append(("permits", f"{shot.value} available"))
        else:
            rows.append(("value", f"{shot.value} (semaphore: permits available; latch: count)"))
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


def _process(process: ClientProcess | None, syncprims_client: bool | None) -> str:
    """Where a holder or waiter runs, as its client's record says."""
    if process is not None:
        name = f", client name {process.client_name!r}" if process.client_name else ""
        return f"pid {process.pid} on {process.host}{name} (syncprims {process.version})"
    if syncprims_client is None:
        return "process unknown (its client record could not be read)"
    return "not a syncprims client (no client record: Redisson, or a process gone)"


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


def main(args: Any) -> int:
    """The ``inspect`` subcommand: print a snapshot, or one a second with ``--watch``.

    Raises:
        CommandError: the server cannot be used, or was lost while watching.
    """
    out = sys.stdout
    r = checked_redis(_url(args))
    clear = args.watch and not args.json and out.isatty()
    try:
        client = syncprims.connect(r, client_record=False)  # reads only; r closed below
    except (syncprims.SyncPrimsError, redis.exceptions.RedisError, OSError) as error:
        r.close()
        raise CommandError(f"cannot use Redis at {redact(_url(args))}: {error}") from None
    try:
        while True:
            try:
                shot = read(client, args.name, args.kind)
            except (syncprims.SyncPrimsError, redis.exceptions.RedisError, OSError) as error:
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
        client.shutdown()
        r.close()


def force_unlock(client: syncprims.Client, shot: Snapshot) -> bool:
    """Release the lock in ``shot`` whoever holds it, with the public ``force_unlock`` of its
    kind (an RLock's for a name that holds no lock), made by the table of kinds.

    Returns:
        ``True`` if it was held.

    Raises:
        syncprims.TransportError: Redis could not be reached.
    """
    kind = shot.kind if shot.kind in LOCK_KINDS else "lock"
    if kind == "rw":  # the side that holds it
        kind = "write" if shot.mode == "write" else "read"
    released: bool = make(TABLE[kind], client, shot.name).force_unlock()
    return released


def unlock_main(args: Any) -> int:
    """The ``unlock`` subcommand.

    Returns:
        0 when the lock was released; 1 when it was not held or the answer was not yes.

    Raises:
        CommandError: no ``--force``, a name that is not a lock, or an unusable server.
    """
    if not args.force:
        raise CommandError(
            "unlock frees a lock whoever holds it: pass --force to mean it "
            "(see `syncprims inspect NAME` first)"
        )
    r = checked_redis(_url(args))
    try:
        with syncprims.connect(r, client_record=False) as client:  # r closed below
            return _unlock(client, args, sys.stdout)
    except (redis.exceptions.RedisError, syncprims.SyncPrimsError) as error:
        where = redact(_url(args))
        raise CommandError(f"could not unlock {args.name!r} at {where}: {error}") from None
    finally:
        r.close()


def _unlock(client: syncprims.Client, args: Any, out: TextIO) -> int:
    """``unlock`` once connected (see :func:`unlock_main`)."""
    shot = read(client, args.name, args.kind)
    if shot.kind not in LOCK_KINDS and shot.kind != "none":
        what = KINDS.get(shot.kind, "semaphore or count-down latch")
        raise CommandError(f"{args.name!r} is a {what}, not a lock: nothing to unlock")
    if not shot.held:
        print(f"{args.name!r} is not locked: nothing to unlock", file=out)
        return 1
    print("\n".join(describe(shot)), file=out)
    if not args.yes:
        try:
            answer = input(f"Force-unlock {args.name!r}, whoever holds it? [y/N] ")
        except EOFError:
            answer = ""
        if answer.strip().lower() not in ("y", "yes"):
            print("not unlocked", file=out)
            return 1
    released = force_unlock(client, shot)
    if not released:
        print(f"{args.name!r} was released meanwhile: nothing to unlock", file=out)
        return 1
    print(f"force-unlocked {KINDS[shot.kind]} {args.name!r}", file=out)
    return 0
