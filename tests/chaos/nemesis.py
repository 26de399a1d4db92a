"""The nemesis: a seeded random schedule of faults, and the thread that injects them.

:func:`plan` is pure: the same seed, length and setup give the same schedule (a test checks
it). :class:`Nemesis` plays a schedule against the running :class:`Topology` and logs each
fault, with its monotonic start and end, to ``nemesis.jsonl`` for the checker.

Fault classes (``CLASSES``): client SIGKILL (the runner starts a replacement) and SIGSTOP;
a client's wall clock set ahead or behind (per process: both edges are steps);
server SIGSTOP and SIGKILL + restart on the same port (the single server keeps its AOF or
loses it, chosen per fault and recorded as ``persistent``); memory pressure (``maxmemory``
lowered under the data, filler written, ``volatile-ttl`` or ``allkeys-lru``, the keys
evicted counted, all restored after); added latency, black-holed replies, connection resets
and held requests delivered late through ``tests/faults/proxy.py``; silent partitions of a
server (nftables DROP, only inside ``unshare --net``); the Sentinel group's master cut off
from its replica and the sentinels while the client connections it has still reach it (the
same, by those connections' ports: the sentinels fail over, a split brain); Sentinel
failover; Cluster slot migration (recorded with the resource and the nodes it moved
between). At most two of the
five RedLock masters are faulted at once (a minority), except in the explicitly named
``redlock-majority`` mode, which restarts three at once, empty, to show the caveat that
``docs/multi-lock.md`` documents.
"""

from __future__ import annotations

import heapq
import json
import random
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

__all__ = ["CLASSES", "Nemesis", "Planned", "Topology", "plan"]

CLASSES = (
    "client_kill",
    "client_pause",
    "clock_skew",
    "server_pause",
    "server_restart",
    "proxy_latency",
    "proxy_blackhole",
    "proxy_reset",
    "late_delivery",
    "memory_pressure",
    "partition",
    "failover",
    "master_cut",
    "slot_migration",
    "redlock_majority_restart",
)

_WEIGHTS = {
    "client_kill": 3,
    "client_pause": 3,
    "clock_skew": 2,
    "server_pause": 3,
    "server_restart": 2,
    "proxy_latency": 2,
    "proxy_blackhole": 2,
    "proxy_reset": 2,
    "late_delivery": 2,
    "memory_pressure": 2,
    "partition": 2,
    "failover": 1,
    "master_cut": 1,
    "slot_migration": 1,
    "redlock_majority_restart": 1,
}


@dataclass(frozen=True)
class Planned:
    """One fault of the schedule."""

    at: float  # seconds from the start of the load
    cls: str
    target: str  # a primitive kind (client faults) or a server id
    duration: float
    pick: int  # which process, the latency or clock offset in ms, which masters, chunks held


@dataclass(frozen=True)
class Setup:
    """What the schedule may aim at."""

    kinds: tuple[str, ...]
    servers: tuple[str, ...]  # "single", "m0".."m4", "c0".."c2", "sentinel"
    proxied: tuple[str, ...]  # servers reached through a fault proxy
    classes: tuple[str, ...]  # the fault classes enabled


