"""The fuzz server (one for the package, flushed by every example) and the two faces."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

import syncprims
import syncprims.asyncio
from syncprims._embedded import RedisServer
from tests.faults.fuzz.helpers import (
    Driver,
)
from tests.harness import raw_redis


@pytest.fixture(scope="package")
def fuzz_server() -> Iterator[RedisServer]:
    """A redis-server of this module's own: every example flushes it."""
    server = RedisServer()
    yield server
    server.stop()


@pytest.fixture(scope="package")
def fuzz_loop() -> Iterator[asyncio.AbstractEventLoop]:
    loop = asyncio.new_event_loop()
    yield loop
    loop.run_until_complete(loop.shutdown_asyncgens())
    loop.run_until_complete(loop.shutdown_default_executor())
    loop.close()


@pytest.fixture(scope="package", params=["sync", "async"])
def drv(
    request: pytest.FixtureRequest,
    fuzz_server: RedisServer,
    fuzz_loop: asyncio.AbstractEventLoop,
) -> Iterator[Driver]:
    face: str = request.param
    client: Any
    if face == "sync":
        client = syncprims.connect(fuzz_server.url)
    else:
        client = fuzz_loop.run_until_complete(syncprims.asyncio.connect(fuzz_server.url))
    raw = raw_redis(fuzz_server.url)
    yield Driver(face, client, fuzz_loop, raw)
    if face == "sync":
        client.shutdown()
    else:
        fuzz_loop.run_until_complete(client.shutdown())
    raw.close()


@pytest.fixture(scope="package")
def sync_drv(fuzz_server: RedisServer, fuzz_loop: asyncio.AbstractEventLoop) -> Iterator[Driver]:
    """The sync face only (for the known-bug pins: the bugs live in the shared core)."""
    client = syncprims.connect(fuzz_server.url)
    raw = raw_redis(fuzz_server.url)
    yield Driver("sync", client, fuzz_loop, raw)
    client.shutdown()
    raw.close()
