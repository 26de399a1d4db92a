"""A client process of the campaign: threads looping acquire, critical section, release.

Run as ``python -m tests.chaos.workers '<spec json>'`` by the runner (one process per
``--processes`` per primitive; the nemesis kills and pauses them). Every event goes to the
process's history file as one JSON line written with a single ``os.write`` on an
``O_APPEND`` descriptor, so lines of different threads never interleave and a SIGKILL loses
nothing already written. Times are ``time.monotonic()``.

The critical section behaves like a careful application: it reads the store's counter,
holds for a random time (now and then longer than a watchdog renewal period), and before it
writes checks whether it was told the lock was lost (``is_lost`` or an ``on_lost`` call
since the grant); if so it does not write (``abort``).
"""

from __future__ import annotations

import asyncio
import faulthandler
import json
import os
import random
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

import syncprims
import syncprims.asyncio
from tests.chaos.store import Store

__all__ = ["BROKEN", "KINDS", "OPT_IN", "main"]

KINDS = (
    "rlock",
    "rlock-async",
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

BROKEN = ("broken-lease", "broken-script")
"""Deliberately broken locks for the checker's self-test (never part of a campaign):
``broken-lease`` is an RLock taken with a 50 ms lease and no watchdog around a 60-150 ms
critical section; ``broken-script`` is a lock whose acquire script, run with raw redis-py,
skips the existence check (``HSET`` + ``PEXPIRE`` whoever holds it)."""

PERMIT_LEASE = 2.0  # the permit-expirable semaphore's lease, seconds
BROKEN_LEASE = 0.05

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


class History:
    """The process's history file (thread-safe, torn only by SIGKILL mid-line)."""

    def __init__(self, path: Path) -> None:
        self.pid = os.getpid()
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def write(self, ev: str, t: float | None = None, **fields: Any) -> None:
        """Append one event (``t`` defaults to now)."""
        record = {"ev": ev, "pid": self.pid, "t": time.monotonic() if t is None else t, **fields}
        os.write(self._fd, (json.dumps(record) + "\n").encode())


class Losses:
    """When the library last told this process that a hold on each resource was lost."""

    def __init__(self, history: History) -> None:
        self._history = history
        self._last: dict[str, float] = {}
        self._names: dict[str, str] = {}

    def callback(self, name: str, res: str) -> syncprims.LostCallback:
        """An ``on_lost`` callback for the lock ``name`` that guards resource ``res``."""
        self._names[name] = res

        def on_lost(lock_name: str, reason: str) -> None:
            now = time.monotonic()
            self._last[res] = now
            self._history.write("lost", t=now, res=res, name=lock_name, reason=reason)

        return on_lost

    def since(self, res: str, t: float) -> bool:
        """Whether a loss of ``res`` was reported at or after ``t``."""
        return self._last.get(res, -1.0) >= t


class Prim:
    """One primitive as a worker thread uses it."""

    role = "w"

    def acquire(self, wait: float) -> tuple[bool, int | str | None]:
        """Try to take it within ``wait`` seconds; the token or permit id when held."""
        raise NotImplementedError

    def release(self, handle: int | str | None) -> None:
        """Give it back."""
        raise NotImplementedError

    def lost(self) -> bool:
        """Whether the library says the current hold is lost (no Redis call)."""
        return False

    def cleanup(self) -> None:
        """After a failed acquire: give back a hold that may have been taken."""


class LockPrim(Prim):
    """RLock, FairLock, either side of a ReadWriteLock, FencedLock."""

    def __init__(
        self, lock: Any, role: str = "w", fenced: bool = False, lease: float | None = None
    ) -> None:
        self.lock, self.role, self.fenced, self.lease = lock, role, fenced, lease

    def acquire(self, wait: float) -> tuple[bool, int | str | None]:
        if self.fenced:
            token = self.lock.try_lock_and_get_token(wait_time=wait, lease_time=self.lease)
            return token is not None, token
        return bool(self.lock.try_lock(wait_time=wait, lease_time=self.lease)), None

    def release(self, handle: int | str | None) -> None:
        self.lock.unlock()

    def lost(self) -> bool:
        return bool(self.lock.is_lost)

    def cleanup(self) -> None:
        for _ in range(3):
            if not self.lock.is_held_by_current_thread():
                return
            self.lock.unlock()


class MultiPrim(LockPrim):
    """MultiLock and RedLock (no ``is_lost``: the sub-locks' ``on_lost`` calls tell)."""

    def lost(self) -> bool:
        return False


class SemaphorePrim(Prim):
    """A plain semaphore: permits belong to nobody."""

    role = "s"

    def __init__(self, sem: Any) -> None:
        self.sem = sem

    def acquire(self, wait: float) -> tuple[bool, int | str | None]:
        return bool(self.sem.try_acquire(1, wait_time=wait)), None

    def release(self, handle: int | str | None) -> None:
        self.sem.release(1)


class PermitPrim(Prim):
    """A permit-expirable semaphore: each permit has an id and a lease."""

    role = "s"

    def __init__(self, sem: Any) -> None:
        self.sem = sem

    def acquire(self, wait: float) -> tuple[bool, int | str | None]:
        permit = self.sem.try_acquire(wait_time=wait, lease_time=PERMIT_LEASE)
        return permit is not None, permit

    def release(self, handle: int | str | None) -> None:
        self.sem.release(handle)


class BrokenScriptPrim(Prim):
    """A lock whose acquire skips the existence check (raw redis-py, polling)."""

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


class Clients:
    """The process's syncprims client(s) and primitive factory."""

    def __init__(self, spec: dict[str, Any], losses: Losses) -> None:
        self.spec = spec
        self.kind: str = spec["kind"]
        self.losses = losses
        options: dict[str, Any] = dict(spec["options"])
        self.client: Any = None
        self.masters: Any = None
        if self.kind == "redlock":
            self.masters = syncprims.connect_many(spec["urls"], **options)
            self.op_timeout = max(c.operation_timeout for c in self.masters.clients)
        else:
            self.client = syncprims.connect(spec["urls"][0], **options)
            self.op_timeout = self.client.operation_timeout

    def name(self, res: str) -> str:
        """The Redis name of resource ``res``."""
        return f"chaos:{self.spec['run']}:{self.kind}:{res}"

    def make(self, res: str, thread: int) -> Prim:
        """The primitive guarding ``res``, for worker thread ``thread``."""
        name, kind, c = self.name(res), self.kind, self.client
        cb = self.losses.callback
        if kind == "broken-lease":
            return LockPrim(c.get_lock(name), lease=BROKEN_LEASE)
        if kind == "broken-script":
            return BrokenScriptPrim(self.spec["urls"][0], name)
        if kind in ("rlock", "cluster", "sentinel"):
            return LockPrim(c.get_lock(name, on_lost=cb(name, res)))
        if kind == "fair":
            return LockPrim(c.get_fair_lock(name, on_lost=cb(name, res)))
        if kind == "fenced":
            return LockPrim(c.get_fenced_lock(name, on_lost=cb(name, res)), fenced=True)
        if kind == "spin":
            return LockPrim(c.get_spin_lock(name, on_lost=cb(name, res)))
        if kind == "rw":
            rw = c.get_read_write_lock(name, on_lost=cb(name, res))
            if thread % 2:
                return LockPrim(rw.read_lock(), role="r")
            return LockPrim(rw.write_lock())
        if kind == "semaphore":
            return SemaphorePrim(c.get_semaphore(name))
        if kind == "pexpirable":
            return PermitPrim(c.get_permit_expirable_semaphore(name))
        if kind == "multilock":
            subs = [c.get_lock(f"{name}:{i}", on_lost=cb(f"{name}:{i}", res)) for i in "abc"]
            return MultiPrim(c.get_multi_lock(*subs))
        if kind == "redlock":
            subs = [m.get_lock(name, on_lost=cb(name, res)) for m in self.masters.clients]
            return MultiPrim(syncprims.RedLock(*subs))
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


def _error(error: BaseException) -> str:
    maybe = getattr(error, "maybe_executed", None)
    return type(error).__name__ + ("(maybe_executed)" if maybe else "")


def _loop(
    spec: dict[str, Any],
    *,
    thread: int,
    clients: Clients,
    store: Store,
    history: History,
    losses: Losses,
) -> None:
    rng = random.Random(f"{spec['seed']}:{spec['index']}:{thread}")
    kind, wait, stop_at = clients.kind, float(spec["wait"]), float(spec["stop_at"])
    prims = {res: clients.make(res, thread) for res in spec["resources"]}
    serial = 0
    who = f"{history.pid}-{thread}"
    while time.monotonic() < stop_at:
        if kind == "semaphore" and store.gate_closed(kind):
            _park(store, kind, who, stop_at)
            continue
        res = rng.choice(spec["resources"])
        prim = prims[res]
        t_req = time.monotonic()
        history.write("req", t=t_req, kind=kind, res=res, th=thread, wait=wait)
        try:
            held, handle = prim.acquire(wait)
        except Exception as error:
            t = time.monotonic()
            history.write("acq_err", t=t, t_req=t_req, res=res, wait=wait, err=_error(error))
            try:
                prim.cleanup()
            except Exception as cleanup_error:
                history.write("cleanup_err", res=res, err=_error(cleanup_error))
            time.sleep(0.05)
            continue
        t = time.monotonic()
        if not held:
            history.write("deny", t=t, t_req=t_req, res=res, wait=wait)
            continue
        serial += 1
        sid = f"{history.pid}-{thread}-{serial}"
        token = handle if isinstance(handle, int) else 0
        history.write(
            "grant", t=t, t_req=t_req, sid=sid, kind=kind, res=res, role=prim.role,
            token=token, wait=wait,
        )  # fmt: skip
        # 1% of the sections outlast a watchdog renewal period (a third of the 2 s lease).
        hold = rng.uniform(0.7, 1.0) if rng.random() < 0.01 else rng.uniform(0.0, 0.002)
        if kind in BROKEN:
            hold = rng.uniform(0.06, 0.15)
        if prim.role == "s":
            time.sleep(hold)
        elif prim.role == "r":
            before = store.read(kind, res)
            time.sleep(hold)
            after = store.read(kind, res)
            if after != before:
                store.note(kind, res, f"read_changed {sid} {before} {after}")
        else:
            read = store.read(kind, res)
            time.sleep(hold)
            if prim.lost() or losses.since(res, t):
                history.write("abort", sid=sid)
            else:
                found, accepted = store.commit(kind, res, sid, read, token)
                history.write("commit", sid=sid, read=read, cur=found, accepted=accepted)
        history.write("rel", sid=sid)
        try:
            prim.release(handle)
            outcome = "ok"
        except (syncprims.LockNotHeldError, syncprims.PermitNotHeldError):
            outcome = "notheld"
        except Exception as error:
            outcome = "error:" + _error(error)
        history.write("rel_done", sid=sid, outcome=outcome)


ASYNC_TASKS = 32  # tasks per rlock-async process, on one client's shared connection


async def _async_main(spec: dict[str, Any], store: Store, history: History, losses: Losses) -> int:
    """The ``rlock-async`` kind: ``ASYNC_TASKS`` asyncio tasks of one process loop on RLocks
    of one ``syncprims.asyncio`` client, whose commands all ride on its shared connection
    (issue 28): a proxy reset or black hole hits every one of them at once. The section is
    the blocking workers' (the store's calls block the loop for their round trip)."""
    kind, wait, stop_at = "rlock-async", float(spec["wait"]), float(spec["stop_at"])
    options: dict[str, Any] = dict(spec["options"])
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

    def name(res: str) -> str:
        return f"chaos:{spec['run']}:{kind}:{res}"

    async def run(task: int) -> None:
        rng = random.Random(f"{spec['seed']}:{spec['index']}:{task}")
        locks = {
            res: client.get_lock(name(res), on_lost=losses.callback(name(res), res))
            for res in spec["resources"]
        }
        serial = 0
        while time.monotonic() < stop_at:
            res = rng.choice(spec["resources"])
            lock = locks[res]
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
            sid = f"{history.pid}-{task}-{serial}"
            history.write(
                "grant", t=t, t_req=t_req, sid=sid, kind=kind, res=res, role="w", token=0,
                wait=wait,
            )  # fmt: skip
            hold = rng.uniform(0.7, 1.0) if rng.random() < 0.01 else rng.uniform(0.0, 0.002)
            read = store.read(kind, res)
            await asyncio.sleep(hold)
            if lock.is_lost or losses.since(res, t):
                history.write("abort", sid=sid)
            else:
                found, accepted = store.commit(kind, res, sid, read, 0)
                history.write("commit", sid=sid, read=read, cur=found, accepted=accepted)
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


def main(argv: list[str] | None = None) -> int:
    """Run one client process from its JSON spec (``argv[0]``)."""
    spec: dict[str, Any] = json.loads((argv or sys.argv[1:])[0])
    out = Path(spec["out"])
    history = History(out / "history" / f"{spec['kind']}-{spec['index']}-{os.getpid()}.jsonl")
    stacks = (out / "stacks" / f"{os.getpid()}.txt").open("w")
    faulthandler.register(signal.SIGUSR1, file=stacks, all_threads=True)
    losses = Losses(history)
    store = Store(spec["store"])
    if spec["kind"] == "rlock-async":
        return asyncio.run(_async_main(spec, store, history, losses))
    clients: Clients | None = None
    while clients is None:  # the servers may be faulted right now
        try:
            clients = Clients(spec, losses)
        except syncprims.SyncPrimsError as error:
            history.write("connect_err", err=_error(error))
            if time.monotonic() > float(spec["stop_at"]):
                history.write("exit")
                return 0
            time.sleep(0.2)
    history.write("start", kind=spec["kind"], op_timeout=clients.op_timeout)
    if spec.get("permits"):
        try:
            clients.set_permits(spec["resources"], int(spec["permits"]))
        except syncprims.SyncPrimsError as error:
            history.write("setup_err", err=_error(error))

    ready: Clients = clients

    def run(thread: int) -> None:
        try:
            _loop(spec, thread=thread, clients=ready, store=store, history=history, losses=losses)
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
