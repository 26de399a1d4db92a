"""Failed authentication fails fast with a typed error; TLS with a test CA, and its refusals."""

from __future__ import annotations

import gc
import re
import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import redis
import redis.exceptions
from redis.backoff import NoBackoff
from redis.retry import Retry

import syncprims
from syncprims._embedded import RedisServer, free_port
from syncprims._protocol.timing import Bounds
from tests.faults.security.helpers import (
    ACL_RULES,
    ADMIN_PASSWORD,
    USER,
    USER_PASSWORD,
    connect_rules,
    lock_waiter,
    plain_redis,
    wakes_on_message,
)
from tests.harness import raw_command

pytestmark = [pytest.mark.real, pytest.mark.faults]


# -- authentication ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def auth_server() -> Iterator[RedisServer]:
    """A server with a default-user password, the user ``locker`` and a disabled user."""
    server = RedisServer(args=["--requirepass", ADMIN_PASSWORD])
    admin = plain_redis(server.port, password=ADMIN_PASSWORD)
    try:
        admin.execute_command("ACL", "SETUSER", USER, *ACL_RULES, *connect_rules(admin))
        admin.execute_command("ACL", "SETUSER", "retired", "off", ">retired-pw", "+@all", "~*")
        yield server
    finally:
        admin.close()
        server.stop()


BAD_CREDENTIALS = {
    "wrong default-user password": ":wrong-password-1@",
    "wrong ACL-user password": f"{USER}:wrong-password-2@",
    "unknown user": "nobody:wrong-password-3@",
    "disabled user": "retired:retired-pw@",
    "no password": "",
}


@pytest.mark.parametrize("case", list(BAD_CREDENTIALS))
def test_bad_credentials_fail_fast_with_a_typed_error(auth_server: RedisServer, case: str) -> None:
    url = f"redis://{BAD_CREDENTIALS[case]}127.0.0.1:{auth_server.port}"
    started = time.monotonic()
    with pytest.raises(syncprims.SyncPrimsError) as info:
        syncprims.connect(url)
    assert time.monotonic() - started < 2.0
    error = info.value
    # Its own type, a ServerReplyError, not a connection error: it is not retried.
    assert isinstance(error, syncprims.AuthenticationError)
    assert isinstance(error, syncprims.ServerReplyError)
    assert isinstance(error.__cause__, redis.exceptions.AuthenticationError)
    assert re.search(r"(?i)password|auth", str(error))
    for secret in ("wrong-password", "retired-pw"):
        assert secret not in str(error) and secret not in repr(error)


@pytest.mark.parametrize("client_retry", ["redis-py default", "none"])
def test_bad_credentials_on_first_use_fail_within_a_bound(
    auth_server: RedisServer, client_retry: str
) -> None:
    # Credentials that go stale while the client runs (the password is rotated, the old
    # connections are killed): the next use fails with AuthenticationError, within the
    # client's operation bound. redis-py 8 retries the whole connect-and-handshake under the
    # client's own Retry (AuthenticationError is a redis ConnectionError there), so with its
    # default Retry that takes its back-off; with no Retry it is one round trip.
    extra: dict[str, Any] = {} if client_retry != "none" else {"retry": Retry(NoBackoff(), 0)}
    r = redis.Redis(port=auth_server.port, username=USER, password="wrong-password-4", **extra)
    admin = plain_redis(auth_server.port, password=ADMIN_PASSWORD)
    raw_command(admin, "ACL", "SETUSER", USER, ">wrong-password-4")
    client = syncprims.connect(r)
    raw_command(admin, "ACL", "SETUSER", USER, "<wrong-password-4")
    raw_command(admin, "CLIENT", "KILL", "USER", USER)
    admin.close()
    bound = client.operation_timeout
    try:
        started = time.monotonic()
        with pytest.raises(syncprims.AuthenticationError, match=r"(?i)password") as info:
            client.get_lock("app:x").try_lock(lease_time=1)
        elapsed = time.monotonic() - started
    finally:
        client.shutdown()
        r.close()
    assert isinstance(info.value.__cause__, redis.exceptions.AuthenticationError)
    assert "wrong-password-4" not in str(info.value)
    # syncprims does not retry it (it cannot succeed by trying again).
    assert elapsed < (0.5 if client_retry == "none" else bound)


