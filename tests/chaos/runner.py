"""``python -m tests.chaos``: the chaos campaign (issue 17).

Starts its own servers on loopback ports (the store; one server, with AOF, behind a fault
proxy; five independent masters, each behind a proxy; a 3-master Cluster; a Sentinel group
with a replica), client processes x threads for every primitive (each with a wall clock
the nemesis can set ahead or behind), and the nemesis; after
``--minutes`` it stops the clients, heals every fault, records what is still held, dumps the
store, and has the independent checker (``tests/chaos/checker.py``) judge the run. It
prints a markdown table per primitive and per fault class, and last the line
``chaos: N critical sections, V violations, L loss notices, X excused``; the exit status is 1
when V > 0.

Where ``unshare --net`` and ``nft`` work (root, or user namespaces), the whole campaign
re-runs itself inside a private network namespace, so the partition fault's nftables rules
only ever see that namespace's loopback; elsewhere that class is skipped with a note.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import redis
from redis.crc import key_slot

import syncprims
from syncprims._embedded import RedisServer
from tests.chaos import checker, store
from tests.chaos.nemesis import CLASSES, Nemesis, Setup, plan
from tests.chaos.workers import BROKEN, KINDS, LONG_WATCHDOG, OPT_IN
from tests.faults.proxy import FaultProxy
from tests.server_groups import RedisClusterSet, SentinelSet

__all__ = ["main"]

ROOT = Path(__file__).resolve().parents[2]
SINGLE_KINDS = (
    "rlock", "rlock-async", "rlock-long", "fair", "rw", "fenced", "spin", "semaphore",
    "pexpirable", "multilock", *(k for k in BROKEN if k != "broken-quorum"),
)  # fmt: skip
MASTER_KINDS = ("redlock", "broken-quorum")  # on the five independent masters
LONG_KINDS = ("rlock-long", "broken-silent")  # with a short watchdog timeout
PERMITS = {"semaphore": 2, "pexpirable": 2}
# Threads and resources per primitive, so that a 30-minute run reaches 100,000 sections of
# each on two cores: the fast semaphores get fewer threads, the slow ones more (a MultiLock
# takes three locks; the Sentinel RLock cannot grant while a failover left no replica).
EXTRA_THREADS = {"multilock": 1, "sentinel": 3, "semaphore": 0, "pexpirable": -1}
THREE = ["r0", "r1", "r2"]
RESOURCES = {
    "multilock": THREE, "sentinel": THREE, "rlock": THREE, "fenced": THREE, "fair": THREE,
    "spin": THREE, "rlock-async": THREE, "broken-late-grant": ["r0"],
    "broken-silent": THREE,
}  # fmt: skip
OPTIONS: dict[str, Any] = {
    "lock_watchdog_timeout": 2.0,
    "timeout": 0.5,
    "retry_attempts": 2,
    "retry_delay": (0.05, 0.2),
}
QUERY = "?socket_connect_timeout=0.5"
WAIT = 2.0  # every acquire's wait time, seconds
RESEED_EVERY = 10.0  # seconds between the plain Semaphore's re-seeds (see Reseeder)
RESEED_QUIET = 8.0  # seconds without a fault on its server before one
RESEED_PARK = 8.0  # the longest wait for its workers to park
SETTLE = 5.0  # after the clients stop: the longest lease (2 s) plus slack
READY_WAIT = 90.0  # the longest wait for the client processes to connect, seconds
FILLER = 4096  # bytes per filler key of the memory-pressure fault
_RESOURCE = re.compile(r"chaos:[^:]+:([^:}]+):(r\d+)")  # kind and resource in a key name


def resources(kind: str) -> list[str]:
    """The resources ``kind``'s workers contend for (one semaphore of 2 permits)."""
    return ["r0"] if kind in PERMITS else RESOURCES.get(kind, ["r0", "r1"])


