"""Fixtures: real and fake Redis servers on free loopback ports, and the two faces.

* ``redis_server``: one real ``redis-server`` for the session (never port 6379).
* ``fake_server``: fakeredis' TCP server for the session.
* ``url``: parametrized over ``fake`` and ``real``; ``real_url``: the real one only.
* ``face``: parametrized over ``sync`` and ``async`` (see ``tests/harness.py``).
* ``name``: a fresh key name per test.
* ``client``: the face's client of ``url``, default options (``await face.connect(url)``).

``async def`` tests run in a fresh event loop each (no plugin needed; uvloop's with
``SYNCPRIMS_TEST_LOOP=uvloop``, see ``tests.harness.LOOP``); the face's clients and actors
are closed inside that loop when the test ends.

No process the suite starts outlives it: the run exports a fresh ``SYNCPRIMS_TEST_RUN``,
which every process it starts inherits, and fails if one that carries it (or descends from
pytest) still runs once the run's servers are stopped (``tests/processes.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from syncprims._embedded import FakeServer, RedisServer
from syncprims._protocol.kinds import KINDS, make
from tests import processes
from tests.harness import FAKE_URLS, Face, MakeLock, raw_redis
from tests.server_groups import RedisClusterSet, SentinelSet


def pytest_configure(config: pytest.Config) -> None:
    """Mark the run's processes: a fresh value in the run's first process (pytest alone, or
    xdist's controller), which its workers and every process they start inherit."""
    if not hasattr(config, "workerinput"):
        os.environ[processes.RUN_MARKER] = uuid.uuid4().hex


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session) -> None:
    """Fail the run if a process it started still runs once it is over (after the session
    fixtures stopped their servers, and xdist's workers ended: both come before a trylast
    hook), then end those processes. Checked once, in the run's first process."""
    if hasattr(session.config, "workerinput"):
        return
    left = processes.outliving(os.environ[processes.RUN_MARKER], grace=10)
    if not left:
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    lines = ["", f"{len(left)} process(es) started by the test run outlived it (now killed):"]
    lines += [f"  pid {pid}: {command[:200]}" for pid, command in left.items()]
    for line in lines:
        if reporter is not None:
            reporter.write_line(line, red=True)
        else:
            print(line)
    processes.end_all(list(left))
    session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> bool | None:
    """Run ``async def`` tests with ``asyncio.run``, closing the test's face inside its loop."""
    if not inspect.iscoroutinefunction(pyfuncitem.obj):
        return None
    kwargs = {arg: pyfuncitem.funcargs[arg] for arg in pyfuncitem._fixtureinfo.argnames}
    face = pyfuncitem.funcargs.get("face")  # requested by the test or by its ``client``

    async def main() -> None:
        try:
            for arg, value in list(kwargs.items()):
                if isinstance(value, PendingClient):
                    kwargs[arg] = await value.face.connect(value.url)
            await pyfuncitem.obj(**kwargs)
        finally:
            if isinstance(face, Face):
                await face.close()

    asyncio.run(main())
    return True


@dataclass(frozen=True)
class PendingClient:
    """What the ``client`` fixture gives: a client is made in the test's event loop, and a
    fixture runs before that loop exists, so :func:`pytest_pyfunc_call` connects it there."""

    face: Face
    url: str


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    server = RedisServer()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def fake_server() -> Iterator[FakeServer]:
    server = FakeServer()
    FAKE_URLS.add(server.url)
    yield server
    server.stop()


@pytest.fixture(scope="session")
def redis_cluster() -> Iterator[RedisClusterSet]:
    cluster = RedisClusterSet(masters=3, replicas=1)
    yield cluster
    cluster.stop()


@pytest.fixture(scope="session")
def sentinels() -> Iterator[SentinelSet]:
    """A master, a replica and three sentinels, shared by the session's tests."""
    group = SentinelSet()
    yield group
    group.stop()


BACKENDS = {"fake": "fake_server", "real": "redis_server", "cluster": "redis_cluster"}


@pytest.fixture(scope="module")
def five() -> Iterator[list[RedisServer]]:
    """Five independent masters, shared by a module's tests (for RedLock and MultiLock)."""
    with contextlib.ExitStack() as stack:  # each one stopped, even if a later one fails
        yield [stack.enter_context(RedisServer()) for _ in range(5)]


@pytest.fixture
def doomed() -> Iterator[list[RedisServer]]:
    """Five masters of one test's own, which it may kill, pause or restart."""
    with contextlib.ExitStack() as stack:
        yield [stack.enter_context(RedisServer()) for _ in range(5)]


REAL_SERVER_FIXTURES = {"redis_server", "real_url", "redis_cluster", "sentinels", "five", "doomed"}
"""The fixtures that start real servers: a test using one is marked ``real``."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark ``real`` (and ``cluster``, ``sentinel``) every test that uses a real server's
    fixture, ``url[real]`` and ``url[cluster]`` included, at collection, so that ``-m real``
    selects them all (a marker applied by a fixture at set-up comes too late for ``-m``): the
    run of a server matrix cell (``SYNCPRIMS_TEST_SERVER=... pytest -m real``)."""
    for item in items:
        names = set(getattr(item, "fixturenames", ()))
        callspec = getattr(item, "callspec", None)
        backend = callspec.params.get("url") if callspec is not None else None
        if names & REAL_SERVER_FIXTURES or backend in ("real", "cluster"):
            item.add_marker(pytest.mark.real)
        if "redis_cluster" in names or backend == "cluster":
            item.add_marker(pytest.mark.cluster)
        if "sentinels" in names:
            item.add_marker(pytest.mark.sentinel)


@pytest.fixture(params=list(BACKENDS))
def url(request: pytest.FixtureRequest) -> str:
    """A server of each backend: fakeredis, a real redis-server, a real 3-master cluster
    (marked ``real``/``cluster`` at collection, by :func:`pytest_collection_modifyitems`)."""
    server: Any = request.getfixturevalue(BACKENDS[request.param])
    return str(server.url)


@pytest.fixture
def real_url(redis_server: RedisServer) -> str:
    return redis_server.url


@pytest.fixture
def raw(url: str) -> Iterator[Any]:
    """A plain redis-py client of the test's server, to read and write keys directly."""
    client = raw_redis(url)
    yield client
    client.close()


@pytest.fixture(params=["sync", "async"])
def face(request: pytest.FixtureRequest) -> Face:
    return Face(request.param)


LOCK_KINDS: dict[str, MakeLock] = {
    kind.name: functools.partial(make, kind) for kind in KINDS.values() if kind.generic
}
"""The kinds that behave as an RLock does (the table of kinds says which), each made as a
user makes it: ``LOCK_KINDS[name](client, name, **options)``."""


@pytest.fixture(params=list(LOCK_KINDS))
def make_lock(request: pytest.FixtureRequest) -> MakeLock:
    """Every lock kind that behaves like an RLock (the generic lock tests run on each)."""
    return LOCK_KINDS[request.param]


@pytest.fixture
def client(face: Face, url: str) -> PendingClient:
    """The face's client of ``url`` with default options, as ``await face.connect(url)``
    would give it: an ``async def`` test receives the client itself, connected in its event
    loop before the test body runs and shut down with the face when the test ends."""
    return PendingClient(face, url)


@pytest.fixture
def real_client(face: Face, real_url: str) -> PendingClient:
    """As :func:`client`, of the session's real redis-server (a test that needs one)."""
    return PendingClient(face, real_url)


@pytest.fixture
def name() -> str:
    return f"test:{uuid.uuid4().hex[:12]}"