def test_the_right_credentials_work(auth_server: RedisServer) -> None:
    url = f"redis://{USER}:{USER_PASSWORD}@127.0.0.1:{auth_server.port}"
    with syncprims.connect(url) as client:
        lock = client.get_lock("app:auth-ok")
        assert lock.try_lock(lease_time=5)
        lock.unlock()
    # The same user through the application's own client: its credentials are used.
    r = redis.Redis(port=auth_server.port, username=USER, password=USER_PASSWORD)
    with syncprims.connect(r) as client:
        assert USER_PASSWORD not in repr(client) and USER_PASSWORD not in repr(client.config)
        assert client.get_semaphore("app:auth-sem").available_permits() == 0
    r.close()


# -- TLS --------------------------------------------------------------------------------------


@dataclass
class Pki:
    ca: str
    files: dict[str, tuple[str, str]]  # name -> (certificate, key)


def _openssl(*args: str, cwd: Path) -> None:
    done = subprocess.run(
        ["openssl", *args], cwd=cwd, capture_output=True, text=True, timeout=30, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(f"openssl {' '.join(args)} failed:\n{done.stderr}")


def _make_pki(folder: Path) -> Pki:
    """A test CA, two server certificates (one for localhost/127.0.0.1, one for
    wrong.example only) and a client certificate, all EC P-256, valid for two days."""
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    _openssl(
        "req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.crt", "-days", "2",
        "-subj", "/CN=syncprims test CA",
        "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign",
        cwd=folder,
    )  # fmt: skip
    leaves = {
        "server": ("localhost", "subjectAltName=DNS:localhost,IP:127.0.0.1", "serverAuth"),
        "wrong-host": ("wrong.example", "subjectAltName=DNS:wrong.example", "serverAuth"),
        "client": ("syncprims test client", "", "clientAuth"),
    }
    files: dict[str, tuple[str, str]] = {}
    for name, (cn, san, usage) in leaves.items():
        _openssl("req", *ec, "-keyout", f"{name}.key", "-out", f"{name}.csr",
                 "-subj", f"/CN={cn}", cwd=folder)  # fmt: skip
        (folder / f"{name}.ext").write_text(
            f"{san}\n"
            "basicConstraints=critical,CA:FALSE\n"
            "keyUsage=critical,digitalSignature\n"
            f"extendedKeyUsage={usage}\n"
            "subjectKeyIdentifier=hash\n"
            "authorityKeyIdentifier=keyid,issuer\n"
        )
        _openssl(
            "x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
            "-CAcreateserial", "-out", f"{name}.crt", "-days", "2", "-extfile", f"{name}.ext",
            cwd=folder,
        )  # fmt: skip
        files[name] = (str(folder / f"{name}.crt"), str(folder / f"{name}.key"))
    return Pki(ca=str(folder / "ca.crt"), files=files)


@dataclass
class TlsServers:
    pki: Pki
    good: int  # TLS port, certificate for localhost and 127.0.0.1
    wrong_host: int  # TLS port, certificate for wrong.example
    mutual: int  # TLS port, clients must show a certificate signed by the CA
    plain: int  # the plain port of the first server


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TlsServers]:
    """Three TLS servers. Each keeps a plain port too (RedisServer PINGs it to know the
    server is up); the tests use the ``--tls-port``."""
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not on PATH: cannot make test certificates")
    pki = _make_pki(tmp_path_factory.mktemp("pki"))
    servers: list[RedisServer] = []
    ports: list[int] = []
    try:
        for name, auth_clients in (("server", "no"), ("wrong-host", "no"), ("server", "yes")):
            cert, key = pki.files[name]
            port = free_port()
            args = [
                "--tls-port", str(port), "--tls-cert-file", cert, "--tls-key-file", key,
                "--tls-ca-cert-file", pki.ca, "--tls-auth-clients", auth_clients,
            ]  # fmt: skip
            try:
                servers.append(RedisServer(args=args))
            except RuntimeError as error:
                pytest.skip(f"redis-server cannot serve TLS (built without it?): {error}")
            ports.append(port)
        yield TlsServers(pki, ports[0], ports[1], ports[2], servers[0].port)
    finally:
        for server in servers:
            server.stop()


@pytest.fixture
def collect_garbage() -> Iterator[None]:
    yield
    gc.collect()


