"""A client process of the campaign: threads looping acquire, critical section, release.

Run as ``python -m tests.chaos.workers '<spec json>'`` by the runner (one process per
``--processes`` per primitive; the nemesis kills, pauses and sets the wall clocks of them:
:class:`WallClock`).
Every event goes to the process's history file as one JSON line written with a single
``os.write`` on an ``O_APPEND`` descriptor, so lines of different threads never interleave
and a SIGKILL loses nothing already written. Times are ``time.monotonic()``.

The critical section behaves like a careful application: it reads the store's counter,
holds for a random time (now and then longer than a watchdog renewal period), and before it
writes checks whether it was told that *its* hold was lost (``is_lost``, or an ``on_lost``
call naming this section); if so it does not write (``abort``). Every notice is logged with
the section it belongs to. The fenced kind does not check: it writes through the shipped
``syncprims.fencing.fenced_set`` and lets the fence refuse a stale write, and now and then
outlives its explicit lease on purpose (``overrun``). ``rlock-long`` takes its lock 1-3
times (reentrant) with a 0.6 s watchdog and holds a quarter of its sections for several
renewal periods; now and then an acquire stalls in the library between the grant's reply
and its lease check, longer than the lease (``stalled``): the library must refuse that
grant.

The broken kinds (:data:`BROKEN`) are the checker's self-test: each is a primitive with one
safety mechanism removed by monkeypatching inside this process (never by changing
syncprims), and each must be flagged under the nemesis.
"""

from __future__ import annotations

import asyncio
import contextlib
import faulthandler
import functools
import inspect
import json
import os
import random
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import syncprims
import syncprims.asyncio
import syncprims.fencing
from tests.chaos.store import Store

__all__ = ["BROKEN", "KINDS", "OPT_IN", "main"]

KINDS = (
    "rlock",
    "rlock-async",
    "rlock-long",
    "fair",
    "rw",
    "fenced",
    "spin",
    "semaphore",
    "pexpirable",
    "multilock",
    "redlock",
    "cluster",
    "sentinel",
)

OPT_IN: tuple[str, ...] = ()
"""Kinds a campaign runs only when ``--kinds`` names them (none at present). ``rlock-async``
was opt-in while its overlaps were investigated: they came from the proxy, whose reply black
hole used to deliver later replies on a connection after dropping earlier ones (TCP never
does), which a multiplexed connection pairs with the wrong commands; the proxy now stalls
such a connection. 10 minutes, all kinds, seed 28, 2026-11-25: 0 violations."""

BROKEN = (
    "broken-lease",
    "broken-script",
    "broken-late-grant",
    "broken-silent",
    "broken-quorum",
)
"""Deliberately broken locks for the checker's self-test (never part of a campaign):
``broken-lease``, an RLock taken with a 50 ms lease and no watchdog around a 60-150 ms
critical section; ``broken-script``, a lock whose acquire script (raw redis-py) skips the
existence check; ``broken-late-grant``, an RLock that takes a grant read after its lease
(its acquires stall like ``rlock-long``'s, more often); ``broken-silent``, an RLock whose
losses are never told (no ``on_lost``, ``is_lost`` always false; a fifth of its holds are
never renewed, so that it has losses in any run); ``broken-quorum``, a
RedLock held with 2 of its 5 masters."""

PERMITS = 2  # each semaphore's permits
PERMIT_LEASE = 2.0  # the permit-expirable semaphore's lease, seconds
BROKEN_LEASE = 0.05
LONG_WATCHDOG = 0.6  # rlock-long's and broken-silent's lock_watchdog_timeout, seconds
OVERRUN_LEASE = 0.25  # a fenced stale writer's explicit lease, seconds
STALL = {"rlock-long": 0.02, "broken-late-grant": 0.3}  # share of acquires that stall
SILENT_DROPPED = 0.2  # share of broken-silent's holds whose renewals all fail

# The PermitExpirableSemaphore runs with server-time leases (the start event says ``clock:
# server``, and the checker excuses no permit takeover by a client's clock); the client-clock
# default's failure under skew is shown by tests/test_semaphore.py instead.
PEXPIRABLE_SERVER_TIME: dict[str, Any] = {"server_time": True}

