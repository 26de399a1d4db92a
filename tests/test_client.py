"""Client lifecycle, configuration, errors, fork safety and authentication."""

from __future__ import annotations

import os
import signal
import socket
import threading
import time
from typing import Any

import pytest

import syncprims
from syncprims import ClientClosedError, LockNotHeldError, RedisConnectionError
from syncprims._embedded import RedisServer, free_port
from tests.harness import Face, debug_sleep


async def test_connect_to_nothing_fails_fast(face: Face) -> None:
    url = f"redis://127.0.0.1:{free_port()}"
    start = time.monotonic()
    with pytest.raises(RedisConnectionError) as info:
        await face.connect(url, retry_attempts=1, retry_delay=(0.01, 0.02))
    assert time.monotonic() - start < 3
    assert not info.value.maybe_executed
    assert "127.0.0.1" in str(info.value)


async def test_shutdown_is_idempotent_and_final(face: Face, client: Any, name: str) -> None:
    lock = client.get_lock(name)
    a = face.actor()
    await a(lock.lock)
    await a(client.shutdown)
    await a(client.shutdown)
    with pytest.raises(ClientClosedError):
        await a(lock.try_lock)
    with pytest.raises(ClientClosedError):
        await a(lock.is_locked)


async def test_context_manager_shuts_down(face: Face, client: Any, name: str) -> None:
    if face.is_async:

        async def use() -> None:
            async with client as same:
                assert same is client
                await client.get_lock(name).try_lock(lease_time=1)

    else:

        def use() -> None:  # type: ignore[misc]
            with client as same:
                assert same is client
                client.get_lock(name).try_lock(lease_time=1)

    await face.actor()(use)
    with pytest.raises(ClientClosedError):
        await face.call(client.get_lock(name).is_locked)


def test_messages_and_repr_hide_the_password() -> None:
    with RedisServer(args=["--requirepass", "s3cret"]) as server:
        url = server.url.replace("redis://", "redis://:hunter2@")
        with pytest.raises(syncprims.AuthenticationError) as info:
            syncprims.connect(url, retry_attempts=0)
        assert "hunter2" not in str(info.value)
        with syncprims.connect(server.url.replace("redis://", "redis://:s3cret@")) as client:
            assert "s3cret" not in repr(client)


def test_password_and_acl_user() -> None:
    import redis

    with RedisServer(args=["--requirepass", "s3cret"]) as server:
        with syncprims.connect(f"redis://:s3cret@127.0.0.1:{server.port}") as client:
            assert client.get_lock("auth:x").try_lock(lease_time=1)
        with pytest.raises(syncprims.SyncPrimsError) as info:
            syncprims.connect(f"redis://:wrong@127.0.0.1:{server.port}", retry_attempts=0)
        assert "wrong" not in str(info.value)
        r = redis.Redis(port=server.port, password="s3cret")
        r.acl_setuser(
            "locker", enabled=True, passwords=["+pw"], keys=["locks:*", "redisson_*"],
            channels=["*"], commands=["+@all"],
        )  # fmt: skip
        locker = redis.Redis(port=server.port, username="locker", password="pw")
        with syncprims.connect(locker) as client:
            assert client.get_lock("locks:1").try_lock(lease_time=1)
            with pytest.raises(syncprims.ServerReplyError, match=r"NOPERM|permission|key"):
                client.get_lock("other:1").try_lock(lease_time=1)
        locker.close()
        r.close()


