"""Object listeners: ``add_listener(on_expired=..., on_deleted=...)`` and
``remove_listener(id)`` on keyspace notifications (Redisson's ``RObservable``), both faces,
on a real server and on a cluster."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
import uuid
from typing import Any

import pytest
import redis

from syncprims import ClientClosedError, ServerReplyError
from syncprims._embedded import FakeServer, RedisServer
from tests.harness import Face, raw_redis
from tests.server_groups import RedisClusterSet

BOUND = 5.0
"""Seconds any one event may take to arrive (a hang fails the test instead)."""


class Events:
    """What the callbacks saw, as ``(event, name)``, and a way to wait for a count of them."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str]] = []
        self.threads: set[str] = set()
        self._changed = threading.Condition()

    def on(self, event: str) -> Any:
        def callback(name: str) -> None:
            with self._changed:
                self.seen.append((event, name))
                self.threads.add(threading.current_thread().name)
                self._changed.notify_all()

        return callback

    async def wait_for(self, count: int, bound: float = BOUND) -> list[tuple[str, str]]:
        """The events once there are ``count``; fails the test after ``bound`` seconds."""

        def wait() -> bool:
            with self._changed:
                return self._changed.wait_for(lambda: len(self.seen) >= count, bound)

        if not await asyncio.get_running_loop().run_in_executor(None, wait):
            pytest.fail(f"{count} event(s) expected within {bound} s, got {self.seen}")
        return list(self.seen)


async def test_a_deleted_lock_fires_on_deleted(face: Face, real_url: str, name: str) -> None:
    client, other = await face.connect(real_url), await face.connect(real_url)
    events = Events()
    lock = client.get_lock(name)
    listener = await face.call(
        lock.add_listener, on_deleted=events.on("deleted"), on_expired=events.on("expired")
    )
    assert isinstance(listener, int)
    theirs = other.get_lock(name)  # another client's lock: its unlock deletes the key
    a = face.actor()
    await a(theirs.lock)
    await a(theirs.unlock)
    assert await events.wait_for(1) == [("deleted", name)]
    if face.is_async:
        assert events.threads == {threading.main_thread().name}  # on the client's loop
    else:
        assert all(thread.endswith("-services") for thread in events.threads)
    await a(theirs.lock)
    assert await face.call(theirs.force_unlock)
    assert await events.wait_for(2) == [("deleted", name)] * 2
    assert lock.remove_listener(listener)


async def test_an_expired_key_fires_on_expired(
    face: Face, real_url: str, real_client: Any, name: str
) -> None:
    events = Events()
    lock = real_client.get_lock(name)
    await face.call(lock.add_listener, on_expired=events.on("expired"))
    raw = raw_redis(real_url)
    try:
        raw.hset(name, "holder", 1)
        raw.pexpire(name, 50)
        assert await events.wait_for(1) == [("expired", name)]
        raw.hset(name, "holder", 1)
        raw.delete(name)  # no on_deleted given: nothing
        a = face.actor()
        await a(lock.lock, 0.1)  # a lease that runs out
        assert await events.wait_for(2) == [("expired", name)] * 2
    finally:
        raw.close()


async def test_remove_listener_stops_delivery(face: Face, real_client: Any, name: str) -> None:
    kept, removed = Events(), Events()
    lock = real_client.get_lock(name)
    kept_id = await face.call(lock.add_listener, on_deleted=kept.on("deleted"))
    removed_id = await face.call(lock.add_listener, on_deleted=removed.on("deleted"))
    assert kept_id != removed_id
    assert not real_client.get_lock(name + ":other").remove_listener(removed_id)  # not its object
    assert lock.remove_listener(removed_id)
    assert not lock.remove_listener(removed_id)  # already removed
    with pytest.raises(TypeError):
        lock.remove_listener("1")
    a = face.actor()
    await a(lock.lock)
    await a(lock.unlock)
    assert await kept.wait_for(1) == [("deleted", name)]
    await asyncio.sleep(0.2)  # the removed listener had the same event: it was not told
    assert removed.seen == []
    assert lock.remove_listener(kept_id)
    await a(lock.lock)
    await a(lock.unlock)
    await asyncio.sleep(0.3)
    assert kept.seen == [("deleted", name)]


async def test_a_callback_that_raises_does_not_stop_later_deliveries(
    face: Face, real_client: Any, name: str, caplog: pytest.LogCaptureFixture
) -> None:
    events = Events()
    calls = 0

    def failing(deleted: str) -> None:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise RuntimeError("the application's callback failed")
        events.on("deleted")(deleted)

    lock = real_client.get_lock(name)
    with caplog.at_level(logging.ERROR, logger="syncprims.listeners"):
        await face.call(lock.add_listener, on_deleted=failing)
        other = real_client.get_semaphore(name + ":s")  # another object's listener is unharmed
        await face.call(other.try_set_permits, 1)
        await face.call(other.add_listener, on_deleted=events.on("semaphore deleted"))
        a = face.actor()
        await a(lock.lock)
        await a(lock.unlock)  # the first callback raises
        await face.call(other.delete)
        await a(lock.lock)
        await a(lock.unlock)  # the next is delivered
        seen = await events.wait_for(2)
    assert sorted(seen) == [("deleted", name), ("semaphore deleted", name + ":s")]
    assert calls == 2
    assert "the application's callback failed" in caplog.text
    assert f"on_deleted listener 1 of {name!r} raised" in caplog.text