_BROKEN_ACQUIRE = """
redis.call('hincrby', KEYS[1], ARGV[2], 1)
redis.call('pexpire', KEYS[1], ARGV[1])
return nil
"""
_BROKEN_RELEASE = """
if redis.call('hexists', KEYS[1], ARGV[1]) == 0 then return 0 end
redis.call('del', KEYS[1])
return 1
"""


class WallClock:
    """This process's wall clock, ``offset`` seconds off (the nemesis's ``clock_skew``).

    ``time.time`` and ``time.time_ns`` (what the PermitExpirableSemaphore's client-clock
    leases read) are replaced in this process only; ``time.monotonic``, which the history
    and the library's local deadlines use, is left alone. The offset is read from the file
    the runner named (a number of seconds) every 0.2 s, so a change is a step. Debian's
    ``faketime`` cannot do this for Python: with ``FAKETIME_DONT_FAKE_MONOTONIC=1`` (needed,
    or CLOCK_MONOTONIC jumps too) every ``time.sleep`` fails with ``EINVAL`` (0.9.10).
    """

    def __init__(self, path: str) -> None:
        self._path = path
        self.offset = 0.0
        real_time, real_ns = time.time, time.time_ns
        time.time = lambda: real_time() + self.offset
        time.time_ns = lambda: real_ns() + int(self.offset * 1e9)
        threading.Thread(target=self._follow, name="wall-clock", daemon=True).start()

    def _follow(self) -> None:
        while True:
            with contextlib.suppress(OSError, ValueError), open(self._path, encoding="utf-8") as f:
                self.offset = float(f.read().strip() or 0)
            time.sleep(0.2)


class History:
    """The process's history file (thread-safe, torn only by SIGKILL mid-line)."""

    def __init__(self, path: Path) -> None:
        self.pid = os.getpid()
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def write(self, ev: str, t: float | None = None, **fields: Any) -> None:
        """Append one event (``t`` defaults to now)."""
        record = {"ev": ev, "pid": self.pid, "t": time.monotonic() if t is None else t, **fields}
        os.write(self._fd, (json.dumps(record) + "\n").encode())


class Notices:
    """Loss notices, each for the section it belongs to.

    Every worker thread (or task) has lock objects of its own, so a callback made for one
    thread and resource belongs to the section that thread is in (or about to be in) on
    that resource; a notice is logged with that section's id, and counts for it alone.
    """

    def __init__(self, history: History) -> None:
        self._history = history
        self._current: dict[tuple[int, str], str] = {}
        self._told: set[str] = set()

    def expect(self, thread: int, res: str, sid: str) -> None:
        """``thread``'s next section on ``res`` will be ``sid`` (set before its acquire)."""
        self._current[(thread, res)] = sid

    def callback(self, thread: int, res: str, master: str | None = None) -> syncprims.LostCallback:
        """An ``on_lost`` callback for ``thread``'s lock on ``res`` (a RedLock's sub-lock on
        ``master``)."""

        def on_lost(lock_name: str, reason: object) -> None:
            sid = self._current.get((thread, res))
            self.tell(sid, res, str(reason), master=master, name=lock_name)

        return on_lost

    def tell(self, sid: str | None, res: str, reason: str, **fields: Any) -> None:
        """Log a notice for section ``sid``."""
        if sid is not None:
            self._told.add(sid)
        self._history.write("lost", sid=sid, res=res, reason=reason, **fields)

    def told(self, sid: str) -> bool:
        """Whether a notice for ``sid`` came."""
        return sid in self._told


class Prim:
    """One primitive as a worker thread uses it."""

    role = "w"
    lease: float | None = None  # the lease in force for a hold (None: none at all)
    explicit = False  # an explicit lease, not renewed

    def acquire(self, wait: float) -> tuple[bool, int | str | None]:
        """Try to take it within ``wait`` seconds; the token or permit id when held."""
        raise NotImplementedError

    def release(self, handle: int | str | None) -> None:
        """Give it back."""
        raise NotImplementedError

    def reenter(self) -> bool:
        """Take it once more while held (reentrant kinds)."""
        raise NotImplementedError

    def lost(self) -> bool:
        """Whether the library says the current hold is lost (no Redis call)."""
        return False

    def masters(self) -> list[str] | None:
        """The masters holding the grant (a RedLock), if the worker can tell."""
        return None

    def cleanup(self) -> None:
        """After a failed acquire: give back a hold that may have been taken."""


