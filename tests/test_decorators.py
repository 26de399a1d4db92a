"""Locks as decorators (``@lock``) and ``@client.synchronized(name)``, in both faces."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator

import pytest

import syncprims
import syncprims.asyncio
from syncprims import LockTimeoutError
from syncprims._protocol.templates import lock_namer


@pytest.fixture
def client(real_url: str) -> Iterator[syncprims.Client]:
    with syncprims.connect(real_url) as client:
        yield client


# -- lock names per call (pure) ---------------------------------------------------------------


def ship(order_id: int, carrier: str = "ups", *, fast: bool = False) -> None: ...


def test_a_template_names_the_lock_from_the_arguments() -> None:
    namer = lock_namer("orders:{order_id}:{carrier}", ship)
    assert namer((42,), {}) == "orders:42:ups"
    assert namer((), {"order_id": 7, "carrier": "dhl"}) == "orders:7:dhl"
    assert lock_namer("jobs:{fast}", ship)((1,), {"fast": True}) == "jobs:True"
    assert lock_namer("all-orders", ship)((1,), {}) == "all-orders"


def test_a_template_may_reach_into_an_argument() -> None:
    class User:
        id = 5

    def rename(user: User, names: dict[str, str]) -> None: ...

    assert lock_namer("users:{user.id}:{names[new]}", rename)((User(), {"new": "x"}), {}) == (
        "users:5:x"
    )


def test_a_callable_names_the_lock() -> None:
    namer = lock_namer(lambda order_id, **_: f"orders:{order_id}", ship)
    assert namer((), {"order_id": 3, "carrier": "x"}) == "orders:3"
    with pytest.raises(TypeError, match="not str"):
        lock_namer(lambda *a, **k: 3, ship)((1,), {})


@pytest.mark.parametrize("template", ["orders:{id}", "orders:{}", "orders:{0}", "orders:{"])
def test_a_bad_template_fails_at_decoration(template: str) -> None:
    with pytest.raises(TypeError):
        lock_namer(template, ship)


def test_a_name_of_another_type_fails() -> None:
    with pytest.raises(TypeError, match="str template or a callable"):
        lock_namer(42, ship)


# -- the sync face ------------------------------------------------------------------------------


def test_a_lock_decorates_a_function(client: syncprims.Client, name: str) -> None:
    lock = client.get_lock(name)

    @lock
    def work(x: int) -> int:
        """Doc."""
        assert lock.is_held_by_current_thread()
        return x * 2

    assert work(21) == 42
    assert work.__name__ == "work"
    assert work.__doc__ == "Doc."
    assert not lock.is_locked()

    @lock
    def fail() -> None:
        raise KeyError("boom")

    with pytest.raises(KeyError):
        fail()
    assert not lock.is_locked()


def test_decorated_calls_exclude_each_other(client: syncprims.Client, name: str) -> None:
    inside = 0
    most = 0
    guard = threading.Lock()

    @client.get_fair_lock(name)
    def work() -> None:
        nonlocal inside, most
        with guard:
            inside += 1
            most = max(most, inside)
        time.sleep(0.02)
        with guard:
            inside -= 1

    threads = [threading.Thread(target=work) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert most == 1


def test_multi_locks_and_semaphores_decorate(client: syncprims.Client, name: str) -> None:
    both = syncprims.MultiLock(client.get_lock(name + ":a"), client.get_lock(name + ":b"))
    sem = client.get_semaphore(name + ":sem")
    sem.try_set_permits(1)

    @both
    @sem
    def work() -> tuple[bool, int]:
        return both.is_held_by_current_thread(), sem.available_permits()

    assert work() == (True, 0)
    assert not both.is_locked()
    assert sem.available_permits() == 1


def test_the_sync_face_refuses_async_functions(client: syncprims.Client, name: str) -> None:
    async def work() -> None: ...

    with pytest.raises(TypeError, match="plain functions"):
        client.get_lock(name)(work)  # a Callable[P, T] to the type checker
    with pytest.raises(TypeError, match="plain functions"):
        client.synchronized(name)(work)


def test_synchronized_names_a_lock_per_call(client: syncprims.Client, name: str) -> None:
    seen: list[bool] = []

    @client.synchronized(name + ":{order_id}:{carrier}")
    def ship(order_id: int, carrier: str = "ups") -> int:
        seen.append(client.get_lock(f"{name}:{order_id}:ups").is_held_by_current_thread())
        return order_id

    assert ship(42) == 42
    assert seen == [True]
    assert not client.get_lock(f"{name}:42:ups").is_locked()

    @client.synchronized(lambda user_id: f"{name}:users:{user_id}", kind="fair", lease_time=30)
    def rename(user_id: int) -> float | None:
        lock = client.get_fair_lock(f"{name}:users:{user_id}")
        assert lock.is_held_by_current_thread()
        return lock.remain_time_to_live()

    ttl = rename(7)
    assert ttl is not None and 25 < ttl <= 30

    @client.synchronized(name + ":rw", kind="read")
    def read() -> bool:
        return client.get_read_write_lock(name + ":rw").read_lock().is_locked()

    assert read()


def test_synchronized_with_a_wait_time_raises_on_time_out(
    client: syncprims.Client, real_url: str, name: str
) -> None:
    ran: list[int] = []

    @client.synchronized("{key}", wait_time=0.2)
    def work(key: str) -> None:
        ran.append(1)

    with syncprims.connect(real_url) as other:
        other.get_lock(name).lock()
        started = time.monotonic()
        with pytest.raises(LockTimeoutError) as info:
            work(name)
        assert time.monotonic() - started >= 0.2
        assert isinstance(info.value, TimeoutError)
        assert info.value.name == name
        assert ran == []
        other.get_lock(name).unlock()
    work(name)
    assert ran == [1]


def test_synchronized_checks_its_options_at_decoration(client: syncprims.Client) -> None:
    with pytest.raises(ValueError, match="kind"):
        client.synchronized("x", kind="spin")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="wait_time"):
        client.synchronized("x", wait_time=-1)
    with pytest.raises(TypeError, match="names no parameter"):

        @client.synchronized("orders:{order}")
        def ship(order_id: int) -> None: ...


# -- the asyncio face ---------------------------------------------------------------------------


async def test_an_async_lock_decorates_a_coroutine_function(real_url: str, name: str) -> None:
    async with await syncprims.asyncio.connect(real_url) as client:
        lock = client.get_lock(name)

        @lock
        async def work(x: int) -> int:
            assert await lock.is_held_by_current_thread()
            await asyncio.sleep(0.01)
            return x * 2

        assert await work(21) == 42
        assert work.__name__ == "work"
        assert not await lock.is_locked()

        inside = 0
        most = 0

        @lock
        async def exclusive() -> None:
            nonlocal inside, most
            inside += 1
            most = max(most, inside)
            await asyncio.sleep(0.02)
            inside -= 1

        await asyncio.gather(*(exclusive() for _ in range(4)))  # four tasks, four owners
        assert most == 1

        @lock
        async def fail() -> None:
            raise KeyError("boom")

        with pytest.raises(KeyError):
            await fail()
        assert not await lock.is_locked()

        def plain() -> None: ...

        with pytest.raises(TypeError, match="async functions"):
            lock(plain)  # type: ignore[arg-type]


async def test_async_multi_locks_and_semaphores_decorate(real_url: str, name: str) -> None:
    async with await syncprims.asyncio.connect(real_url) as client:
        both = syncprims.asyncio.RedLock(client.get_lock(name + ":a"), client.get_lock(name))
        sem = client.get_semaphore(name + ":sem")
        await sem.try_set_permits(1)

        @both
        @sem
        async def work() -> tuple[bool, int]:
            return await both.is_held_by_current_thread(), await sem.available_permits()

        assert await work() == (True, 0)
        assert await sem.available_permits() == 1


async def test_async_synchronized(real_url: str, name: str) -> None:
    async with (
        await syncprims.asyncio.connect(real_url) as client,
        await syncprims.asyncio.connect(real_url) as other,
    ):

        @client.synchronized(name + ":{order_id}", kind="fenced", wait_time=0.2)
        async def ship(order_id: int) -> bool:
            return await client.get_fenced_lock(f"{name}:{order_id}").is_held_by_current_thread()

        assert await ship(1)
        assert await client.get_fenced_lock(f"{name}:1").get_token() == 1
        await other.get_fenced_lock(f"{name}:2").lock()
        with pytest.raises(LockTimeoutError, match=r"not acquired within 0\.2 s"):
            await ship(2)
        await other.get_fenced_lock(f"{name}:2").unlock()
        assert await ship(2)

        @client.synchronized(lambda key: f"{name}:w:{key}", kind="write")
        async def write(key: str) -> bool:
            return await client.get_read_write_lock(f"{name}:w:{key}").write_lock().is_locked()

        assert await write("k")

        def plain(key: str) -> None: ...

        with pytest.raises(TypeError, match="async functions"):
            client.synchronized("{key}")(plain)  # type: ignore[arg-type]


@pytest.mark.parametrize("template", ["orders:{}", "orders:{0}"])
def test_the_integrations_refuse_a_positional_field_when_defined(template: str) -> None:
    """The Django decorator and the Celery task name their locks by ``syncprims.naming``'s
    rules: a positional field is refused when the function is decorated (a copy of their own
    named every call's lock ``"orders:{}"``, one lock for all calls)."""
    pytest.importorskip("django", reason="Django is not installed (pip install -e '.[dev]')")
    pytest.importorskip("celery", reason="Celery is not installed (pip install -e '.[dev]')")
    from syncprims.contrib.celery import ExclusiveTask
    from syncprims.contrib.django import exclusive

    with pytest.raises(TypeError, match="names no parameter"):

        @exclusive(template)
        def ship(order_id: int) -> None: ...

    with pytest.raises(TypeError, match="names no parameter"):

        class Ship(ExclusiveTask):
            lock_key = template

            def run(self, order_id: int) -> None: ...