def test_redis_url_environment_variable(
    redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("REDIS_URL", redis_server.url)
    with syncprims.connect() as client:
        assert f":{redis_server.port}" in repr(client)


def test_client_is_made_by_connect_only() -> None:
    with pytest.raises(TypeError, match="connect"):
        syncprims.Client("redis://x")
    with pytest.raises(TypeError, match="connect_many"):
        syncprims.MasterSet([])


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_does_not_own_the_parents_lock(real_url: str, name: str) -> None:
    client = syncprims.connect(real_url, lock_watchdog_timeout=1)
    lock = client.get_lock(name)
    lock.lock()
    parent_id = client.id
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: report what it sees through the pipe, then exit at once
        signal.alarm(30)  # a hung child ends (SIGALRM) and the parent's waitpid returns
        code = 0
        try:
            checks = [
                client.id != parent_id,
                not lock.is_held_by_current_thread(),
                not lock.try_lock(),
                len(client._ex.watchdog) == 0,
            ]
            try:
                lock.unlock()
                checks.append(False)
            except LockNotHeldError:
                checks.append(True)
            os.write(write, bytes(int(c) for c in checks))
        except BaseException:
            code = 1
        os._exit(code)
    os.close(write)
    _, status = os.waitpid(pid, 0)
    report = os.read(read, 64)
    os.close(read)
    assert os.waitstatus_to_exitcode(status) == 0
    assert list(report) == [1, 1, 1, 1, 1]
    time.sleep(1.2)  # the parent's watchdog still renews
    assert lock.is_held_by_current_thread()
    lock.unlock()
    client.shutdown()


def test_holder_killed_with_sigkill_frees_after_its_lease(real_url: str, name: str) -> None:
    import subprocess
    import sys

    from tests import processes

    code = (
        "import sys, time, syncprims\n"
        "c = syncprims.connect(sys.argv[1], lock_watchdog_timeout=1)\n"
        "c.get_lock(sys.argv[2]).lock()\n"
        "print('locked', flush=True)\n"
        "time.sleep(60)\n"
    )
    with processes.child(
        [sys.executable, "-c", code, real_url, name], stdout=subprocess.PIPE
    ) as holder:
        assert holder.stdout is not None
        assert holder.stdout.readline().strip() == "locked"
        with syncprims.connect(real_url) as client:
            lock = client.get_lock(name)
            time.sleep(2.0)  # two watchdog timeouts: the holder's watchdog keeps it
            assert lock.is_locked()
            holder.send_signal(signal.SIGKILL)
            holder.wait(10)
            killed = time.monotonic()
            assert lock.try_lock(wait_time=10)
            recovery = time.monotonic() - killed
            assert recovery <= 1.0 + 0.5  # at most the lease (1 s) plus slack
            lock.unlock()


async def test_waiters_survive_a_server_restart(face: Face, name: str) -> None:
    # The restart loses the lock and any message; the pub/sub reconnect wakes the waiter.
    with RedisServer() as server:
        holder_client = await face.connect(server.url)
        waiter_client = await face.connect(server.url)
        a, b = face.actor(), face.actor()
        await a(holder_client.get_lock(name).lock)  # watchdog lease: 30 s
        import asyncio

        waiter = asyncio.ensure_future(b(waiter_client.get_lock(name).try_lock, wait_time=25))
        await asyncio.sleep(0.5)
        server.restart()
        restarted = time.monotonic()
        assert await asyncio.wait_for(waiter, 20)
        assert time.monotonic() - restarted < 10  # long before the 30 s lease
        await b(waiter_client.get_lock(name).unlock)


async def test_a_wait_rides_out_an_outage_until_its_deadline(face: Face, name: str) -> None:
    with RedisServer() as server:
        client = await face.connect(server.url, retry_attempts=1, retry_delay=(0.01, 0.05))
        lock = client.get_lock(name)
        a = face.actor()
        await a(lock.lock, lease_time=5)
        await a(lock.unlock)
        server.kill()
        with pytest.raises(RedisConnectionError):  # no wait: the first error is the answer
            await a(lock.try_lock)
        start = time.monotonic()
        with pytest.raises(RedisConnectionError) as info:  # the wait ends at its deadline
            await a(lock.try_lock, wait_time=0.6)
        assert 0.6 <= time.monotonic() - start < 0.6 + 1.0
        assert not info.value.maybe_executed
        import asyncio

        waiter = asyncio.ensure_future(face.actor()(lock.try_lock, wait_time=20, lease_time=5))
        await asyncio.sleep(1.0)
        assert not waiter.done()
        server.start()
        assert await asyncio.wait_for(waiter, 15)


def test_a_lost_reply_never_counts_a_hold_twice() -> None:
    # Redis is busy (DEBUG SLEEP) past the client's timeout while the acquire is queued.
    with RedisServer(args=["--enable-debug-command", "yes"]) as server:
        import redis

        raw = redis.Redis.from_url(server.url)
        with syncprims.connect(server.url, timeout=0.3) as client:
            lock = client.get_lock("exactly-once")
            lock.lock(lease_time=1)  # loads the script, so the next EVALSHA runs it
            lock.unlock()
            time.sleep(0.2)  # the unlock's latch key is deleted: the pool's connections idle
            before = _server_counts(raw)
            sleeper = debug_sleep(server.url, 1)
            started = time.monotonic()
            with pytest.raises(syncprims.RedisTimeoutError) as info:
                lock.try_lock(lease_time=30)
            took = time.monotonic() - started
            assert info.value.maybe_executed
            sleeper.join(10)
            # The script ran once when Redis woke up; it was not sent again.
            owner = f"{client.id}:{threading.get_ident()}"
            held = raw.hgetall("exactly-once")
            # What the server saw, for a failure to say which case it was (the script not
            # sent, sent and not run, run twice, undone): commands and connections since.
            after = _server_counts(raw)
            seen = {k: after[k] - before.get(k, 0) for k in after if after[k] != before.get(k, 0)}
            assert held == {owner.encode(): b"1"}, (
                f"try_lock took {took:.3f} s and raised {info.value!r}; server since: {seen}"
            )
        raw.close()


def _server_counts(raw: Any) -> dict[str, int]:
    """The server's command calls (``INFO commandstats``), errors and connections so far."""
    counts: dict[str, int] = {}
    for section in ("commandstats", "errorstats"):
        for name, fields in raw.info(section).items():
            counts[name] = int(fields["calls"] if "calls" in fields else fields["count"])
    stats = raw.info("stats")
    for name in ("total_connections_received", "expired_keys", "evicted_keys"):
        counts[name] = int(stats[name])
    return counts


def test_async_abandoned_acquire_is_released() -> None:
    # The asyncio face reads the late reply of a timed-out acquire and gives the lock back.
    import asyncio

    import syncprims.asyncio

    with RedisServer(args=["--enable-debug-command", "yes"]) as server:
        import redis

        raw = redis.Redis.from_url(server.url)

        async def main() -> None:
            client = await syncprims.asyncio.connect(server.url, timeout=0.3)
            lock = client.get_lock("abandoned")
            await lock.lock(lease_time=1)  # loads the script, so the next EVALSHA runs it
            await lock.unlock()
            await asyncio.sleep(0.2)  # the unlock's latch key is deleted: connections idle
            sleeper = debug_sleep(server.url, 1)
            with pytest.raises(syncprims.RedisTimeoutError):
                await lock.try_lock(lease_time=30)
            await asyncio.get_running_loop().run_in_executor(None, sleeper.join, 10)
            deadline = time.monotonic() + 5
            while raw.exists("abandoned") and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            assert raw.exists("abandoned") == 0
            await client.shutdown()

        asyncio.run(main())
        raw.close()


def test_cancelled_async_acquire_leaves_nothing_held(real_url: str, name: str) -> None:
    import asyncio

    import syncprims.asyncio

    async def main() -> None:
        client = await syncprims.asyncio.connect(real_url)
        lock = client.get_lock(name)
        await lock.lock()
        results: list[Any] = []
        for delay in (0, 0.0005, 0.002, 0.01, 0.1):

            async def contender() -> None:
                await lock.try_lock(wait_time=5)

            task = asyncio.ensure_future(contender())
            await asyncio.sleep(delay)
            task.cancel()
            results.append(await asyncio.gather(task, return_exceptions=True))
        await lock.unlock()
        await asyncio.sleep(0.3)  # let any orphan handling finish
        assert not await lock.is_locked()
        await client.shutdown()

    asyncio.run(main())


def test_socket_free_port_helper() -> None:
    port = free_port()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))