class LockPrim(Prim):
    """RLock, FairLock, either side of a ReadWriteLock, FencedLock, MultiLock, RedLock."""

    def __init__(
        self,
        lock: Any,
        watchdog: float,
        role: str = "w",
        fenced: bool = False,
        lease: float | None = None,
    ) -> None:
        self.lock, self.role, self.fenced, self.lease_time = lock, role, fenced, lease
        self.lease = watchdog if lease is None else lease
        self.explicit = lease is not None

    def acquire(self, wait: float) -> tuple[bool, int | str | None]:
        if self.fenced:
            token = self.lock.try_lock_and_get_token(wait_time=wait, lease_time=self.lease_time)
            return token is not None, token
        return bool(self.lock.try_lock(wait_time=wait, lease_time=self.lease_time)), None

    def release(self, handle: int | str | None) -> None:
        self.lock.unlock()

    def reenter(self) -> bool:
        return bool(self.lock.try_lock(wait_time=0, lease_time=self.lease_time))

    def lost(self) -> bool:
        return bool(getattr(self.lock, "is_lost", False))  # a MultiLock may not have it yet

    def masters(self) -> list[str] | None:
        if not isinstance(self.lock, syncprims.RedLock):
            return None
        try:  # the sub-locks' own memory of their holds (no Redis call)
            owner = threading.get_ident()
            return [
                f"m{i}"
                for i, sub in enumerate(self.lock.locks)
                if sub._core.field(owner) in sub._core.holds.leases
            ]
        except AttributeError:  # the library's internals moved: judge against every master
            return None

    def cleanup(self) -> None:
        for _ in range(3):
            if not self.lock.is_held_by_current_thread():
                return
            self.lock.unlock()


class SemaphorePrim(Prim):
    """A plain semaphore: permits belong to nobody, and have no lease."""

    role = "s"

    def __init__(self, sem: Any) -> None:
        self.sem = sem

    def acquire(self, wait: float) -> tuple[bool, int | str | None]:
        return bool(self.sem.try_acquire(1, wait_time=wait)), None

    def release(self, handle: int | str | None) -> None:
        self.sem.release(1)


class PermitPrim(Prim):
    """A permit-expirable semaphore: each permit has an id and an explicit lease."""

    role = "s"
    lease = PERMIT_LEASE
    explicit = True

    def __init__(self, sem: Any) -> None:
        self.sem = sem
        self._seeded = 0.0

    def acquire(self, wait: float) -> tuple[bool, int | str | None]:
        permit = self.sem.try_acquire(wait_time=wait, lease_time=PERMIT_LEASE)
        if permit is None and time.monotonic() - self._seeded > 2.0:
            # An empty restart or an eviction took its permits away: set them again (only
            # where the semaphore does not exist; the checker judges who held meanwhile).
            self._seeded = time.monotonic()
            self.sem.try_set_permits(PERMITS)
        return permit is not None, permit

    def release(self, handle: int | str | None) -> None:
        self.sem.release(handle)


class BrokenScriptPrim(Prim):
    """A lock whose acquire skips the existence check (raw redis-py, polling)."""

    lease = 30.0
    explicit = True

    def __init__(self, url: str, name: str) -> None:
        import redis

        self.redis: Any = redis.Redis.from_url(url, socket_timeout=2)
        self.name = name
        self.owner = f"{os.getpid()}:{threading.get_ident()}"
        self._acquire = self.redis.register_script(_BROKEN_ACQUIRE)
        self._release = self.redis.register_script(_BROKEN_RELEASE)

    def acquire(self, wait: float) -> tuple[bool, int | str | None]:
        self._acquire(keys=[self.name], args=[30000, self.owner])
        return True, None

    def release(self, handle: int | str | None) -> None:
        if not self._release(keys=[self.name], args=[self.owner]):
            raise syncprims.LockNotHeldError(f"{self.name} is not held", name=self.name)


# -- the mutants and the in-process stall ---------------------------------------------------------

_STALLED = threading.local()


