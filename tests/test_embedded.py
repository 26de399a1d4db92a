"""The embedded ``redis-server`` the demo, the bench and the tests start: it owns its port."""

from __future__ import annotations

import pytest
import redis

from syncprims import _embedded
from syncprims._embedded import RedisServer

pytestmark = pytest.mark.real


def _pid(server: RedisServer) -> int:
    client = redis.Redis(port=server.port)
    try:
        return int(client.info("server")["process_id"])
    finally:
        client.close()


def test_a_port_another_server_holds_is_refused_not_shared() -> None:
    # A second server told to use the first one's port cannot bind it: its start must say
    # so, not take the first one's answer as its own (tests on two pytest workers would then
    # talk to one server, and lose it when the other stops it).
    with RedisServer() as first:
        with pytest.raises(RuntimeError, match="taken by another process"):
            RedisServer(port=first.port)
        assert first.process is not None and _pid(first) == first.process.pid


def test_a_picked_port_found_taken_is_picked_again(monkeypatch: pytest.MonkeyPatch) -> None:
    # free_port's answer is only "free a moment ago": when another server has it by the
    # time this one binds, the server starts on another port of its own.
    with RedisServer() as first:
        picks = iter([first.port])
        real = _embedded.free_port
        monkeypatch.setattr(_embedded, "free_port", lambda *a: next(picks, None) or real(*a))
        with RedisServer() as second:
            assert second.port != first.port
            assert second.process is not None and _pid(second) == second.process.pid
        assert first.process is not None and _pid(first) == first.process.pid