def netns_available() -> str | None:
    """``None`` when a network namespace with nftables can be made here, else why not."""
    for tool in ("unshare", "nft", "ip"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed"
    probe = subprocess.run(
        ["unshare", "--net", "nft", "list", "ruleset"], capture_output=True, text=True, check=False
    )
    if probe.returncode != 0:
        return f"cannot create a network namespace with nftables: {probe.stderr.strip()}"
    return None


def _nft(script: str) -> None:
    subprocess.run(["nft", "-f", "-"], input=script, text=True, check=True, capture_output=True)


class Campaign:
    """The servers, the client processes, and the Topology the nemesis acts on."""

    def __init__(self, args: argparse.Namespace, out: Path, partitions: bool) -> None:
        self.args = args
        self.out = out
        self.kinds: tuple[str, ...] = tuple(args.kinds)
        self.partitions = partitions
        self.notes: list[str] = []
        self.servers: dict[str, RedisServer] = {}
        self.proxies: dict[str, FaultProxy] = {}
        self.cluster: RedisClusterSet | None = None
        self.sentinel: SentinelSet | None = None
        self.procs: dict[str, list[subprocess.Popen[bytes]]] = {k: [] for k in self.kinds}
        self.paused: dict[str, RedisServer] = {}
        self.squeezed: dict[str, tuple[dict[str, Any], int, Any, Any]] = {}
        self.lock = threading.Lock()
        self.stop_at = 0.0
        self.spawned = 0
        self.clocks: dict[int, Path] = {}  # pid -> its faketime file
        self.failover_log: list[dict[str, Any]] = []
        self.store = RedisServer()

    # -- servers ---------------------------------------------------------------------------

    def start_servers(self) -> None:
        if any(k in SINGLE_KINDS for k in self.kinds):
            self.servers["single"] = RedisServer(
                args=["--appendonly", "yes", "--appendfsync", "everysec"]
            )
            self.proxies["single"] = FaultProxy(self.servers["single"].port)
        if any(k in MASTER_KINDS for k in self.kinds):
            for i in range(5):
                self.servers[f"m{i}"] = RedisServer()
                self.proxies[f"m{i}"] = FaultProxy(self.servers[f"m{i}"].port)
        if "cluster" in self.kinds:
            self.cluster = RedisClusterSet(masters=3, replicas=0)
            for i, server in enumerate(self.cluster.servers):
                self.servers[f"c{i}"] = server
        if "sentinel" in self.kinds:
            self.sentinel = SentinelSet()
            self.sentinel.wait_replica_synced()

    def server_ids(self) -> tuple[str, ...]:
        ids = [s for s in self.servers if s in ("single",) or s[0] in "mc"]
        if self.sentinel is not None:
            ids.append("sentinel")
        return tuple(ids)

    def kind_servers(self, kind: str) -> list[str]:
        if kind in SINGLE_KINDS:
            return ["single"]
        if kind in MASTER_KINDS:
            return [f"m{i}" for i in range(5)]
        if kind == "cluster":
            return ["c0", "c1", "c2"]
        return ["sentinel"]

    def owners(self) -> dict[str, dict[str, list[str]]]:
        """Which server holds each resource's key at the start (a RedLock's grants name
        their masters instead): the checker follows slot migrations from there."""
        out: dict[str, dict[str, list[str]]] = {}
        for kind in self.kinds:
            if kind in MASTER_KINDS:
                continue
            out[kind] = {res: self.kind_servers(kind) for res in resources(kind)}
            if kind == "cluster":
                for res in resources(kind):
                    out[kind][res] = [self._slot_owner(f"chaos:{self.args.run_id}:{kind}:{res}")]
        return out

    def _slot_owner(self, name: str) -> str:
        assert self.cluster is not None
        slot = key_slot(name.encode())
        r: Any = redis.Redis(port=self.cluster.servers[0].port, socket_timeout=5)
        try:
            for first, last, master, *_ in r.execute_command("CLUSTER", "SLOTS"):
                if first <= slot <= last:
                    return self._cluster_id(int(master[1]))
        finally:
            r.close()
        raise RuntimeError(f"no owner for slot {slot}")

    def _cluster_id(self, port: int) -> str:
        assert self.cluster is not None
        return next(f"c{i}" for i, s in enumerate(self.cluster.servers) if s.port == port)

    def urls(self, kind: str) -> list[str]:
        if kind in SINGLE_KINDS:
            return [self.proxies["single"].url + QUERY]
        if kind in MASTER_KINDS:
            return [self.proxies[f"m{i}"].url + QUERY for i in range(5)]
        if kind == "cluster":
            assert self.cluster is not None
            return [self.cluster.url + QUERY]
        assert self.sentinel is not None
        return [self.sentinel.url + QUERY]

    def options(self, kind: str) -> dict[str, Any]:
        if kind == "sentinel":  # the default, spelt out: wait for the master's replicas
            return {**OPTIONS, "lock_synced_replicas": "auto", "replica_sync_timeout": 0.5}
        if kind in LONG_KINDS:
            return {**OPTIONS, "lock_watchdog_timeout": LONG_WATCHDOG}
        return dict(OPTIONS)

    def _sentinel_master(self) -> RedisServer:
        assert self.sentinel is not None
        port = self.sentinel.master_port()
        for server in (self.sentinel.master, self.sentinel.replica):
            if server.port == port:
                return server
        raise RuntimeError(f"no sentinel-managed server on port {port}")

    def _server(self, server: str) -> RedisServer:
        return self._sentinel_master() if server == "sentinel" else self.servers[server]

    # -- client processes ------------------------------------------------------------------

    def spawn(self, kind: str, index: int) -> subprocess.Popen[bytes]:
        spec: dict[str, Any] = {
            "kind": kind,
            "index": index,
            "run": self.args.run_id,
            "urls": self.urls(kind),
            "options": self.options(kind),
            "store": self.store.url,
            "resources": resources(kind),
            "permits": PERMITS.get(kind, 0),
            "threads": self.threads(kind),
            "wait": WAIT,
            "seed": self.args.seed,
            "out": str(self.out),
        }
        log = (self.out / "logs" / f"{kind}-{index}.log").open("ab")
        clock = spec["clock"] = str(self.out / "clock" / f"{self.spawned}.txt")
        Path(clock).write_text("0\n")
        proc = subprocess.Popen(
            [sys.executable, "-m", "tests.chaos.workers", json.dumps(spec)],
            cwd=ROOT,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        log.close()
        self.clocks[proc.pid] = Path(clock)
        self.spawned += 1
        return proc

    def threads(self, kind: str) -> int:
        """Worker threads per client process of ``kind``."""
        return int(self.args.threads) + EXTRA_THREADS.get(kind, 0)

    def start_clients(self) -> None:
        for kind in self.kinds:
            for i in range(self.args.processes):
                self.procs[kind].append(self.spawn(kind, i))

    def wait_ready(self) -> None:
        """Wait until every client process has connected (the load and the nemesis start
        then, so that a loaded machine's slow start does not eat into the run)."""
        gate = store.Store(self.store.url)
        started = time.monotonic()
        expected = sum(len(procs) for procs in self.procs.values())
        try:
            while gate.ready_count() < expected:
                if time.monotonic() - started > READY_WAIT:
                    self.notes.append(
                        f"{gate.ready_count()} of {expected} client processes were ready after "
                        f"{READY_WAIT:g} s: the load started without the others"
                    )
                    return
                time.sleep(0.1)
        finally:
            gate.close()
        took = time.monotonic() - started
        if took > 10:
            self.notes.append(f"the client processes took {took:.0f} s to start")

    # -- Topology --------------------------------------------------------------------------

    def client_pids(self, kind: str) -> list[int]:
        with self.lock:
            return [p.pid for p in self.procs.get(kind, []) if p.poll() is None]

    def kill_client(self, pid: int) -> None:
        os.kill(pid, signal.SIGKILL)
        with self.lock:
            for kind, procs in self.procs.items():
                for i, proc in enumerate(procs):
                    if proc.pid == pid:
                        proc.wait(10)
                        if self.stop_at - time.monotonic() > 4.0:  # a replacement
                            procs[i] = self.spawn(kind, 100 + self.spawned)

    def pause_client(self, pid: int, paused: bool) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGSTOP if paused else signal.SIGCONT)

    def set_clock(self, pid: int, offset: float) -> bool:
        """Set ``pid``'s wall clock ``offset`` seconds ahead (< 0: behind); the process
        reads it within 0.2 s (``tests.chaos.workers.WallClock``)."""
        clock = self.clocks.get(pid)
        if clock is None:
            return False
        clock.write_text(f"{offset}\n")
        return True

    def pause_server(self, server: str, paused: bool) -> None:
        if paused:
            self.paused[server] = self._server(server)
            self.paused[server].pause()
        elif server in self.paused:
            self.paused.pop(server).resume()

    def kill_server(self, server: str, *, empty: bool = True) -> None:
        target = self.paused[server] = self._server(server)  # restart that very process
        target.kill()
        if empty:  # the single server's AOF goes too: it comes back with nothing
            shutil.rmtree(os.path.join(target.dir, "appendonlydir"), ignore_errors=True)
            for name in ("appendonly.aof", "dump.rdb"):
                with contextlib.suppress(FileNotFoundError):
                    os.remove(os.path.join(target.dir, name))
        if server == "sentinel" and "--replicaof" in target.args:
            # The Sentinel group's master comes back as a master, as a promoted replica does
            # once Sentinel rewrote its configuration. Restarted with its first arguments it
            # came back a replica of its own replica: no master left, every failover failed
            # and the Sentinel RLock got nothing done for the rest of a 40-minute run.
            at = target.args.index("--replicaof")
            del target.args[at : at + 3]

    def start_server(self, server: str) -> None:
        target = self.paused.pop(server, None) or self._server(server)
        target.start()

    def persistent(self, server: str, pick: int) -> bool:
        """Whether a restart of ``server`` keeps its data: the single server's AOF, per the
        ``--persistence`` option (``random``: every other fault, by its pick); the others
        run without persistence."""
        if server != "single":
            return False
        return {"aof": True, "none": False}.get(self.args.persistence, pick % 2 == 0)

    def proxy(self, server: str, mode: str, value: float) -> int:
        proxy = self.proxies[server]
        if mode == "latency":
            proxy.latency = value
        elif mode == "blackhole":
            proxy.blackhole = bool(value)
        elif mode == "hold":
            proxy.hold_requests = int(value)
        elif mode == "deliver":
            proxy.hold_requests = 0
            return proxy.deliver_held()
        else:
            proxy.reset()
        return 0

    def memory_pressure(self, server: str, policy: str | None) -> dict[str, Any]:
        """Lower ``maxmemory`` under ``server``'s data with ``policy`` and write filler
        until keys are evicted (``policy`` None: undo it all). Evicted keys are watched
        through keyspace notifications; the undo returns how many keys were evicted and the
        resources (``kind/res``) that lost a key."""
        r: Any = redis.Redis(port=self._server(server).port, socket_timeout=5)
        try:
            if policy is not None:
                return self._squeeze(server, r, policy)
            return self._relieve(server, r)
        finally:
            r.close()

    def _squeeze(self, server: str, r: Any, policy: str) -> dict[str, Any]:
        saved = {k: r.config_get(k)[k] for k in ("maxmemory", "maxmemory-policy",
                                                 "notify-keyspace-events")}  # fmt: skip
        evicted = int(r.info("stats")["evicted_keys"])
        flags = "".join(sorted(set(saved["notify-keyspace-events"]) | set("Ee")))
        r.config_set("notify-keyspace-events", flags)
        listener: Any = redis.Redis(port=self._server(server).port, socket_timeout=5)
        watch: Any = listener.pubsub()
        watch.subscribe("__keyevent@0__:evicted")
        self.squeezed[server] = (saved, evicted, listener, watch)  # the client keeps its pool
        used = int(r.info("memory")["used_memory"])
        r.config_set("maxmemory-policy", policy)
        r.config_set("maxmemory", used + 256 * 1024)
        filler = b"x" * FILLER
        with contextlib.suppress(redis.RedisError):
            for batch in range(128):  # at most 128 x 16 x 4 KB = 8 MB
                pipe = r.pipeline(transaction=False)
                for i in range(16):
                    pipe.set(f"chaosfill:{batch}:{i}", filler)
                pipe.execute()
                if int(r.info("stats")["evicted_keys"]) > evicted + 16:
                    break
        return {"maxmemory": used + 256 * 1024}

    def _relieve(self, server: str, r: Any) -> dict[str, Any]:
        saved, evicted, listener, watch = self.squeezed.pop(server)
        lost: set[str] = set()
        try:
            while (message := watch.get_message(timeout=0.1)) is not None:
                data = message.get("data")
                found = _RESOURCE.search(data.decode()) if isinstance(data, bytes) else None
                if found is not None:
                    lost.add(f"{found[1]}/{found[2]}")
        finally:
            watch.close()
            listener.close()
        for key in r.scan_iter(match="chaosfill:*", count=1000):
            r.unlink(key)
        for name, value in saved.items():
            r.config_set(name, value)
        return {"evicted": int(r.info("stats")["evicted_keys"]) - evicted, "lost": sorted(lost)}

    def partition(self, server: str, cut: bool) -> None:
        port = self._server(server).port
        table = f"chaos_{server}"
        if cut:
            _nft(
                f"table inet {table} {{\n"
                "  chain out { type filter hook output priority 0;\n"
                f"    tcp dport {port} drop\n"
                f"    tcp sport {port} drop\n"
                "  }\n"
                "}\n"
            )
        else:
            _nft(f"delete table inet {table}\n")

    def failover(self) -> None:
        assert self.sentinel is not None
        self.sentinel.failover()

    def cut_master(self, cut: bool) -> dict[str, Any]:
        """Cut the Sentinel group's master off from its replica and the sentinels, while the
        client connections it has now keep reaching it (nftables: every packet to or from
        its port is dropped but those of these connections' ports); ``cut=False`` heals."""
        if not cut:
            _nft("delete table inet chaos_cut\n")
            return {}
        master = self._sentinel_master()
        r: Any = redis.Redis(port=master.port, socket_timeout=2, decode_responses=True)
        try:
            listing = str(r.execute_command("CLIENT", "LIST"))
        finally:
            r.close()
        keep = []
        for line in listing.splitlines():
            info = dict(item.split("=", 1) for item in line.split() if "=" in item)
            replica_or_sentinel = "S" in info.get("flags", "") or info.get("name", "").startswith(
                "sentinel-"
            )
            if not replica_or_sentinel and info.get("cmd") != "client|list":
                keep.append(info["addr"].rsplit(":", 1)[1])
        dport = sport = ""
        if keep:
            ports = ", ".join(keep)
            dport, sport = f" tcp dport != {{ {ports} }}", f" tcp sport != {{ {ports} }}"
        _nft(
            "table inet chaos_cut {\n"
            "  chain out { type filter hook output priority 0;\n"
            f"    tcp dport {master.port}{sport} drop\n"
            f"    tcp sport {master.port}{dport} drop\n"
            "  }\n"
            "}\n"
        )
        return {"master": f":{master.port}", "clients": len(keep)}

    def migrate_slot(self, pick: int) -> dict[str, Any]:
        """Move the slot of one cluster resource to another master, keys and all."""
        assert self.cluster is not None
        res = ["r0", "r1"][pick % 2]
        name = f"chaos:{self.args.run_id}:cluster:{res}"
        slot = key_slot(name.encode())
        nodes: dict[int, str] = {}
        owner: RedisServer | None = None
        for server in self.cluster.live():
            r: Any = redis.Redis(port=server.port, socket_timeout=2)
            nodes[server.port] = r.execute_command("CLUSTER", "MYID").decode()
            if owner is None:
                for first, last, master, *_ in r.execute_command("CLUSTER", "SLOTS"):
                    if first <= slot <= last:
                        port = int(master[1])
                        owner = next(x for x in self.cluster.servers if x.port == port)
            r.close()
        if owner is None:
            raise RuntimeError(f"no owner for slot {slot}")
        others = [s for s in self.cluster.live() if s.port != owner.port]
        dst = others[pick % len(others)]
        src_r: Any = redis.Redis(port=owner.port, socket_timeout=5)
        dst_r: Any = redis.Redis(port=dst.port, socket_timeout=5)
        try:
            dst_r.execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", nodes[owner.port])
            src_r.execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", nodes[dst.port])
            while True:
                keys = src_r.execute_command("CLUSTER", "GETKEYSINSLOT", slot, 100)
                if not keys:
                    break
                src_r.execute_command("MIGRATE", "127.0.0.1", dst.port, "", 0, 5000, "KEYS", *keys)
            for port in nodes:
                r = redis.Redis(port=port, socket_timeout=5)
                r.execute_command("CLUSTER", "SETSLOT", slot, "NODE", nodes[dst.port])
                r.close()
        finally:
            src_r.close()
            dst_r.close()
        return {
            "note": f"slot {slot} ({res}) from :{owner.port} to :{dst.port}",
            "kind": "cluster",
            "res": res,
            "src": self._cluster_id(owner.port),
            "dst": self._cluster_id(dst.port),
        }

    def watch_failovers(self, stop: threading.Event) -> None:
        """Log every change of the Sentinel master as a ``failover`` fault (the nemesis's
        SIGSTOP or SIGKILL of the master can cause one, not only ``SENTINEL FAILOVER``)."""
        assert self.sentinel is not None
        seen, since = self.sentinel.master_port(), time.monotonic()
        with (self.out / "nemesis.jsonl").open("a", encoding="utf-8") as log:
            while not stop.wait(0.25):
                with contextlib.suppress(Exception):
                    port = self.sentinel.master_port()
                    now = time.monotonic()
                    if port != seen:
                        record = {"ev": "fault", "cls": "failover", "target": "sentinel-watch",
                                  "start": since, "end": now, "servers": ["sentinel"],
                                  "note": f":{seen} -> :{port}"}  # fmt: skip
                        log.write(json.dumps(record) + "\n")
                        log.flush()
                        seen = port
                    since = now

    # -- the end ---------------------------------------------------------------------------

    def wait_clients(self, deadline: float) -> list[int]:
        """Wait for every client process; return the pids of those that hung (dumped)."""
        hung = []
        for procs in self.procs.values():
            for proc in procs:
                try:
                    proc.wait(max(0.1, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    hung.append(proc.pid)
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(proc.pid, signal.SIGCONT)
                        os.kill(proc.pid, signal.SIGUSR1)  # faulthandler: dump the stacks
                    time.sleep(0.5)
                    proc.kill()
                    proc.wait(10)
        return hung

    def still_held(self) -> list[dict[str, str]]:
        """Everything still held after the clients stopped and the longest lease passed."""
        held: list[dict[str, str]] = []
        run = self.args.run_id
        for kind in self.kinds:
            for res in resources(kind):
                name = f"chaos:{run}:{kind}:{res}"
                for what in self._held(kind, name):
                    held.append({"kind": kind, "res": res, "what": what})
        return held

    def _held(self, kind: str, name: str) -> list[str]:
        if kind in SINGLE_KINDS:
            r: Any = redis.Redis(port=self.servers["single"].port, socket_timeout=5)
            try:
                if kind == "semaphore":
                    value = int(r.get(name) or 0)
                    if value != PERMITS[kind]:
                        self.notes.append(f"semaphore {name}: {value} permits at the end")
                    return [f"{name} has {value} permits > {PERMITS[kind]}"] * (
                        value > PERMITS[kind]
                    )
                if kind == "pexpirable":
                    with syncprims.connect(self.servers["single"].url) as client:
                        sem = client.get_permit_expirable_semaphore(name)
                        available = sem.available_permits()
                    if available != PERMITS[kind]:
                        return [f"{name} has {available} permits, not {PERMITS[kind]}"]
                    return []
                names = [f"{name}:{i}" for i in "abc"] if kind == "multilock" else [name]
                if kind == "broken-script":
                    r.delete(name)  # its lease is 30 s: not this lock's failing
                    return []
                return [f"{n} is still held" for n in names if r.exists(n)]
            finally:
                r.close()
        if kind in MASTER_KINDS:
            out = []
            for i in range(5):
                r = redis.Redis(port=self.servers[f"m{i}"].port, socket_timeout=5)
                if r.exists(name):
                    out.append(f"{name} is still held on m{i}")
                r.close()
            return out
        if kind == "cluster":
            assert self.cluster is not None
            rc: Any = redis.RedisCluster(host="127.0.0.1", port=self.cluster.servers[0].port)
            try:
                return [f"{name} is still held"] * bool(rc.exists(name))
            finally:
                rc.close()
        r = redis.Redis(port=self._sentinel_master().port, socket_timeout=5)
        try:
            return [f"{name} is still held"] * bool(r.exists(name))
        finally:
            r.close()

    def stop_servers(self) -> None:
        for proxy in self.proxies.values():
            proxy.close()
        if self.cluster is not None:
            self.cluster.stop()
        if self.sentinel is not None:
            self.sentinel.stop()
        for key, server in self.servers.items():
            if key[0] != "c":
                server.stop()
        self.store.stop()


class Reseeder:
    """Gives the plain Semaphore back the permits that lost replies leaked.

    A plain semaphore's permits belong to nobody: an acquire whose reply is lost may have
    taken one that its caller never releases (by design; docs/semaphores.md), and with 2
    permits the semaphore soon starves. Every :data:`RESEED_EVERY` seconds, when the server
    has been free of faults for :data:`RESEED_QUIET` seconds (any delayed command has landed
    or is lost for good), the runner closes a gate in the store; each semaphore worker
    thread, holding nothing at the top of its loop, parks. Once all have parked (else, after
    :data:`RESEED_PARK` seconds, the gate opens again without a re-seed), and the server is
    still quiet, the runner reads each semaphore's count straight from the server and sets
    it back to its permits; then the gate opens. No permit is held while the count is set,
    so the checker's rule (never more holders than permits) is unchanged; each re-seed is
    logged in ``reseeds.jsonl`` and counted in the run's notes.
    """

    def __init__(self, camp: Campaign, nemesis: Nemesis) -> None:
        self.camp = camp
        self.nemesis = nemesis
        self.log = camp.out / "reseeds.jsonl"
        self.pauses = 0
        self.reseeded = 0  # permits given back
        self.skipped = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="reseeder", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(RESEED_PARK + 5)

    def _run(self) -> None:
        camp = self.camp
        gate = store.Store(camp.store.url)
        raw: Any = redis.Redis.from_url(camp.servers["single"].url, socket_timeout=2)
        try:
            while not self._stop.wait(RESEED_EVERY):
                if time.monotonic() > camp.stop_at - RESEED_PARK - 2:
                    return
                if not self.nemesis.quiet("single", RESEED_QUIET):
                    continue
                try:
                    self._pause_and_reseed(gate, raw)
                except (redis.RedisError, OSError) as error:
                    camp.notes.append(f"reseeder: {type(error).__name__}: {error}")
                finally:
                    gate.close_gate("semaphore", False)
        finally:
            gate.close()
            raw.close()

    def _pause_and_reseed(self, gate: store.Store, raw: Any) -> None:
        camp = self.camp
        expected = len(camp.client_pids("semaphore")) * camp.threads("semaphore")
        gate.close_gate("semaphore", True)
        self.pauses += 1
        deadline = time.monotonic() + RESEED_PARK
        while gate.parked("semaphore") < expected:
            if time.monotonic() > deadline or self._stop.is_set():
                self.skipped += 1
                return
            time.sleep(0.02)
        if not self.nemesis.quiet("single", RESEED_QUIET):
            self.skipped += 1
            return
        permits = PERMITS["semaphore"]
        for res in ("r0",):
            name = f"chaos:{camp.args.run_id}:semaphore:{res}"
            value = int(raw.get(name) or 0)
            if value < permits:
                raw.set(name, permits)
                self.reseeded += permits - value
            record = {"ev": "reseed", "t": time.monotonic(), "name": name, "found": value,
                      "set": max(value, permits)}  # fmt: skip
            with self.log.open("a", encoding="utf-8") as f:
                f.write(json.dumps(record) + "\n")


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="scripts/chaos", description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=2.0, help="length of the load")
    parser.add_argument(
        "--kinds",
        default=",".join(k for k in KINDS if k not in OPT_IN),
        help=(
            f"primitives, comma-separated ({','.join(KINDS)}; opt-in: {','.join(OPT_IN) or 'none'})"
        ),
    )
    parser.add_argument("--seed", type=int, default=1, help="the nemesis's seed")
    parser.add_argument("--out", type=Path, default=None, help="run folder (default: a temp one)")
    parser.add_argument("--processes", type=int, default=2, help="client processes per primitive")
    parser.add_argument("--threads", type=int, default=3, help="threads per client process")
    parser.add_argument(
        "--mode",
        choices=["minority", "redlock-majority"],
        default="minority",
        help="redlock-majority also restarts 3 of 5 RedLock masters at once, empty "
        "(the documented caveat: expect excused overlaps)",
    )
    parser.add_argument("--faults", default=None, help="only these fault classes, comma-separated")
    parser.add_argument(
        "--persistence",
        choices=["random", "aof", "none"],
        default="random",
        help="whether a restart of the single server keeps its AOF (random: per fault)",
    )
    parser.add_argument("--no-netns", action="store_true", help="do not use unshare --net")
    parser.add_argument("--in-netns", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument(
        "--check", type=Path, metavar="RUN", help="only judge the run folder RUN again"
    )
    args = parser.parse_args(argv)
    args.kinds = [k for k in args.kinds.split(",") if k]
    unknown = set(args.kinds) - set(KINDS) - set(BROKEN)
    if unknown:
        parser.error(f"unknown kinds: {', '.join(sorted(unknown))}")
    args.run_id = f"s{args.seed}-{os.getpid()}"
    return args


def main(argv: list[str] | None = None) -> int:
    """Run the campaign; 0 when the checker found no violation."""
    args = _parse(argv)
    if args.check is not None:
        return report(args.check)
    reason = "disabled with --no-netns" if args.no_netns else None
    if not args.in_netns and reason is None:
        reason = netns_available()
        if reason is None:  # re-run inside a private network namespace
            command = ["unshare", "--net", sys.executable, "-m", "tests.chaos", "--in-netns"]
            return subprocess.run(
                [*command, *(argv or sys.argv[1:])], cwd=ROOT, check=False
            ).returncode
    if args.in_netns:
        subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    partitions = args.in_netns
    out = args.out or Path(tempfile.mkdtemp(prefix="syncprims-chaos-"))
    for sub in ("history", "logs", "stacks", "clock"):
        (out / sub).mkdir(parents=True, exist_ok=True)
    seconds = args.minutes * 60
    camp = Campaign(args, out, partitions)
    notes = camp.notes
    if not partitions:
        notes.append(f"partitions skipped: {reason}")
        print(f"chaos: network partitions skipped ({reason})", flush=True)
    classes = [c for c in CLASSES if c != "redlock_majority_restart" or args.mode != "minority"]
    if args.faults is not None:
        classes = [c for c in classes if c in args.faults.split(",")]
    if not partitions:
        classes = [c for c in classes if c not in ("partition", "master_cut")]
    if "sentinel" not in args.kinds:
        classes = [c for c in classes if c not in ("failover", "master_cut")]
    if "cluster" not in args.kinds:
        classes = [c for c in classes if c != "slot_migration"]
    if "redlock" not in args.kinds:
        classes = [c for c in classes if c != "redlock_majority_restart"]
    print(f"chaos: run folder {out}; seed {args.seed}; {args.minutes:g} min; "
          f"kinds {','.join(args.kinds)}", flush=True)  # fmt: skip
    stop_watch = threading.Event()
    watcher: threading.Thread | None = None
    try:
        camp.start_servers()
        setup = Setup(
            kinds=tuple(args.kinds),
            servers=camp.server_ids(),
            proxied=tuple(camp.proxies),
            classes=tuple(classes),
        )
        schedule = plan(args.seed, seconds, setup)
        owners = camp.owners()
        (out / "schedule.json").write_text(json.dumps([vars(p) for p in schedule], indent=1))
        camp.start_clients()
        camp.wait_ready()
        t0 = time.monotonic() + 0.5
        camp.stop_at = t0 + seconds
        gate = store.Store(camp.store.url)
        gate.start_load(camp.stop_at)
        gate.close()
        if camp.sentinel is not None:
            watcher = threading.Thread(target=camp.watch_failovers, args=(stop_watch,), daemon=True)
            watcher.start()
        nemesis = Nemesis(schedule, camp, out / "nemesis.jsonl", t0)
        nemesis.start()
        reseeder: Reseeder | None = None
        if "semaphore" in args.kinds:
            reseeder = Reseeder(camp, nemesis)
            reseeder.start()
        print(f"chaos: {len(schedule)} faults scheduled; load until t0+{seconds:g} s", flush=True)
        while time.monotonic() < camp.stop_at:
            time.sleep(min(10.0, max(0.0, camp.stop_at - time.monotonic())))
        nemesis.stop()
        notes.extend(f"nemesis: {e}" for e in nemesis.errors)
        if reseeder is not None:
            reseeder.stop()
            notes.append(
                f"semaphore: {reseeder.reseeded} leaked permits given back in "
                f"{reseeder.pauses - reseeder.skipped} of {reseeder.pauses} pauses (Reseeder)"
            )
        bound = WAIT + 10.0 + 10.0  # a wait, its operation bound, a long hold
        hung = camp.wait_clients(camp.stop_at + bound)
        notes.extend(f"client pid {pid} hung; stacks in stacks/{pid}.txt" for pid in hung)
        stop_watch.set()
        if watcher is not None:
            watcher.join(5)
        if camp.sentinel is not None:
            with contextlib.suppress(RuntimeError):
                camp.sentinel.wait_replica_synced(30)
        time.sleep(SETTLE)
        held = camp.still_held()
        (out / "final.json").write_text(json.dumps({"held": held}, indent=1))
        (out / "store.json").write_text(json.dumps(store.dump(camp.store.url)))
        meta = {
            "kinds": args.kinds,
            "seed": args.seed,
            "minutes": args.minutes,
            "mode": args.mode,
            "end": camp.stop_at,
            "servers": {k: camp.kind_servers(k) for k in args.kinds},
            "owners": owners,
            "permits": {k: PERMITS[k] for k in args.kinds if k in PERMITS},
            "notes": notes,
            "classes": classes,
        }
        (out / "meta.json").write_text(json.dumps(meta, indent=1))
    finally:
        stop_watch.set()
        for procs in camp.procs.values():
            for proc in procs:
                if proc.poll() is None:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(proc.pid, signal.SIGCONT)
                    proc.kill()
                    proc.wait(10)  # reaped: an unreaped Popen warns when it is collected
        camp.stop_servers()
    return report(out)


def report(out: Path) -> int:
    """Judge the run folder ``out``: print the table, the violations and the summary line,
    write ``report.md``; 1 when there are violations."""
    judged = checker.check_run(out)
    text = checker.format_table(judged)
    lines = [text, ""]
    lines += [f"note: {n}" for n in judged.notes]
    lines += [f"VIOLATION: {v}" for v in judged.violations[:50]]
    if len(judged.violations) > 50:
        lines.append(f"... and {len(judged.violations) - 50} more (report.md)")
    summary = checker.summary_line(judged)
    (out / "report.md").write_text(
        "\n".join([text, "", *(f"- {v}" for v in judged.violations), "", summary]) + "\n"
    )
    print("\n".join(lines), flush=True)
    print(summary, flush=True)
    return 1 if judged.violations else 0