async def test_arguments_are_checked(face: Face, real_client: Any, name: str) -> None:
    lock = real_client.get_lock(name)
    with pytest.raises(TypeError, match="needs on_expired or on_deleted"):
        await face.call(lock.add_listener)
    with pytest.raises(TypeError, match="on_deleted must be callable"):
        await face.call(lock.add_listener, on_deleted="print")
    with pytest.raises(TypeError, match="configure must be a bool"):
        await face.call(lock.add_listener, on_deleted=print, configure=1)


async def test_flags_already_set_are_kept(face: Face, real_url: str, name: str) -> None:
    admin = raw_redis(real_url)
    try:
        admin.config_set("notify-keyspace-events", "El")
        client = await face.connect(real_url)
        await face.call(client.get_lock(name).add_listener, on_deleted=print)
        value = admin.config_get("notify-keyspace-events")["notify-keyspace-events"]
        assert sorted(value) == sorted("EKglx")
        admin.config_set("notify-keyspace-events", "KA")  # "A" holds g and x: no change
        await face.call(client.get_lock(name).add_listener, on_expired=print)
        value = admin.config_get("notify-keyspace-events")["notify-keyspace-events"]
        assert sorted(value) == sorted("KA")
    finally:
        admin.close()


@pytest.mark.parametrize("rule", ["-config", "-config|set"])
async def test_a_refused_config_raises_a_server_reply_error(
    face: Face, redis_server: RedisServer, name: str, rule: str
) -> None:
    user = f"listener-{uuid.uuid4().hex[:8]}"
    admin = redis.Redis(port=redis_server.port)
    admin.acl_setuser(
        user, enabled=True, passwords=["+pw"], keys=["*"], channels=["*"],
        commands=["+@all", rule],
    )  # fmt: skip
    try:
        admin.config_set("notify-keyspace-events", "")
        client = await face.connect(f"redis://{user}:pw@127.0.0.1:{redis_server.port}")
        lock = client.get_lock(name)
        events = Events()
        step = "SET" if rule == "-config|set" else "GET"
        with pytest.raises(ServerReplyError, match=f"Redis refused CONFIG {step} ") as info:
            await face.call(lock.add_listener, on_deleted=events.on("deleted"))
        assert info.value.code == "NOPERM"
        assert "configure=False" in str(info.value)
        assert admin.config_get("notify-keyspace-events")["notify-keyspace-events"] == ""
        # An operator enables the events; the listener then asks for no CONFIG.
        admin.config_set("notify-keyspace-events", "Kgx")
        await face.call(lock.add_listener, on_deleted=events.on("deleted"), configure=False)
        a = face.actor()
        await a(lock.lock)
        await a(lock.unlock)
        assert await events.wait_for(1) == [("deleted", name)]
    finally:
        admin.acl_deluser(user)
        admin.close()


async def test_fakeredis_delivers_with_configure_false(
    face: Face, fake_server: FakeServer, name: str
) -> None:
    # fakeredis has no CONFIG, and publishes keyspace events: configure=False is for it too.
    client = await face.connect(fake_server.url)
    events = Events()
    lock = client.get_lock(name)
    await face.call(lock.add_listener, on_deleted=events.on("deleted"), configure=False)
    a = face.actor()
    await a(lock.lock)
    await a(lock.unlock)
    assert await events.wait_for(1) == [("deleted", name)]


async def test_listeners_are_removed_at_shutdown(face: Face, real_url: str, name: str) -> None:
    client, other = await face.connect(real_url), await face.connect(real_url)
    events = Events()
    lock = client.get_lock(name)
    listener = await face.call(lock.add_listener, on_deleted=events.on("deleted"))
    await face.call(client.shutdown)
    with pytest.raises(ClientClosedError):
        await face.call(lock.add_listener, on_deleted=events.on("deleted"))
    assert not lock.remove_listener(listener)  # gone with the client
    a = face.actor()
    theirs = other.get_lock(name)
    await a(theirs.lock)
    await a(theirs.unlock)
    await asyncio.sleep(0.3)
    assert events.seen == []


async def test_listeners_on_a_cluster(face: Face, redis_cluster: RedisClusterSet) -> None:
    # Keyspace events come from the node that holds the key, on classic pub/sub only: a
    # tagged name (whose channel hashes to the key's slot, where a sharded subscription
    # would be chosen) and plain names on other nodes' slots.
    client = await face.connect(redis_cluster.url)
    tag = uuid.uuid4().hex[:6]
    names = [f"{{{tag}}}:lock", *(f"listen:{i}:{tag}" for i in range(4))]
    deleted, expired = Events(), Events()
    for lock_name in names:
        await face.call(
            client.get_lock(lock_name).add_listener,
            on_deleted=deleted.on("deleted"),
            on_expired=expired.on("expired"),
        )
    a = face.actor()
    for lock_name in names:
        lock = client.get_lock(lock_name)
        await a(lock.lock)
        await a(lock.unlock)
    assert sorted(await deleted.wait_for(len(names))) == sorted(("deleted", n) for n in names)
    started = time.monotonic()
    await a(client.get_lock(names[0]).lock, 0.1)
    assert await expired.wait_for(1) == [("expired", names[0])]
    assert time.monotonic() - started < BOUND
