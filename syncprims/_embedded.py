"""Throw-away Redis servers for the demo, the benchmarks and the tests.

:class:`RedisServer` runs a real ``redis-server`` on a free loopback port (no persistence,
its own temporary directory) and can stop, kill, pause (SIGSTOP) and restart it on the same
port. :class:`FakeServer` runs fakeredis' TCP server in a thread, for machines without
``redis-server`` (it needs the ``fakeredis[lua]`` extra). Neither ever touches port 6379.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from types import TracebackType
from typing import Protocol, Self

__all__ = ["EmbeddedServer", "FakeServer", "RedisServer", "free_port", "start_embedded"]


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _ping(host: str, port: int, timeout: float) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout) as sock:
            sock.sendall(b"PING\r\n")
            return sock.recv(16).startswith((b"+PONG", b"-NOAUTH"))
    except OSError:
        return False


class EmbeddedServer(Protocol):
    """What the demo needs from a server it started."""

    @property
    def url(self) -> str: ...

    @property
    def description(self) -> str: ...

    def stop(self) -> None: ...


class RedisServer:
    """A ``redis-server`` child process on a free loopback port.

    Args:
        port: the port; ``None`` picks a free one.
        args: extra ``redis-server`` arguments (``["--requirepass", "x"]``...).
        executable: the binary; ``None`` finds ``redis-server`` on ``PATH``.

    Raises:
        FileNotFoundError: no ``redis-server``.
        RuntimeError: the server did not answer PING within 10 s.
    """

    def __init__(
        self, port: int | None = None, args: list[str] | None = None, executable: str | None = None
    ) -> None:
        found = executable or shutil.which("redis-server")
        if found is None:
            raise FileNotFoundError("redis-server is not on PATH")
        self.executable = found
        self.port = port or free_port()
        self.args = list(args or [])
        self.dir = tempfile.mkdtemp(prefix="syncprims-redis-")
        self.process: subprocess.Popen[bytes] | None = None
        self.start()

    @property
    def url(self) -> str:
        """``redis://127.0.0.1:<port>``."""
        return f"redis://127.0.0.1:{self.port}"

    @property
    def description(self) -> str:
        """``redis-server <version> on 127.0.0.1:<port>``."""
        return f"redis-server {self.version()} on 127.0.0.1:{self.port}"

    def version(self) -> str:
        """The server's version, from ``redis-server --version``."""
        out = subprocess.run(
            [self.executable, "--version"], capture_output=True, text=True, check=False
        ).stdout
        for part in out.split():
            if part.startswith("v="):
                return part[2:]
        return "?"

    def start(self, timeout: float = 10.0) -> None:
        """Start (or restart) the server on its port and wait until it answers."""
        command = [
            self.executable,
            "--port", str(self.port),
            "--bind", "127.0.0.1",
            "--save", "",
            "--appendonly", "no",
            "--dir", self.dir,
            "--protected-mode", "no",
            *self.args,
        ]  # fmt: skip
        self.process = subprocess.Popen(
            command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"redis-server exited with {self.process.returncode} at start")
            if _ping("127.0.0.1", self.port, 0.5):
                return
            time.sleep(0.02)
        self.kill()
        raise RuntimeError(f"redis-server on port {self.port} did not answer within {timeout} s")

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

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


class FakeServer:
    """fakeredis' TCP server on a free loopback port, served by a daemon thread.

    Raises:
        ImportError: fakeredis (with lupa, for Lua) is not installed.
    """

    def __init__(self) -> None:
        import fakeredis

        self._server = fakeredis.TcpFakeServer(("127.0.0.1", 0), server_type="redis")
        self._server.RequestHandlerClass = _error_tolerant_handler()
        # Connection handlers must not keep the process alive or block server_close().
        self._server.daemon_threads = True
        self._server.block_on_close = False
        self.port: int = self._server.server_address[1]
        self._version = getattr(fakeredis, "__version__", "?")
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="fakeredis", daemon=True
        )
        self._thread.start()

    @property
    def url(self) -> str:
        """``redis://127.0.0.1:<port>``."""
        return f"redis://127.0.0.1:{self.port}"

    @property
    def description(self) -> str:
        """``fakeredis <version> (in-process) on 127.0.0.1:<port>``."""
        return f"fakeredis {self._version} (in-process) on 127.0.0.1:{self.port}"

    def stop(self) -> None:
        """Stop serving and close the socket."""
        self._server.shutdown()
        self._server.server_close()


def _error_tolerant_handler() -> type:
    """fakeredis' TCP handler, fixed to keep a connection open after an error reply.

    fakeredis 2.40's handler closes the connection whenever a command's reply is an error
    (cunla/fakeredis-py#432, open): EVALSHA's NOSCRIPT then looks like a dropped connection.
    Returning the error as a value lets the handler write ``-ERR ...`` and go on, as Redis does.
    """
    import redis.exceptions
    from fakeredis._clients._tcp_server import TCPFakeRequestHandler

    class Handler(TCPFakeRequestHandler):
        def setup(self) -> None:
            super().setup()
            client = self.current_client
            read = client.read_response

            def read_response(*args: object, **kwargs: object) -> object:
                try:
                    return read(*args, **kwargs)
                except redis.exceptions.ResponseError as error:
                    return error

            client.read_response = read_response  # type: ignore[method-assign]

    return Handler


def start_embedded() -> EmbeddedServer:
    """A ``redis-server`` from ``PATH`` if there is one, else a fakeredis server.

    Raises:
        RuntimeError: neither is available.
    """
    if shutil.which("redis-server") and not os.environ.get("SYNCPRIMS_FORCE_FAKEREDIS"):
        return RedisServer()
    try:
        return FakeServer()
    except ImportError as error:
        raise RuntimeError(
            "no redis-server on PATH and fakeredis is not installed; "
            "install redis-server or `pip install 'syncprims[cli]'`, or pass --url"
        ) from error