def _stall_acquires(share: float, refuse: bool, history: History) -> None:
    """Make ``share`` of this process's lock acquisitions stall, between the grant's reply
    (or a grant handed over) and the library's check of it, for longer than their lease;
    ``refuse=False`` also turns that check off (the ``broken-late-grant`` mutant)."""
    try:
        from syncprims._core.lock import core as lock_module
        from syncprims._core.lock import release as release_module

        checks: list[Callable[..., bool]] = [
            lock_module.__dict__["past_lease"],
            release_module.__dict__["past_lease"],
        ]
    except (ImportError, KeyError) as error:
        history.write("note", what=f"the acquire stall hook is gone: {error!r}")
        return
    rng = random.Random(os.getpid())

    def stalling(check: Callable[..., bool]) -> Callable[..., bool]:
        def past_lease(lock: Any, lease: int, since: float) -> bool:
            worker = threading.current_thread().name.startswith("worker-")
            once = not getattr(_STALLED, "seconds", 0.0) and not getattr(_STALLED, "off", False)
            if worker and once and rng.random() < share:  # once per acquire, in its thread
                _STALLED.seconds = lease / 1000 + 0.3
                time.sleep(_STALLED.seconds)
            return check(lock, lease, since) if refuse else False

        return past_lease

    lock_module.past_lease = stalling(checks[0])  # type: ignore[attr-defined]
    release_module.past_lease = stalling(checks[1])


def _drop_renewals(share: float) -> None:
    """Fail every renewal of ``share`` of this process's holds (``broken-silent``): those
    holds lapse while their sections run, whatever the nemesis does, so that the silence
    has losses to show in any run (a loaded 30 s run once had none from faults alone)."""
    from syncprims._services.watchdog import Watchdog

    renew = Watchdog._renew
    rng = random.Random(os.getpid())
    doomed: dict[tuple[str, str, float], bool] = {}

    async def renew_some(self: Watchdog, batch: list[Any], lease_ms: int) -> None:
        if any(doomed.setdefault((r.name, r.field, r.registered), rng.random() < share)
               for r in batch):  # fmt: skip
            self._renew_failed(batch, RuntimeError("broken-silent: renewal dropped"))
            return
        await renew(self, batch, lease_ms)

    Watchdog._renew = renew_some  # type: ignore[method-assign]


def _mutate(kind: str, history: History) -> None:
    """Remove one safety mechanism from this process's copy of syncprims."""
    if kind in STALL:
        _stall_acquires(STALL[kind], refuse=kind != "broken-late-grant", history=history)
    if kind == "broken-silent":
        from syncprims._core.lock.holds import Holds

        Holds.watchdog_lost = lambda self, name, field, reason: None  # type: ignore[method-assign]
        Holds.field_lost = lambda self, field: None  # type: ignore[method-assign]
        _drop_renewals(SILENT_DROPPED)
    elif kind == "broken-quorum":
        from syncprims._core.multi import RedLockCore

        RedLockCore.needed = staticmethod(lambda count: 2)  # type: ignore[method-assign]


# -- the clients ----------------------------------------------------------------------------------


def _durable_fenced(client: Any, name: str, **kwargs: Any) -> tuple[Any, bool]:
    """A FencedLock with durable tokens where the library has them."""
    try:
        return client.get_fenced_lock(name, durable_tokens=True, **kwargs), True
    except TypeError:
        return client.get_fenced_lock(name, **kwargs), False