def plan(seed: int, seconds: float, setup: Setup) -> list[Planned]:
    """The fault schedule for a run of ``seconds``.

    Faults start every 0.6-2.0 s from 2 s in, and all end 3 s before the load stops. A
    server has one fault at a time; at most two RedLock masters are faulted at once.
    """
    rng = random.Random(seed)
    busy: dict[str, float] = {}  # server -> busy until
    out: list[Planned] = []
    at = 2.0
    classes = [c for c in setup.classes if _WEIGHTS.get(c)]
    weights = [_WEIGHTS[c] for c in classes]
    while classes:
        at += rng.uniform(0.6, 2.0)
        if at > seconds - 6.0:
            break
        cls = rng.choices(classes, weights)[0]
        pick = rng.randrange(1 << 30)
        duration = 0.0
        free = [s for s in setup.servers if busy.get(s, 0.0) <= at]
        masters_busy = sum(1 for s, until in busy.items() if s.startswith("m") and until > at)
        if masters_busy >= 2:
            free = [s for s in free if not s.startswith("m")]
        target: str | None = None
        if cls in ("client_kill", "client_pause", "clock_skew"):
            choices = [k for k in setup.kinds if not (cls == "client_kill" and k == "semaphore")]
            target = rng.choice(choices) if choices else None
            duration = {"client_kill": 0.0, "client_pause": rng.uniform(0.5, 3.5),
                        "clock_skew": rng.uniform(1.0, 6.0)}[cls]  # fmt: skip
            if cls == "clock_skew":  # ms ahead (> 0) or behind
                pick = rng.choice((-1, 1)) * rng.randint(500, 10_000)
        elif cls in ("server_pause", "server_restart", "partition"):
            target = rng.choice(free) if free else None
            if cls == "server_pause":
                duration = rng.uniform(0.3, 1.2 if target and target.startswith("c") else 2.0)
            elif cls == "server_restart":
                duration = rng.uniform(0.2, 1.5)
            else:
                duration = rng.uniform(0.5, 2.5)
        elif cls.startswith("proxy_") or cls == "late_delivery":
            options = [s for s in free if s in setup.proxied]
            target = rng.choice(options) if options else None
            duration = {
                "proxy_latency": rng.uniform(1.0, 4.0),
                "proxy_blackhole": rng.uniform(0.2, 1.2),
                "proxy_reset": 0.0,
                "late_delivery": rng.uniform(0.5, 3.0),
            }[cls]
            if cls == "proxy_latency":
                pick = rng.randint(20, 250)  # ms
            elif cls == "late_delivery":
                pick = rng.randint(1, 3)  # request chunks held
        elif cls == "memory_pressure":
            options = [s for s in free if s != "sentinel"]
            target = rng.choice(options) if options else None
            duration = rng.uniform(1.0, 3.0)
        elif cls == "failover":
            target = "sentinel" if "sentinel" in free else None
            duration = 8.0  # time reserved for it; the log has the real end
        elif cls == "master_cut":
            target = "sentinel" if "sentinel" in free else None
            duration = rng.uniform(3.0, 6.0)  # long enough for the sentinels to fail over
        elif cls == "slot_migration":
            target = "cluster" if all(s in free for s in setup.servers if s[0] == "c") else None
            duration = 3.0
        elif cls == "redlock_majority_restart":
            masters = [s for s in setup.servers if s.startswith("m")]
            if masters and all(busy.get(s, 0.0) <= at for s in masters):
                target = "masters"
                duration = rng.uniform(0.2, 1.0)
        if target is None or at + duration > seconds - 3.0:
            continue
        out.append(Planned(at=round(at, 3), cls=cls, target=target, duration=round(duration, 3),
                           pick=pick))  # fmt: skip
        hold_until = at + duration + (3.0 if cls == "server_restart" else 0.5)
        if cls in ("server_pause", "server_restart", "partition", "memory_pressure",
                   "late_delivery") or cls.startswith("proxy_"):  # fmt: skip
            busy[target] = hold_until
        elif cls in ("failover", "master_cut"):
            busy["sentinel"] = hold_until + (3.0 if cls == "master_cut" else 0.0)
        elif cls == "slot_migration":
            for s in setup.servers:
                if s[0] == "c":
                    busy[s] = hold_until
        elif cls == "redlock_majority_restart":
            for s in setup.servers:
                if s.startswith("m"):
                    busy[s] = hold_until
    return out


