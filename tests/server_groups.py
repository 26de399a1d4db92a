"""Groups of the embedded servers (``syncprims._embedded.RedisServer``) for the tests and the
chaos campaign: :class:`RedisClusterSet` (made by ``redis-cli --cluster create``) and
:class:`SentinelSet` (``--sentinel``), with :func:`server_cli`'s ``redis-cli``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time

from syncprims._embedded import SERVER_ENV, RedisServer, _port_free, free_port


def server_cli() -> str:
    """The ``redis-cli`` for the servers: ``redis-cli`` or ``valkey-cli`` next to
    ``$SYNCPRIMS_TEST_SERVER`` when set and present, else ``redis-cli`` from ``PATH``.

    Raises:
        FileNotFoundError: none found.
    """
    chosen = os.environ.get(SERVER_ENV)
    if chosen:
        folder = os.path.dirname(os.path.abspath(chosen))
        for name in ("redis-cli", "valkey-cli"):
            cli = os.path.join(folder, name)
            if os.path.isfile(cli) and os.access(cli, os.X_OK):
                return cli
    found = shutil.which("redis-cli")
    if found is None:
        raise FileNotFoundError("redis-cli is not on PATH")
    return found


def _cluster_port() -> int:
    """A free port below 55536 whose cluster bus port (the port + 10000) is free too."""
    for _ in range(1000):
        port = free_port()
        if port < 55536 and _port_free(port + 10000):
            return port
    raise RuntimeError("no free port below 55536")


def _cli(*args: str, timeout: float = 30) -> str:
    cli = server_cli()
    done = subprocess.run(
        [cli, *args], capture_output=True, text=True, timeout=timeout, check=False
    )
    return done.stdout + done.stderr


def _info(port: int, section: str) -> dict[str, str]:
    out = _cli("-p", str(port), "info", section, timeout=5)
    return dict(line.split(":", 1) for line in out.splitlines() if ":" in line)


class RedisClusterSet:
    """A Redis Cluster of ``redis-server`` processes on free ports, made by ``redis-cli``.

    Args:
        masters: number of masters (>= 3).
        replicas: replicas per master.
        node_timeout: ``cluster-node-timeout``, ms (failure detection).

    Raises:
        RuntimeError: the cluster did not come up within 60 s.
    """

    def __init__(self, masters: int = 3, replicas: int = 1, node_timeout: int = 2000) -> None:
        args = [
            "--cluster-enabled", "yes",
            "--cluster-config-file", "nodes.conf",
            "--cluster-node-timeout", str(node_timeout),
            "--repl-diskless-sync-delay", "0",
        ]  # fmt: skip
        count = masters * (1 + replicas)
        self.servers = [RedisServer(port=_cluster_port(), args=args) for _ in range(count)]
        try:
            out = _cli(
                "--cluster", "create",
                *(f"127.0.0.1:{s.port}" for s in self.servers),
                "--cluster-replicas", str(replicas),
                "--cluster-yes",
                timeout=60,
            )  # fmt: skip
            if "[OK] All 16384 slots covered" not in out:
                raise RuntimeError(f"redis-cli --cluster create failed:\n{out}")
            self.wait_ok()
        except BaseException:
            self.stop()
            raise

    @property
    def url(self) -> str:
        """``redis+cluster://127.0.0.1:<port>,...`` (every node a seed)."""
        return "redis+cluster://" + ",".join(f"127.0.0.1:{s.port}" for s in self.servers)

    @property
    def description(self) -> str:
        """For reports."""
        return f"a {len(self.servers)}-node {self.servers[0].name()} cluster on 127.0.0.1"

    def masters(self) -> list[RedisServer]:
        """The servers that are masters now."""
        return [s for s in self.live() if _info(s.port, "replication").get("role") == "master"]

    def live(self) -> list[RedisServer]:
        """The servers still running."""
        return [s for s in self.servers if s.process is not None and s.process.poll() is None]

    def wait_ok(self, timeout: float = 60) -> None:
        """Wait until every live node says ``cluster_state:ok`` and replicas are in sync.

        Raises:
            RuntimeError: not within ``timeout`` seconds.
        """
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            live = self.live()
            states = [_info(s.port, "cluster").get("cluster_enabled") for s in live]
            ok = all(
                "cluster_state:ok" in _cli("-p", str(s.port), "cluster", "info", timeout=5)
                for s in live
            )
            synced = all(
                _info(s.port, "replication").get("master_link_status", "up") == "up" for s in live
            )
            if ok and synced and all(states):
                return
            time.sleep(0.2)
        raise RuntimeError("the cluster did not reach cluster_state:ok")

    def stop(self) -> None:
        """Stop every node."""
        for server in self.servers:
            server.stop()