class Clients:
    """The process's syncprims client(s) and primitive factory."""

    def __init__(self, spec: dict[str, Any], notices: Notices) -> None:
        self.spec = spec
        self.kind: str = spec["kind"]
        self.notices = notices
        options: dict[str, Any] = dict(spec["options"])
        self.watchdog = float(options.get("lock_watchdog_timeout", 30.0))
        self.client: Any = None
        self.masters: Any = None
        if self.kind in ("redlock", "broken-quorum"):
            self.masters = syncprims.connect_many(spec["urls"], **options)
            self.op_timeout = max(c.operation_timeout for c in self.masters.clients)
        else:
            self.client = syncprims.connect(spec["urls"][0], **options)
            self.op_timeout = self.client.operation_timeout
        self.durable = False
        if self.kind == "fenced":
            self.durable = _durable_fenced(self.client, self.name("probe"))[1]

    def name(self, res: str) -> str:
        """The Redis name of resource ``res``."""
        return f"chaos:{self.spec['run']}:{self.kind}:{res}"

    def make(self, res: str, thread: int) -> Prim:
        """The primitive guarding ``res``, for worker thread ``thread``."""
        name, kind, c, w = self.name(res), self.kind, self.client, self.watchdog
        cb = self.notices.callback(thread, res)
        if kind == "broken-lease":
            return LockPrim(c.get_lock(name), w, lease=BROKEN_LEASE)
        if kind == "broken-script":
            return BrokenScriptPrim(self.spec["urls"][0], name)
        if kind in (
            "rlock",
            "rlock-long",
            "cluster",
            "sentinel",
            "broken-late-grant",
            "broken-silent",
        ):
            return LockPrim(c.get_lock(name, on_lost=cb), w)
        if kind == "fair":
            return LockPrim(c.get_fair_lock(name, on_lost=cb), w)
        if kind == "fenced":
            return LockPrim(_durable_fenced(c, name, on_lost=cb)[0], w, fenced=True)
        if kind == "spin":
            return LockPrim(c.get_spin_lock(name, on_lost=cb), w)
        if kind == "rw":
            rw = c.get_read_write_lock(name, on_lost=cb)
            if thread % 2:
                return LockPrim(rw.read_lock(), w, role="r")
            return LockPrim(rw.write_lock(), w)
        if kind == "semaphore":
            return SemaphorePrim(c.get_semaphore(name))
        if kind == "pexpirable":
            return PermitPrim(c.get_permit_expirable_semaphore(name, **PEXPIRABLE_SERVER_TIME))
        if kind == "multilock":
            subs = [c.get_lock(f"{name}:{i}", on_lost=cb) for i in "abc"]
            return LockPrim(_multi(syncprims.MultiLock, subs, cb), w)
        if kind in ("redlock", "broken-quorum"):
            subs = [
                m.get_lock(name, on_lost=self.notices.callback(thread, res, f"m{i}"))
                for i, m in enumerate(self.masters.clients)
            ]
            return LockPrim(_multi(syncprims.RedLock, subs, cb), w)
        raise ValueError(f"unknown kind {kind!r}")

    def set_permits(self, resources: list[str], permits: int) -> None:
        """Give each semaphore its permits (only the first call per semaphore does)."""
        for res in resources:
            if self.kind == "semaphore":
                self.client.get_semaphore(self.name(res)).try_set_permits(permits)
            elif self.kind == "pexpirable":
                self.client.get_permit_expirable_semaphore(self.name(res)).try_set_permits(permits)

    def shutdown(self) -> None:
        """Shut the clients down."""
        if self.client is not None:
            self.client.shutdown()
        if self.masters is not None:
            self.masters.shutdown()


def _multi(cls: Any, subs: list[Any], on_lost: syncprims.LostCallback) -> Any:
    """A MultiLock or RedLock, told of its own loss where the library can (the notices of
    its sub-locks count anyway)."""
    try:
        return cls(*subs, on_lost=on_lost)
    except TypeError:
        return cls(*subs)


def _error(error: BaseException) -> str:
    maybe = getattr(error, "maybe_executed", None)
    return type(error).__name__ + ("(maybe_executed)" if maybe else "")


def _hold(kind: str, rng: random.Random) -> tuple[float, int, bool]:
    """A section's hold (seconds), how many times it takes the lock, and whether it
    outlives an explicit lease on purpose."""
    if kind == "broken-lease":
        return rng.uniform(0.06, 0.15), 1, False
    if kind == "broken-late-grant":
        return rng.uniform(0.2, 1.2), 1, False
    if kind == "broken-silent":  # past a notice's bound: the silence shows
        return rng.uniform(1.0, 3.0), 1, False
    if kind == "rlock-long":  # a quarter: several renewal periods of the 0.6 s watchdog
        long = rng.random() < 0.25
        return rng.uniform(0.5, 2.5) if long else rng.uniform(0.0, 0.002), rng.randint(1, 3), False
    if kind == "fenced" and rng.random() < 0.05:
        return rng.uniform(0.35, 0.6), 1, True
    # 1% of the sections outlast a watchdog renewal period (a third of the 2 s lease).
    return rng.uniform(0.7, 1.0) if rng.random() < 0.01 else rng.uniform(0.0, 0.002), 1, False


