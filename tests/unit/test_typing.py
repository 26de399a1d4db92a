"""The public API's types catch mistakes: ``mypy --strict`` (run by CI over ``tests/``) checks
this file, and every ``# type: ignore[...]`` below must be needed (``warn_unused_ignores``):
if mypy ever stopped rejecting a mistake, the unused ignore would fail the type check. At
run time the same mistakes raise ``TypeError`` before anything is sent.
"""

from __future__ import annotations

from datetime import timedelta

import fakeredis
import pytest

import syncprims
import syncprims.asyncio
from syncprims import Config, Duration, LostCallback


def test_a_misspelt_option_is_rejected() -> None:
    with pytest.raises(TypeError, match="lock_watchdog_timout"):
        syncprims.connect(fakeredis.FakeRedis(), lock_watchdog_timout=10)  # type: ignore[call-arg]


def test_a_string_duration_is_rejected() -> None:
    with pytest.raises(TypeError):
        Config(timeout="3")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        syncprims.connect(fakeredis.FakeRedis(), timeout="3")  # type: ignore[arg-type]


def test_connection_settings_are_rejected_as_options() -> None:
    with pytest.raises(TypeError, match="redis-py client"):
        syncprims.connect(fakeredis.FakeRedis(), password="x")  # type: ignore[call-arg]


def test_timedelta_is_accepted_where_the_docs_say() -> None:
    wait: Duration = timedelta(milliseconds=200)
    with syncprims.connect(
        fakeredis.FakeRedis(), lock_watchdog_timeout=timedelta(seconds=5), timeout=1.5
    ) as client:
        assert client.config.lock_watchdog_timeout == 5.0
        lock = client.get_lock("typing:lock")
        assert lock.acquire(timeout=wait)
        assert lock.acquire(True, timedelta(seconds=1))  # reentrant
        assert lock.try_lock(wait_time=wait, lease_time=timedelta(seconds=2))
        for _ in range(3):
            lock.release()
        sem = client.get_semaphore("typing:sem")
        sem.try_set_permits(1)
        assert sem.acquire(False)
        assert not sem.acquire(True, timedelta(milliseconds=50))
        sem.release()


def test_the_stdlib_acquire_protocol_is_typed() -> None:
    with syncprims.connect(fakeredis.FakeRedis()) as client:
        sem = client.get_semaphore("typing:sem2")
        with pytest.raises(TypeError):
            sem.acquire(2)  # type: ignore[arg-type]
        with pytest.raises(TypeError):
            client.get_lock("typing:x").acquire(1)  # type: ignore[arg-type]


def test_lost_callback_and_duration_are_exported() -> None:
    seen: list[tuple[str, str]] = []
    callback: LostCallback = lambda name, reason: seen.append((name, reason))  # noqa: E731
    with syncprims.connect(fakeredis.FakeRedis()) as client:
        client.get_lock("typing:cb", on_lost=callback)
    assert syncprims.asyncio.LostCallback is LostCallback
    assert syncprims.asyncio.Duration is Duration
