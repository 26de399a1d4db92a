"""Fixtures the fault tests share: a fault proxy in front of the session's server, and a
plain redis-py client straight to it (past the proxy) to look at what Redis holds."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

from syncprims._embedded import RedisServer

from .proxy import FaultProxy


@pytest.fixture
def proxy(redis_server: RedisServer) -> Iterator[FaultProxy]:
    p = FaultProxy(redis_server.port)
    yield p
    p.close()


@pytest.fixture
def raw(redis_server: RedisServer) -> Iterator[redis.Redis]:
    r = redis.Redis(port=redis_server.port)
    yield r
    r.close()