class _Section:
    """What one worker thread does with one hold: the section's body and its release."""

    def __init__(
        self, spec: dict[str, Any], store: Store, history: History, notices: Notices
    ) -> None:
        self.spec, self.store, self.history, self.notices = spec, store, history, notices
        # Where the fence takes a writer id, an equal token passes only from the same writer.
        self.writer_ids = "writer" in inspect.signature(syncprims.fencing.fenced_set).parameters

    def told(self, prim: Prim, sid: str, res: str) -> bool:
        """Whether this section was told of its loss; a first ``is_lost`` is logged."""
        if self.notices.told(sid):
            return True
        if prim.lost():
            self.notices.tell(sid, res, "is_lost", src="is_lost")
            return True
        return False

    def run(self, kind: str, prim: Prim, sid: str, res: str, *, token: int, hold: float) -> None:
        store, history = self.store, self.history
        if prim.role == "s":
            time.sleep(hold)
        elif prim.role == "r":
            before = store.read(kind, res)
            time.sleep(hold)
            after = store.read(kind, res)
            if after != before:
                store.note(kind, res, f"read_changed {sid} {before} {after}")
        elif kind == "fenced":  # no is_lost check: the fence refuses a stale write
            read = store.read(kind, res)
            time.sleep(hold)
            fence: Callable[..., object] = syncprims.fencing.fenced_set
            if self.writer_ids:
                fence = functools.partial(fence, writer=sid)
            found, accepted = store.fenced_commit(kind, res, sid, read, token=token, fence=fence)
            history.write("commit", sid=sid, read=read, cur=found, accepted=accepted)
        else:
            read = store.read(kind, res)
            time.sleep(hold)
            if self.told(prim, sid, res):
                history.write("abort", sid=sid)
            else:
                found, accepted = store.commit(kind, res, sid, read, token)
                history.write("commit", sid=sid, read=read, cur=found, accepted=accepted)


def _loop(
    spec: dict[str, Any],
    *,
    thread: int,
    clients: Clients,
    store: Store,
    history: History,
    notices: Notices,
) -> None:
    rng = random.Random(f"{spec['seed']}:{spec['index']}:{thread}")
    kind, wait, stop_at = clients.kind, float(spec["wait"]), float(spec["stop_at"])
    prims = {res: clients.make(res, thread) for res in spec["resources"]}
    body = _Section(spec, store, history, notices)
    serial = 0
    while time.monotonic() < stop_at:
        if kind == "semaphore" and store.gate_closed(kind):
            _park(store, kind, f"{history.pid}-{thread}", stop_at)
            continue
        res = rng.choice(spec["resources"])
        hold, depth, overrun = _hold(kind, rng)
        prim = _overrun_prim(prims[res]) if overrun else prims[res]
        sid = f"{history.pid}-{thread}-{serial + 1}"
        notices.expect(thread, res, sid)
        t_req = time.monotonic()
        history.write("req", t=t_req, kind=kind, res=res, th=thread, wait=wait)
        _STALLED.seconds = 0.0
        try:
            held, handle = prim.acquire(wait)
        except Exception as error:
            t = time.monotonic()
            history.write("acq_err", t=t, t_req=t_req, res=res, wait=wait, err=_error(error),
                          stalled=_STALLED.seconds)  # fmt: skip
            try:
                prim.cleanup()
            except Exception as cleanup_error:
                history.write("cleanup_err", res=res, err=_error(cleanup_error))
            time.sleep(0.05)
            continue
        t = time.monotonic()
        if not held:
            history.write("deny", t=t, t_req=t_req, res=res, wait=wait, stalled=_STALLED.seconds)
            continue
        serial += 1
        token = handle if isinstance(handle, int) else 0
        history.write(
            "grant", t=t, t_req=t_req, sid=sid, th=thread, kind=kind, res=res, role=prim.role,
            token=token, wait=wait, lease=prim.lease, explicit=prim.explicit, overrun=overrun,
            masters=prim.masters(), depth=depth, stalled=_STALLED.seconds,
        )  # fmt: skip
        held_times = 1
        _STALLED.off = True  # a reentry stalled past its lease is rightly refused: not a loss
        for _ in range(depth - 1):
            try:
                ok = prim.reenter()
            except Exception as error:
                history.write("reacq_err", sid=sid, err=_error(error))
                continue
            history.write("reacq", sid=sid, ok=ok)
            held_times += ok
        _STALLED.off = False
        body.run(kind, prim, sid, res, token=token, hold=hold)
        if prim.role != "s":
            body.told(prim, sid, res)  # an is_lost before the release is a notice too
        history.write("rel", sid=sid)
        outcome = "ok"
        for _ in range(held_times):
            try:
                prim.release(handle)
            except (syncprims.LockNotHeldError, syncprims.PermitNotHeldError):
                outcome = "notheld"
                break
            except Exception as error:
                outcome = "error:" + _error(error)
                break
        history.write("rel_done", sid=sid, outcome=outcome)