def _tls_client(host: str, port: int, tls: TlsServers, **options: Any) -> redis.Redis:
    """The application's TLS client (the test CA; 1 s timeouts). Its ``Retry`` makes no
    retries: redis-py retries a refused handshake with the client's ``Retry`` (10 times by
    default), which would only make the refusals below slower."""
    settings: dict[str, Any] = {
        "ssl": True,
        "ssl_ca_certs": tls.pki.ca,
        "socket_timeout": 1,
        "socket_connect_timeout": 1,
        "retry": Retry(NoBackoff(), 0),
    }
    settings.update(options)
    return redis.Redis(host=host, port=port, **settings)


@pytest.mark.usefixtures("collect_garbage")
@pytest.mark.parametrize("host", ["localhost", "127.0.0.1"])
def test_tls_with_the_test_ca_works(tls: TlsServers, host: str) -> None:
    admin = plain_redis(tls.plain)
    r = _tls_client(host, tls.good, tls)
    try:
        with syncprims.connect(r, wait_recheck_interval=10) as client:
            lock = client.get_lock(f"app:tls-{host}")
            lock.lock()
            assert lock.is_held_by_current_thread()
            lock.unlock()
            # The pub/sub connection is TLS too: a waiter is woken by the unlock message.
            lock.lock(lease_time=30)
            wakes_on_message(
                admin, f"redisson_lock__channel:{{{lock.name}}}", lock_waiter(lock), lock.unlock
            )
    finally:
        admin.close()
        r.close()
    # The URL form: redis-py's query parameters.
    url = f"rediss://{host}:{tls.good}?ssl_ca_certs={tls.pki.ca}"
    with syncprims.connect(url) as client:
        assert client.get_lock(f"app:tls-url-{host}").try_lock(lease_time=1)


def _refused(source: str | redis.Redis) -> syncprims.SyncPrimsError:
    started = time.monotonic()
    with pytest.raises(syncprims.TransportError) as info, syncprims.connect(source) as client:
        client.get_lock("app:tls-refused").try_lock(lease_time=1)
    assert time.monotonic() - started < 3.0
    if isinstance(source, redis.Redis):
        source.close()
    return info.value


@pytest.mark.usefixtures("collect_garbage")
def test_tls_refuses_a_certificate_for_another_host(tls: TlsServers) -> None:
    error = _refused(_tls_client("localhost", tls.wrong_host, tls))
    assert isinstance(error, syncprims.RedisConnectionError)
    assert "certificate verify failed" in str(error)
    assert "Hostname mismatch" in str(error)


@pytest.mark.usefixtures("collect_garbage")
def test_tls_refuses_a_certificate_the_system_store_does_not_trust(tls: TlsServers) -> None:
    error = _refused(f"rediss://localhost:{tls.good}")  # no ca_certs: the system store
    # The refusal is bounded with redis-py's default Retry too: it retries the handshake.
    started = time.monotonic()
    default = redis.Redis(host="localhost", port=tls.good, ssl=True, socket_connect_timeout=1)
    with pytest.raises(syncprims.RedisConnectionError):
        syncprims.connect(default, retry_attempts=0)
    bound = Bounds(timeout=1, connect_timeout=1 * 11 + 1 * 10, retry_attempts=0, retry_delay_cap=2)
    assert time.monotonic() - started <= bound.operation_timeout
    default.close()
    assert isinstance(error, syncprims.RedisConnectionError)
    assert "certificate verify failed" in str(error)


@pytest.mark.usefixtures("collect_garbage")
def test_tls_client_certificate(tls: TlsServers) -> None:
    cert, key = tls.pki.files["client"]
    mutual = _tls_client("localhost", tls.mutual, tls, ssl_certfile=cert, ssl_keyfile=key)
    with syncprims.connect(mutual) as client:
        lock = client.get_lock("app:tls-mutual")
        assert lock.try_lock(lease_time=5)
        lock.unlock()
    mutual.close()
    # Without one, the server ends the handshake: a typed error, promptly.
    _refused(_tls_client("localhost", tls.mutual, tls))


@pytest.mark.usefixtures("collect_garbage")
@pytest.mark.parametrize("mismatch", ["plain client, TLS port", "TLS client, plain port"])
def test_tls_and_plain_mismatch_fail_promptly(tls: TlsServers, mismatch: str) -> None:
    if mismatch.startswith("plain"):
        source = redis.Redis(
            port=tls.good, socket_timeout=1, socket_connect_timeout=1, retry=Retry(NoBackoff(), 0)
        )
    else:
        source = _tls_client("localhost", tls.plain, tls)
    # The TLS client gets no ServerHello from a plain server: the reply timeout ends it.
    _refused(source)
