"""Throw-away Redis servers for the demo, the benchmarks and the tests.

:class:`RedisServer` runs a real ``redis-server`` on a free loopback port (no persistence,
its own temporary directory) and can stop, kill, pause (SIGSTOP) and restart it on the same
port. :class:`FakeServer` runs fakeredis' TCP server in a thread, for machines without
``redis-server`` (it needs the ``fakeredis[lua]`` extra). Neither ever touches port 6379.
The tests' Cluster and Sentinel groups of :class:`RedisServer` are in ``tests/server_groups.py``.

Every server here but :func:`start_embedded`'s runs :func:`server_executable`'s binary
(``$SYNCPRIMS_TEST_SERVER``, else ``redis-server`` from ``PATH``; ``scripts/servers`` fetches
Redis 6.2 and Valkey 8 binaries for it). What the demo and the benchmarks start ends with
them (``end_with_parent``, :func:`exit_with_parent`).
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import multiprocessing
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from typing import Self

__all__ = [
    "SERVER_ENV",
    "EmbeddedServer",
    "FakeServer",
    "RedisServer",
    "exit_with_parent",
    "free_port",
    "server_executable",
    "start_embedded",
]

SERVER_ENV = "SYNCPRIMS_TEST_SERVER"
"""The environment variable naming the server binary (:func:`server_executable`)."""


def server_executable() -> str | None:
    """The server binary: ``$SYNCPRIMS_TEST_SERVER`` when set, else ``redis-server`` from
    ``PATH`` (``None`` if there is none).

    Raises:
        FileNotFoundError: ``SYNCPRIMS_TEST_SERVER`` names no executable file.
    """
    chosen = os.environ.get(SERVER_ENV)
    if not chosen:
        return shutil.which("redis-server")
    if not (os.path.isfile(chosen) and os.access(chosen, os.X_OK)):
        raise FileNotFoundError(f"{SERVER_ENV}={chosen} is not an executable file")
    return chosen


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def _answering_pid(host: str, port: int, timeout: float) -> int | None:
    """The process id of the Redis server answering PING on ``port`` (``INFO server``'s
    ``process_id``); 0 when it answers but wants a password; ``None`` when none answers
    (yet)."""
    try:
        with socket.create_connection((host, port), timeout=timeout) as sock:
            sock.sendall(b"PING\r\nINFO server\r\n")
            data = b""
            while b"process_id:" not in data or not data.endswith(b"\r\n"):
                chunk = sock.recv(65536)
                if not chunk:
                    return None
                data += chunk
                if len(data) >= 7 and not data.startswith(b"+PONG\r\n"):
                    return 0 if data.startswith(b"-NOAUTH") else None
    except OSError:
        return None
    line = data[data.index(b"process_id:") :].split(b"\r\n", 1)[0]
    return int(line.split(b":", 1)[1])


def _killed_with_parent() -> Callable[[], None] | None:
    """A ``preexec_fn`` that has the kernel SIGKILL the child when its parent dies (Linux's
    ``prctl(PR_SET_PDEATHSIG)``), or ``None`` where there is no such call.

    The signal comes when the *thread* that started the child ends: start it from one that
    lives as long as the child is wanted (the main thread).
    """
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    parent = os.getpid()

    def preexec() -> None:
        prctl(1, int(signal.SIGKILL), 0, 0, 0)  # PR_SET_PDEATHSIG = 1
        if os.getppid() != parent:  # the parent died before the call: no signal will come
            os._exit(1)

    return preexec


def exit_with_parent() -> None:
    """Make this process (a ``multiprocessing`` child, spawned or forked by a fork server)
    exit once the process that started it is gone: a daemon thread looks every 0.5 s and
    ends this one with ``os._exit(1)`` when that process is dead (killed, even by SIGKILL:
    no such process, or a zombie not yet reaped)."""
    known = multiprocessing.parent_process()
    parent = known.pid if known is not None and known.pid is not None else os.getppid()

    def watch() -> None:
        while _running(parent):
            time.sleep(0.5)
        os._exit(1)

    threading.Thread(target=watch, name="syncprims-exit-with-parent", daemon=True).start()


def _running(pid: int) -> bool:
    """Whether process ``pid`` (one of this user's) runs: it exists and, where ``/proc``
    tells, is no zombie."""
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, PermissionError):  # gone (its number another user's now)
        return False
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            return f.read().rpartition(")")[2].split()[0] != "Z"
    except (OSError, IndexError):  # no /proc
        return True


class _Loopback:
    """A server listening on :attr:`port` of 127.0.0.1."""

    port: int

    @property
    def url(self) -> str:
        """``redis://127.0.0.1:<port>``."""
        return f"redis://127.0.0.1:{self.port}"


class RedisServer(_Loopback):
    """A ``redis-server`` child process on a free loopback port.

    Args:
        port: the port; ``None`` picks a free one.
        args: extra ``redis-server`` arguments (``["--requirepass", "x"]``...).
        executable: the binary; ``None`` takes :func:`server_executable`'s.
        config_file: a configuration file to start from; its folder is the server's.
        end_with_parent: on Linux, the kernel kills the server when the thread that
            (re)started it ends, as when this process dies (:func:`_killed_with_parent`).

    Raises:
        FileNotFoundError: no ``redis-server`` (or ``SYNCPRIMS_TEST_SERVER`` names none).
        RuntimeError: the server did not answer PING within 10 s.
    """

    def __init__(
        self,
        port: int | None = None,
        args: list[str] | None = None,
        executable: str | None = None,
        config_file: str | None = None,
        end_with_parent: bool = False,
    ) -> None:
        found = executable or server_executable()
        if found is None:
            raise FileNotFoundError(f"redis-server is not on PATH (and {SERVER_ENV} is not set)")
        self.executable = found
        self.port = port or free_port()
        self._own_port = port is None  # free_port's: another may be picked (start)
        self.args = list(args or [])
        self.config_file = config_file
        self.end_with_parent = end_with_parent
        self.dir = (
            os.path.dirname(config_file)
            if config_file
            else tempfile.mkdtemp(prefix="syncprims-redis-")
        )
        self.process: subprocess.Popen[bytes] | None = None
        try:
            self.start()
        except BaseException:  # no process, no folder left behind
            self.stop()
            raise

    @property
    def description(self) -> str:
        """``redis-server <version> on 127.0.0.1:<port>`` (``valkey-server ...`` for Valkey)."""
        return f"{self.name()} {self.version()} on 127.0.0.1:{self.port}"

    @functools.cached_property
    def _banner(self) -> tuple[str, str]:
        """``(name, version)`` from ``<binary> --version``: ``Redis server v=7.0.15 ...``
        gives ``("redis-server", "7.0.15")``, ``Valkey server v=8.1.8 ...``
        ``("valkey-server", "8.1.8")``; ``"?"`` for a version it cannot read."""
        out = subprocess.run(
            [self.executable, "--version"], capture_output=True, text=True, check=False
        ).stdout
        words = out.split()
        name = "valkey-server" if words and words[0].lower() == "valkey" else "redis-server"
        return name, next((w[2:] for w in words if w.startswith("v=")), "?")

    def name(self) -> str:
        """``redis-server`` or ``valkey-server``, from the binary's ``--version``."""
        return self._banner[0]

    def version(self) -> str:
        """The server's version, from ``<binary> --version`` (``7.0.15``, ``8.1.8``...)."""
        return self._banner[1]

    def _args_for_version(self) -> list[str]:
        """:attr:`args`, less ``--enable-debug-command <value>`` before Redis 7 (the option
        came with 7.0, and a 6.x server refuses to start with it; DEBUG is always on there)."""
        major = self.version().split(".")[0]
        if not major.isdigit() or int(major) >= 7:
            return self.args
        args = list(self.args)
        while "--enable-debug-command" in args:
            at = args.index("--enable-debug-command")
            del args[at : at + 2]
        return args

    def start(self, timeout: float = 10.0) -> None:
        """Start the server on its port (again, after :meth:`kill` or :meth:`stop`) and wait
        until it answers; a no-op while it runs (a second process could not bind the port,
        and this object would lose track of the first).

        The port is checked to be this server's (its ``process_id``): a port that
        :func:`free_port` found free can be taken before the server binds it (another
        process's server, a client socket's local port). At the first start, a port this
        object picked is then picked again (up to three times); otherwise, or after a
        restart, that raises.

        Raises:
            RuntimeError: the server exited, did not answer within ``timeout`` seconds, or
                another process holds its port.
        """
        if self.process is not None and self.process.poll() is None:
            return
        first = self.process is None
        for _ in range(3):
            if self._launch(timeout):
                return
            if not (first and self._own_port):
                break
            self.port = free_port()
        raise RuntimeError(f"port {self.port} is taken by another process")

    def _launch(self, timeout: float) -> bool:
        """One start of the server; ``False`` when its port is another process's."""
        command = [
            self.executable,
            *([self.config_file] if self.config_file else []),
            "--port", str(self.port),
            "--bind", "127.0.0.1",
            *([] if self.config_file else ["--save", "", "--appendonly", "no", "--dir", self.dir]),
            "--protected-mode", "no",
            *self._args_for_version(),
        ]  # fmt: skip
        self.process = subprocess.Popen(
            command,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            # It calls prctl and getppid only: no lock another thread could hold at the fork.
            preexec_fn=_killed_with_parent() if self.end_with_parent else None,  # noqa: PLW1509
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                if not _port_free(self.port):  # it could not bind the port
                    return False
                raise RuntimeError(
                    f"{self.executable} exited with {self.process.returncode} at start"
                )
            answering = _answering_pid("127.0.0.1", self.port, 0.5)
            if answering in (0, self.process.pid):  # 0: it wants a password, no pid said
                return True
            if answering is not None:  # another process's server answered
                self.kill()
                return False
            time.sleep(0.02)
        self.kill()
        raise RuntimeError(
            f"{self.executable} on port {self.port} did not answer within {timeout} s"
        )

    def _signal(self, sig: int) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(sig)

    def pause(self) -> None:
        """SIGSTOP: the server stops answering but keeps its connections."""
        self._signal(signal.SIGSTOP)

    def resume(self) -> None:
        """SIGCONT after :meth:`pause`."""
        self._signal(signal.SIGCONT)

    def kill(self) -> None:
        """SIGKILL and wait: every connection drops, all data is lost."""
        if self.process is not None:
            self._signal(signal.SIGCONT)
            self._signal(signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(10)

    def stop(self) -> None:
        """Stop the server (SIGTERM, then SIGKILL after 5 s) and remove its directory."""
        if self.process is not None and self.process.poll() is None:
            self._signal(signal.SIGCONT)
            self.process.terminate()
            try:
                self.process.wait(5)
            except subprocess.TimeoutExpired:
                self.kill()
        shutil.rmtree(self.dir, ignore_errors=True)

    def restart(self) -> None:
        """Kill the server and start a new, empty one on the same port."""
        self.kill()
        self.start()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


class FakeServer(_Loopback):
    """fakeredis' TCP server on a free loopback port, served by a daemon thread.

    Raises:
        ImportError: fakeredis (with lupa, for Lua) is not installed.
    """

    def __init__(self) -> None:
        import fakeredis

        self._server = fakeredis.TcpFakeServer(("127.0.0.1", 0), server_type="redis")
        # Connection handlers must not keep the process alive or block server_close().
        self._server.daemon_threads = True
        self._server.block_on_close = False
        self.port = self._server.server_address[1]
        self._version = getattr(fakeredis, "__version__", "?")
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="fakeredis", daemon=True
        )
        self._thread.start()

    @property
    def description(self) -> str:
        """``fakeredis <version> (in-process) on 127.0.0.1:<port>``."""
        return f"fakeredis {self._version} (in-process) on 127.0.0.1:{self.port}"

    def stop(self) -> None:
        """Stop serving and close the socket."""
        self._server.shutdown()
        self._server.server_close()


EmbeddedServer = RedisServer | FakeServer
"""What :func:`start_embedded` starts."""


def start_embedded() -> EmbeddedServer:
    """A ``redis-server`` from ``PATH`` (``end_with_parent``) if there is one, else a
    fakeredis server (for the demo and the benchmarks: ``SYNCPRIMS_TEST_SERVER`` does not
    apply).

    Raises:
        RuntimeError: neither is available.
    """
    found = shutil.which("redis-server")
    if found and not os.environ.get("SYNCPRIMS_FORCE_FAKEREDIS"):
        return RedisServer(executable=found, end_with_parent=True)
    try:
        return FakeServer()
    except ImportError as error:
        raise RuntimeError(
            "no redis-server on PATH and fakeredis is not installed; "
            "install redis-server or `pip install 'syncprims[cli]'`, or pass --url"
        ) from error