def _overrun_prim(prim: Prim) -> Prim:
    """The same FencedLock, taken with an explicit lease it will outlive."""
    assert isinstance(prim, LockPrim)
    return LockPrim(prim.lock, OVERRUN_LEASE, fenced=True, lease=OVERRUN_LEASE)


ASYNC_TASKS = 32  # tasks per rlock-async process, on one client's shared connection


async def _async_main(
    spec: dict[str, Any], store: Store, history: History, notices: Notices
) -> int:
    """The ``rlock-async`` kind: ``ASYNC_TASKS`` asyncio tasks of one process loop on RLocks
    of one ``syncprims.asyncio`` client, whose commands all ride on its shared connection
    (issue 28): a proxy reset or black hole hits every one of them at once. The section is
    the blocking workers' (the store's calls block the loop for their round trip)."""
    kind, wait, stop_at = "rlock-async", float(spec["wait"]), float(spec["give_up"])
    options: dict[str, Any] = dict(spec["options"])
    watchdog = float(options.get("lock_watchdog_timeout", 30.0))
    client: Any = None
    while client is None:
        try:
            client = await syncprims.asyncio.connect(spec["urls"][0], **options)
        except syncprims.SyncPrimsError as error:
            history.write("connect_err", err=_error(error))
            if time.monotonic() > stop_at:
                history.write("exit")
                return 0
            await asyncio.sleep(0.2)
    history.write("start", kind=kind, op_timeout=client.operation_timeout)
    started = _wait_for_start(spec, store, history)
    if started is None:
        await client.shutdown()
        return 0
    stop_at = started

    def name(res: str) -> str:
        return f"chaos:{spec['run']}:{kind}:{res}"

    async def run(task: int) -> None:
        rng = random.Random(f"{spec['seed']}:{spec['index']}:{task}")
        locks = {
            res: client.get_lock(name(res), on_lost=notices.callback(task, res))
            for res in spec["resources"]
        }
        serial = 0
        while time.monotonic() < stop_at:
            res = rng.choice(spec["resources"])
            lock = locks[res]
            sid = f"{history.pid}-{task}-{serial + 1}"
            notices.expect(task, res, sid)
            t_req = time.monotonic()
            history.write("req", t=t_req, kind=kind, res=res, th=task, wait=wait)
            try:
                held = await lock.try_lock(wait_time=wait)
            except Exception as error:
                history.write(
                    "acq_err", t=time.monotonic(), t_req=t_req, res=res, wait=wait,
                    err=_error(error),
                )  # fmt: skip
                for _ in range(3):
                    try:
                        if not await lock.is_held_by_current_thread():
                            break
                        await lock.unlock()
                    except Exception as cleanup_error:
                        history.write("cleanup_err", res=res, err=_error(cleanup_error))
                        break
                await asyncio.sleep(0.05)
                continue
            t = time.monotonic()
            if not held:
                history.write("deny", t=t, t_req=t_req, res=res, wait=wait)
                continue
            serial += 1
            history.write(
                "grant", t=t, t_req=t_req, sid=sid, th=task, kind=kind, res=res, role="w",
                token=0, wait=wait, lease=watchdog, explicit=False,
            )  # fmt: skip
            hold = rng.uniform(0.7, 1.0) if rng.random() < 0.01 else rng.uniform(0.0, 0.002)
            read = store.read(kind, res)
            await asyncio.sleep(hold)
            if notices.told(sid) or lock.is_lost:
                if not notices.told(sid):
                    notices.tell(sid, res, "is_lost", src="is_lost")
                history.write("abort", sid=sid)
            else:
                found, accepted = store.commit(kind, res, sid, read, 0)
                history.write("commit", sid=sid, read=read, cur=found, accepted=accepted)
            if lock.is_lost and not notices.told(sid):
                notices.tell(sid, res, "is_lost", src="is_lost")
            history.write("rel", sid=sid)
            try:
                await lock.unlock()
                outcome = "ok"
            except syncprims.LockNotHeldError:
                outcome = "notheld"
            except Exception as error:
                outcome = "error:" + _error(error)
            history.write("rel_done", sid=sid, outcome=outcome)

    async def guarded(task: int) -> None:
        try:
            await run(task)
        except BaseException as error:  # a worker bug: record it, the checker flags it
            history.write("crash", th=task, err=repr(error))
            raise
        history.write("thread_done", th=task)

    await asyncio.gather(*(guarded(i) for i in range(ASYNC_TASKS)), return_exceptions=True)
    await client.shutdown()
    store.close()
    history.write("exit")
    return 0