class Topology(Protocol):
    """What the nemesis acts on (the runner implements it)."""

    def client_pids(self, kind: str) -> list[int]: ...

    def kill_client(self, pid: int) -> None: ...

    def pause_client(self, pid: int, paused: bool) -> None: ...

    def set_clock(self, pid: int, offset: float) -> bool: ...

    def pause_server(self, server: str, paused: bool) -> None: ...

    def kill_server(self, server: str, *, empty: bool = True) -> None: ...

    def start_server(self, server: str) -> None: ...

    def persistent(self, server: str, pick: int) -> bool: ...

    def proxy(self, server: str, mode: str, value: float) -> int: ...

    def memory_pressure(self, server: str, policy: str | None) -> dict[str, Any]: ...

    def partition(self, server: str, cut: bool) -> None: ...

    def failover(self) -> None: ...

    def cut_master(self, cut: bool) -> dict[str, Any]: ...

    def migrate_slot(self, pick: int) -> dict[str, Any]: ...


@dataclass
class _Open:
    planned: Planned
    start: float
    pids: list[int] = field(default_factory=list)
    servers: list[str] = field(default_factory=list)
    persistent: bool = False
    note: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


class Nemesis:
    """Plays a schedule in a thread; :meth:`stop` heals whatever is still open."""

    def __init__(self, schedule: list[Planned], topology: Topology, log: Path, t0: float) -> None:
        self.schedule = schedule
        self.topology = topology
        self._log = log.open("a", encoding="utf-8")
        self._t0 = t0
        self._stop = threading.Event()
        self._open: dict[int, _Open] = {}
        self._heals: list[tuple[float, int, Callable[[], None]]] = []
        self._lock = threading.Lock()
        self.errors: list[str] = []
        self._ended: dict[str, float] = {}  # server -> when its last fault ended
        self._thread = threading.Thread(target=self._run, name="nemesis", daemon=True)

    def start(self) -> None:
        """Start injecting."""
        self._thread.start()

    def _write(self, record: dict[str, Any]) -> None:
        with self._lock:
            self._log.write(json.dumps(record) + "\n")
            self._log.flush()

    def _close(self, key: int) -> None:
        with self._lock:
            item = self._open.pop(key, None)
        if item is None:
            return
        with self._lock:
            for server in item.servers:
                self._ended[server] = time.monotonic()
        record = {**item.extra, "ev": "fault", **asdict(item.planned), "start": item.start,
                  "end": time.monotonic(), "pids": item.pids, "servers": item.servers,
                  "persistent": item.persistent, "note": item.note}  # fmt: skip
        self._write(record)

    def quiet(self, server: str, seconds: float) -> bool:
        """Whether no fault is open on ``server`` and none ended in the last ``seconds``
        (a command delayed by it has reached the server or is lost for good)."""
        with self._lock:
            if any(server in item.servers for item in list(self._open.values())):
                return False
            return time.monotonic() - self._ended.get(server, -1e9) >= seconds

    def _run(self) -> None:
        pending = list(enumerate(self.schedule))
        while not self._stop.is_set():
            now = time.monotonic()
            while self._heals and self._heals[0][0] <= now:
                _, _, heal = heapq.heappop(self._heals)
                self._guard(heal)
            while pending and self._t0 + pending[0][1].at <= now:
                key, planned = pending.pop(0)
                self._guard(lambda k=key, p=planned: self._inject(k, p))  # type: ignore[misc]
            nexts = [h[0] for h in self._heals[:1]] + [self._t0 + p.at for _, p in pending[:1]]
            self._stop.wait(max(0.0, min(nexts, default=now + 0.2) - time.monotonic()))

    def _guard(self, action: Callable[[], None]) -> None:
        try:
            action()
        except Exception as error:  # a fault that could not be injected is noted, not fatal
            self.errors.append(f"{type(error).__name__}: {error}")

    def _later(self, delay: float, key: int, action: Callable[[], object]) -> None:
        def heal() -> None:
            try:
                action()
            finally:
                self._close(key)

        heapq.heappush(self._heals, (time.monotonic() + delay, key, heal))

    def _inject(self, key: int, p: Planned) -> None:
        topo = self.topology
        item = _Open(planned=p, start=time.monotonic())
        self._open[key] = item
        if p.cls in ("client_kill", "client_pause", "clock_skew"):
            pids = topo.client_pids(p.target)
            if not pids:
                self._close(key)
                return
            pid = pids[p.pick % len(pids)]
            item.pids = [pid]
            if p.cls == "client_kill":
                item.start = time.monotonic()
                topo.kill_client(pid)
                self._close(key)
            elif p.cls == "clock_skew":
                item.extra["offset"] = p.pick / 1000
                if not topo.set_clock(pid, p.pick / 1000):
                    self._open.pop(key, None)  # no faketime here: nothing was done
                    return

                def reset_clock() -> None:
                    topo.set_clock(pid, 0.0)

                self._later(p.duration, key, reset_clock)
            else:
                topo.pause_client(pid, True)
                self._later(p.duration, key, lambda: topo.pause_client(pid, False))
            return
        if p.cls == "redlock_majority_restart":
            masters = [f"m{i}" for i in range(5)]
            chosen = random.Random(p.pick).sample(masters, 3)
            item.servers = chosen
            for server in chosen:
                topo.kill_server(server)

            def restart_all() -> None:
                for server in chosen:
                    topo.start_server(server)

            self._later(p.duration, key, restart_all)
            return
        if p.cls == "master_cut":
            item.servers = ["sentinel"]
            item.extra = topo.cut_master(True)
            self._later(p.duration, key, lambda: topo.cut_master(False))
            return
        if p.cls in ("slot_migration", "failover"):
            item.servers = ["c0", "c1", "c2"] if p.cls == "slot_migration" else ["sentinel"]

            def slow() -> None:  # seconds long: not on the nemesis thread
                try:
                    if p.cls == "slot_migration":
                        item.extra = topo.migrate_slot(p.pick)
                        item.note = str(item.extra.pop("note", ""))
                    else:
                        topo.failover()
                except Exception as error:
                    self.errors.append(f"{p.cls}: {type(error).__name__}: {error}")
                finally:
                    self._close(key)

            threading.Thread(target=slow, name=p.cls, daemon=True).start()
            return
        server = p.target
        item.servers = [server]
        if p.cls == "server_pause":
            topo.pause_server(server, True)
            self._later(p.duration, key, lambda: topo.pause_server(server, False))
        elif p.cls == "server_restart":
            item.persistent = topo.persistent(server, p.pick)
            topo.kill_server(server, empty=not item.persistent)
            self._later(p.duration, key, lambda: topo.start_server(server))
        elif p.cls == "memory_pressure":
            policy = ("volatile-ttl", "allkeys-lru")[p.pick % 2]
            item.extra = {"policy": policy, **topo.memory_pressure(server, policy)}

            def relieve() -> None:
                item.extra.update(topo.memory_pressure(server, None))

            self._later(p.duration, key, relieve)
        elif p.cls == "late_delivery":
            topo.proxy(server, "hold", p.pick)

            def deliver() -> None:
                item.extra["delivered"] = topo.proxy(server, "deliver", 0)

            self._later(p.duration, key, deliver)
        elif p.cls == "partition":
            topo.partition(server, True)
            self._later(p.duration, key, lambda: topo.partition(server, False))
        elif p.cls == "proxy_latency":
            topo.proxy(server, "latency", p.pick / 1000)
            self._later(p.duration, key, lambda: topo.proxy(server, "latency", 0.0))
        elif p.cls == "proxy_blackhole":
            topo.proxy(server, "blackhole", 1.0)
            self._later(p.duration, key, lambda: topo.proxy(server, "blackhole", 0.0))
        elif p.cls == "proxy_reset":
            topo.proxy(server, "reset", 0.0)
            self._close(key)

    def stop(self) -> None:
        """Stop injecting, run every pending heal now, and log what was still open."""
        self._stop.set()
        self._thread.join(30)
        while self._heals:
            _, _, heal = heapq.heappop(self._heals)
            self._guard(heal)
        for key in list(self._open):
            self._close(key)
        self._log.close()
