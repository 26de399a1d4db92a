"""CountDownLatch on both faces, fakeredis and real Redis."""

from __future__ import annotations

import asyncio
import multiprocessing
import time
from typing import Any

import pytest

import syncprims
from tests import processes
from tests.harness import Face, raw_pubsub, raw_redis, within


async def test_count_downs_open_it_for_every_waiter(face: Face, client: Any, name: str) -> None:
    latch = client.get_count_down_latch(name)
    a = face.actor()
    assert await a(latch.try_set_count, 3)
    assert not await a(latch.try_set_count, 5)
    assert await a(latch.get_count) == 3
    waiters = [asyncio.ensure_future(face.actor()(latch.wait, 20)) for _ in range(4)]
    await asyncio.sleep(0.2)
    await a(latch.count_down)
    await a(latch.count_down)
    await asyncio.sleep(0.2)
    assert not any(w.done() for w in waiters)
    opened = time.monotonic()
    await a(latch.count_down)
    assert await within(10, asyncio.gather(*waiters)) == [True] * 4
    assert time.monotonic() - opened < 2  # woken by the message
    assert await a(latch.get_count) == 0
    assert await a(latch.wait, 0)  # open: returns at once
    await a(latch.count_down)  # counting down an open latch changes nothing
    assert await a(latch.get_count) == 0


async def test_wait_times_out_on_time(face: Face, client: Any, name: str) -> None:
    latch = client.get_count_down_latch(name)
    a = face.actor()
    await a(latch.try_set_count, 1)
    start = time.monotonic()
    assert not await a(latch.wait, 0.4)
    assert 0.4 <= time.monotonic() - start < 2.4
    assert not await a(latch.await_, 0.1)  # Redisson's name


async def test_delete_releases_waiters(face: Face, client: Any, name: str) -> None:
    latch = client.get_count_down_latch(name)
    a = face.actor()
    await a(latch.try_set_count, 2)
    waiter = asyncio.ensure_future(face.actor()(latch.wait, 20))
    await asyncio.sleep(0.2)
    assert await a(latch.delete)
    assert await within(10, waiter)
    assert not await a(latch.delete)


@pytest.mark.parametrize(("bad", "error"), [(-1, ValueError), ("3", TypeError)])
async def test_bad_counts(face: Face, client: Any, name: str, bad: Any, error: Any) -> None:
    with pytest.raises(error):
        await face.actor()(client.get_count_down_latch(name).try_set_count, bad)


def _waiting_process(url: str, name: str, out: Any) -> None:
    with syncprims.connect(url) as client:
        out.put(client.get_count_down_latch(name).wait(30))


def test_processes_wait_for_the_count_downs(real_url: str, name: str) -> None:
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    procs = [ctx.Process(target=_waiting_process, args=(real_url, name, out)) for _ in range(3)]
    with syncprims.connect(real_url) as client, processes.ending(procs):
        latch = client.get_count_down_latch(name)
        latch.try_set_count(2)
        for p in procs:
            p.start()
        time.sleep(1.5)  # they are waiting
        latch.count_down()
        latch.count_down()
        assert [out.get(timeout=30) for _ in procs] == [True, True, True]
        for p in procs:
            p.join(10)


def test_layout_and_messages(url: str, name: str) -> None:
    raw = raw_redis(url)
    pubsub = raw_pubsub(raw)
    pubsub.subscribe(f"redisson_countdownlatch__channel__{{{name}}}")
    with syncprims.connect(url) as client:
        latch = client.get_count_down_latch(name)
        latch.try_set_count(2)
        assert raw.get(name) == b"2"
        latch.count_down()
        latch.count_down()
        assert raw.exists(name) == 0
    got: list[Any] = []
    deadline = time.monotonic() + 3
    while len(got) < 2 and time.monotonic() < deadline:
        message = pubsub.get_message(ignore_subscribe_messages=True, timeout=0.05)
        if message is not None:
            got.append(message["data"])
    assert got == [b"1", b"0"]  # a new count, then open
    pubsub.close()
    raw.close()
