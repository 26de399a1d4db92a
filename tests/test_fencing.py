"""The storage side of fencing (issue 30 item 8): ``syncprims.fencing`` refuses, in Redis, a
write whose token is lower than the highest accepted; the same rule as one conditional
``UPDATE`` in PostgreSQL (docs/fenced-lock.md), tested against a real server. A stale holder
(paused past its lease while another took the lock) cannot overwrite the newer holder's
write."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis
import redis.asyncio

import syncprims
import syncprims.asyncio
from syncprims import fencing
from syncprims._embedded import RedisServer

pytestmark = pytest.mark.real

POSTGRES = os.environ.get("SYNCPRIMS_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test")


def _two_tokens(client: syncprims.Client, name: str) -> tuple[int, int]:
    """A stale holder's token and the newer holder's: the first hold is broken (as a lease
    running out under a paused holder would) and the lock taken again."""
    lock = client.get_fenced_lock(name)
    stale = lock.lock_and_get_token(lease_time=30)
    lock.force_unlock()
    newer = lock.lock_and_get_token(lease_time=30)
    lock.unlock()
    assert newer > stale
    return stale, newer


def test_a_stale_token_cannot_overwrite_a_newer_write(redis_server: RedisServer) -> None:
    app = redis.Redis(port=redis_server.port)
    key = f"fenced:{uuid.uuid4().hex}"
    with syncprims.connect(app) as client:
        stale, newer = _two_tokens(client, f"{key}:lock")
    assert fencing.fenced_set(app, key, "newer", newer, writer="b")
    assert not fencing.fenced_set(app, key, "stale", stale, writer="a")  # refused
    assert app.get(key) == b"newer"
    assert fencing.get_fence(app, key) == newer
    assert fencing.fenced_set(app, key, "newer again", newer, writer="b")  # the same holder
    assert app.get(key) == b"newer again"
    # The same token from another writer, or from none (after an empty restart a stale
    # holder can carry the newer holder's token): refused.
    assert not fencing.fenced_set(app, key, "same token", newer, writer="a")
    assert not fencing.fenced_set(app, key, "same token", newer)
    assert app.get(key) == b"newer again"
    assert fencing.fenced_set(app, key, "next", newer + 1, px=60_000)
    assert 0 < app.pttl(key) <= 60_000
    assert fencing.clear_fence(app, key) == 2
    assert fencing.get_fence(app, key) == 0
    app.close()


def test_the_script_is_loaded_when_flushed(redis_server: RedisServer) -> None:
    app = redis.Redis(port=redis_server.port)
    key = f"fenced:{uuid.uuid4().hex}"
    app.script_flush()
    assert fencing.fenced_set(app, key, 1, 5)
    assert fencing.fenced_set(app, key, 2, 6)  # EVALSHA now
    assert app.get(key) == b"2"
    app.close()


async def test_the_asyncio_helpers(redis_server: RedisServer) -> None:
    app = redis.asyncio.Redis(port=redis_server.port)
    key = f"fenced:{uuid.uuid4().hex}"
    async with await syncprims.asyncio.connect(app) as client:
        lock = client.get_fenced_lock(f"{key}:lock")
        token = await lock.lock_and_get_token(lease_time=30)
        assert await fencing.afenced_set(app, key, "mine", token, writer="w")
        assert await fencing.afenced_set(app, key, "mine", token, writer="w")
        assert not await fencing.afenced_set(app, key, "older", token - 1)
        assert not await fencing.afenced_set(app, key, "other", token, writer="x")
        assert await fencing.aget_fence(app, key) == token
        await lock.unlock()
    assert await app.get(key) == b"mine"
    await app.aclose()


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (("v", -1), ValueError),
        (("v", True), TypeError),
        (("v", 1.5), TypeError),
        ((None, 1), TypeError),
        (("v", 1, ""), TypeError),
        (("v", 1, 7), TypeError),
    ],
)
def test_bad_input_sends_nothing(
    redis_server: RedisServer, args: tuple[Any, ...], error: type[Exception]
) -> None:
    app = redis.Redis(port=redis_server.port)
    key = f"fenced:{uuid.uuid4().hex}"
    value, token, *writer = args
    with pytest.raises(error):
        fencing.fenced_set(app, key, value, token, writer=writer[0] if writer else None)
    with pytest.raises(ValueError, match="px"):
        fencing.fenced_set(app, key, "v", 1, px=0)
    assert app.exists(key, fencing.fence_key(key)) == 0
    app.close()


@pytest.fixture
def postgres() -> Iterator[Any]:
    psycopg = pytest.importorskip("psycopg")
    try:
        conn = psycopg.connect(POSTGRES, connect_timeout=3, autocommit=True)
    except psycopg.OperationalError as error:
        pytest.skip(
            f"NOTICE: no PostgreSQL at {POSTGRES} ({error}); the SQL fencing pattern is not "
            "tested here (set SYNCPRIMS_TEST_POSTGRES to a server's URL)"
        )
    table = f"fenced_{uuid.uuid4().hex[:12]}"
    conn.execute(
        f"CREATE TABLE {table} (id text PRIMARY KEY, value text, fence bigint NOT NULL "
        "DEFAULT 0, writer text NOT NULL DEFAULT '', version bigint NOT NULL DEFAULT 0)"
    )
    try:
        yield conn, table
    finally:
        conn.execute(f"DROP TABLE {table}")
        conn.close()


def test_fenced_writes_in_sql(redis_server: RedisServer, postgres: tuple[Any, str]) -> None:
    """The pattern of docs/fenced-lock.md: one conditional ``UPDATE``; a row count of 0
    means refused. An equal token is taken from the same writer only; a read-modify-write
    also checks the version it read."""
    conn, table = postgres
    conn.execute(f"INSERT INTO {table} (id, value) VALUES ('report', 'initial')")
    update = (
        f"UPDATE {table} SET value = %(value)s, fence = %(token)s, writer = %(writer)s, "
        "version = version + 1 WHERE id = %(id)s AND (fence < %(token)s OR (fence = "
        "%(token)s AND writer = %(writer)s))"
    )

    def write(value: str, token: int, writer: str) -> int:
        params = {"value": value, "token": token, "writer": writer, "id": "report"}
        return int(conn.execute(update, params).rowcount)

    with syncprims.connect(redis_server.url) as client:
        stale, newer = _two_tokens(client, f"fenced:{uuid.uuid4().hex}")
    assert write("newer", newer, "b") == 1
    assert write("stale", stale, "a") == 0  # refused
    assert write("again", newer, "b") == 1  # the same holder, again
    assert write("same token", newer, "a") == 0  # a repeated token from another holder
    row = conn.execute(f"SELECT value, fence FROM {table} WHERE id = 'report'").fetchone()
    assert row == ("again", newer)
    # Read-modify-write: the write names the version it read.
    value, version = conn.execute(
        f"SELECT value, version FROM {table} WHERE id = 'report'"
    ).fetchone()
    rmw = f"{update} AND version = %(version)s"
    params = {"value": value + "+1", "token": newer, "writer": "b", "id": "report"}
    conn.execute(f"UPDATE {table} SET version = version + 1 WHERE id = 'report'")  # another write
    assert conn.execute(rmw, {**params, "version": version}).rowcount == 0  # read was stale
    assert conn.execute(rmw, {**params, "version": version + 1}).rowcount == 1


def test_durable_tokens_stay_higher_across_an_empty_restart_and_eviction() -> None:
    """Redisson's counter starts again from 1 after an empty restart (a stale holder's token
    can equal a later holder's); a durable token stays above every earlier one."""
    with RedisServer() as server:
        with syncprims.connect(server.url) as client:
            plain = client.get_fenced_lock("plain")
            durable = client.get_fenced_lock("durable", durable_tokens=True)
            before = [lock.lock_and_get_token(lease_time=30) for lock in (plain, durable)]
            assert before[0] == 1 and before[1] > 1_700_000_000_000_000  # microseconds
            for lock in (plain, durable):
                lock.unlock()
            assert durable.lock_and_get_token(lease_time=30) > before[1]  # reentry counts
            assert durable.lock_and_get_token(lease_time=30) > before[1]
            durable.unlock()
            durable.unlock()
        server.restart()  # empty: no persistence
        with syncprims.connect(server.url) as client:
            plain = client.get_fenced_lock("plain")
            durable = client.get_fenced_lock("durable", durable_tokens=True)
            assert plain.lock_and_get_token(lease_time=30) == before[0]  # repeated: not durable
            after = durable.lock_and_get_token(lease_time=30)
            assert after > before[1]
            durable.unlock()
            raw = redis.Redis(port=server.port)
            raw.delete("redisson_lock_token:{durable}")  # as an eviction would
            assert durable.lock_and_get_token(lease_time=30) > after
            durable.unlock()
            raw.close()