class SentinelSet:
    """A master, a replica and three sentinels (``redis-server --sentinel``) on free ports.

    Raises:
        RuntimeError: the group did not come up within 30 s.
    """

    def __init__(self, master_name: str = "mymaster", down_after_ms: int = 1000) -> None:
        self.master_name = master_name
        quick_sync = ["--repl-diskless-sync-delay", "0"]  # Redis 7 waits 5 s by default
        self.master = RedisServer(args=quick_sync)
        self.replica = RedisServer(
            args=[*quick_sync, "--replicaof", "127.0.0.1", str(self.master.port)]
        )
        self.sentinels: list[RedisServer] = []
        try:
            for _ in range(3):
                port = free_port()
                folder = tempfile.mkdtemp(prefix="syncprims-sentinel-")
                conf = os.path.join(folder, "sentinel.conf")
                with open(conf, "w", encoding="utf-8") as f:
                    f.write(
                        f"port {port}\n"
                        "bind 127.0.0.1\n"
                        f"dir {folder}\n"
                        f"sentinel monitor {master_name} 127.0.0.1 {self.master.port} 2\n"
                        f"sentinel down-after-milliseconds {master_name} {down_after_ms}\n"
                        f"sentinel failover-timeout {master_name} 3000\n"
                        f"sentinel parallel-syncs {master_name} 1\n"
                    )
                self.sentinels.append(RedisServer(port=port, args=["--sentinel"], config_file=conf))
            self.wait_ready()
        except BaseException:
            self.stop()
            raise

    @property
    def url(self) -> str:
        """``redis+sentinel://127.0.0.1:<port>,.../<master name>``."""
        hosts = ",".join(f"127.0.0.1:{s.port}" for s in self.sentinels)
        return f"redis+sentinel://{hosts}/{self.master_name}"

    def master_port(self) -> int:
        """The master's port, according to the first sentinel that answers."""
        for sentinel in self.sentinels:
            out = _cli(
                "-p", str(sentinel.port), "sentinel", "get-master-addr-by-name", self.master_name,
                timeout=5,
            )  # fmt: skip
            lines = out.split()
            if len(lines) >= 2 and lines[1].isdigit():
                return int(lines[1])
        raise RuntimeError("no sentinel knows the master")

    def wait_ready(self, timeout: float = 30) -> None:
        """Wait until the sentinels see the replica and each other."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            out = _cli("-p", str(self.sentinels[0].port), "sentinel", "master", self.master_name)
            fields = out.split()
            info = dict(zip(fields[::2], fields[1::2], strict=False))
            link = _info(self.replica.port, "replication").get("master_link_status")
            if (
                info.get("num-slaves") == "1"
                and info.get("num-other-sentinels") == "2"
                and link == "up"
            ):
                return
            time.sleep(0.2)
        raise RuntimeError("the sentinels did not come up")

    def wait_replica_synced(self, timeout: float = 60) -> None:
        """Wait until the current master has a replica that acknowledges writes (``WAIT``).

        Raises:
            RuntimeError: not within ``timeout`` seconds.
        """
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            port = self.master_port()
            _cli("-p", str(port), "set", "syncprims:probe", "1", timeout=5)
            if _cli("-p", str(port), "wait", "1", "200", timeout=5).strip() == "1":
                _cli("-p", str(port), "del", "syncprims:probe", timeout=5)
                return
        raise RuntimeError("no replica acknowledges the master")

    def failover(self, timeout: float = 30) -> int:
        """``SENTINEL FAILOVER`` and wait until the sentinels name the new master.

        Returns:
            The new master's port.
        """
        before = self.master_port()
        deadline = time.monotonic() + timeout
        asked = 0.0  # when a sentinel last accepted the command
        while time.monotonic() < deadline:
            if asked:  # done? (checked before asking again: a second one would undo it)
                port = self.master_port()
                if port != before and _info(port, "replication").get("role") == "master":
                    return port
            now = time.monotonic()
            if now - asked > 10:  # not asked yet, refused, or accepted and given up on
                # A sentinel refuses (-NOGOODSLAVE, -INPROG) while no replica is fit yet,
                # e.g. one still resyncing after the last failover: ask again, until one is.
                reply = _cli(
                    "-p", str(self.sentinels[0].port), "sentinel", "failover", self.master_name
                )
                asked = now if reply.strip() == "OK" else now - 9.5  # refused: again in 0.5 s
            time.sleep(0.1)
        raise RuntimeError("the failover did not complete")

    def stop(self) -> None:
        """Stop every process."""
        for server in [*self.sentinels, self.replica, self.master]:
            server.stop()