def _park(store: Store, kind: str, who: str, stop_at: float) -> None:
    """Hold nothing while the runner re-seeds ``kind``'s permits (the gate is closed)."""
    store.park(kind, who, True)
    try:
        while store.gate_closed(kind) and time.monotonic() < stop_at:
            time.sleep(0.02)
    finally:
        store.park(kind, who, False)


STARTUP = 120.0  # the longest wait for the load to start, seconds (a loaded machine)


def _wait_for_start(spec: dict[str, Any], store: Store, history: History) -> float | None:
    """Say this process is ready, and wait for the runner to start the load: its end
    (``spec["stop_at"]`` is set to it), or ``None`` (the ``exit`` event is written)."""
    store.ready(str(history.pid))
    stop_at = store.wait_for_start(STARTUP)
    if stop_at is None:
        history.write("exit")
        return None
    spec["stop_at"] = stop_at
    return stop_at


def main(argv: list[str] | None = None) -> int:
    """Run one client process from its JSON spec (``argv[0]``)."""
    spec: dict[str, Any] = json.loads((argv or sys.argv[1:])[0])
    spec["give_up"] = time.monotonic() + STARTUP  # connecting, before the load starts
    if spec.get("clock"):
        WallClock(spec["clock"])
    out = Path(spec["out"])
    history = History(out / "history" / f"{spec['kind']}-{spec['index']}-{os.getpid()}.jsonl")
    stacks = (out / "stacks" / f"{os.getpid()}.txt").open("w")
    faulthandler.register(signal.SIGUSR1, file=stacks, all_threads=True)
    notices = Notices(history)
    store = Store(spec["store"])
    store.redis.script_load(syncprims.fencing.FENCED_SET)  # the fenced kind's MULTI needs it
    if spec["kind"] == "rlock-async":
        return asyncio.run(_async_main(spec, store, history, notices))
    _mutate(spec["kind"], history)
    clients: Clients | None = None
    while clients is None:  # the servers may be faulted right now
        try:
            clients = Clients(spec, notices)
        except syncprims.SyncPrimsError as error:
            history.write("connect_err", err=_error(error))
            if time.monotonic() > float(spec["give_up"]):
                history.write("exit")
                return 0
            time.sleep(0.2)
    clock = "server" if PEXPIRABLE_SERVER_TIME else "client"
    history.write("start", kind=spec["kind"], op_timeout=clients.op_timeout,
                  durable=clients.durable, clock=clock)  # fmt: skip
    if spec.get("permits"):
        try:
            clients.set_permits(spec["resources"], int(spec["permits"]))
        except syncprims.SyncPrimsError as error:
            history.write("setup_err", err=_error(error))
    if _wait_for_start(spec, store, history) is None:
        clients.shutdown()
        return 0

    ready: Clients = clients

    def run(thread: int) -> None:
        try:
            _loop(spec, thread=thread, clients=ready, store=store, history=history, notices=notices)
        except BaseException as error:  # a worker bug: record it, the checker flags it
            history.write("crash", th=thread, err=repr(error))
            raise
        history.write("thread_done", th=thread)

    threads = [
        threading.Thread(target=run, args=(i,), name=f"worker-{i}", daemon=True)
        for i in range(int(spec["threads"]))
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    clients.shutdown()
    store.close()
    history.write("exit")
    return 0


if __name__ == "__main__":
    sys.exit(main())
