"""Object listeners without a server: the keyspace leaf and the listener registry."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from syncprims._protocol.keyspace import (
    config_value,
    is_keyspace_channel,
    keyspace_channel,
    missing_flags,
)
from syncprims._services.listeners import ObjectListeners
from syncprims.errors import ClientClosedError


def test_channel_names() -> None:
    assert keyspace_channel(0, "orders:42") == "__keyspace@0__:orders:42"
    assert keyspace_channel(3, "{t}x") == "__keyspace@3__:{t}x"
    assert is_keyspace_channel("__keyspace@0__:x")
    assert not is_keyspace_channel("redisson_lock__channel:{x}")


@pytest.mark.parametrize(
    ("current", "missing"),
    [("", "Kgx"), ("E", "Kgx"), ("Kg", "x"), ("xKE", "g"), ("gxK", ""), ("KA", ""), ("EA", "K")],
)
def test_missing_flags(current: str, missing: str) -> None:
    assert missing_flags(current) == missing


def test_config_value_of_every_reply_shape() -> None:
    assert config_value([b"notify-keyspace-events", b"xKE"]) == "xKE"
    assert config_value(["notify-keyspace-events", ""]) == ""
    assert config_value({b"notify-keyspace-events": b"Kgx"}) == "Kgx"
    assert config_value([]) == ""
    with pytest.raises(TypeError):
        config_value(b"xKE")


class _Scheduler:
    def __init__(self) -> None:
        self.queue: list[tuple[Callable[..., object], tuple[Any, ...]]] = []

    def call_soon(self, fn: Callable[..., object], *args: Any) -> None:
        self.queue.append((fn, args))

    def spawn(self, coro: Any) -> None:  # pragma: no cover - not used
        raise AssertionError

    def run(self) -> None:
        queue, self.queue = self.queue, []
        for fn, args in queue:
            fn(*args)


class _Sub:
    def __init__(self, channel: str) -> None:
        self.channel = channel


def test_events_reach_the_listeners_of_their_channel_in_order() -> None:
    scheduler = _Scheduler()
    registry = ObjectListeners(scheduler, database=0)
    seen: list[str] = []
    a = registry.channel("a")
    first = registry.register("a", _Sub(a), lambda n: seen.append("expired " + n), None)
    registry.register("a", _Sub(a), None, lambda n: seen.append("deleted " + n))
    registry.register("b", _Sub(registry.channel("b")), None, lambda n: seen.append("b " + n))
    policy = registry.policy(a)
    for event in (b"expired", b"del", b"set", b"expire"):  # events of other kinds: nothing
        policy(None, event)  # type: ignore[arg-type]  # the rule does not use the Wakeable
    assert seen == []  # nothing runs on the reader
    scheduler.run()
    assert seen == ["expired a", "deleted a"]
    policy(None, b"expired")  # type: ignore[arg-type]
    assert registry.unregister(first, "b") is None  # another object's id
    assert registry.unregister(first, "a") is not None
    scheduler.run()  # removed before its turn: not called
    assert seen == ["expired a", "deleted a"]
    assert registry.count() == 2
    registry.close()
    assert registry.count() == 0
    with pytest.raises(ClientClosedError):
        registry.register("a", _Sub(a), None, print)
