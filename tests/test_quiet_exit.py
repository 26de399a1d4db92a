"""``raise_on_release_error``: leaving ``with lock:`` after the lease ran out.

By default the exit raises ``LockNotHeldError`` (as today); with the option off (per client,
or per lock in the getters) it logs a WARNING on ``syncprims.lock`` naming the lock and does
not raise. An explicit ``unlock()`` raises either way.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

import syncprims
from syncprims import LockNotHeldError
from tests.harness import Face, raw_redis

KINDS: dict[str, Any] = {
    "rlock": lambda client, name, **kw: client.get_lock(name, **kw),
    "fair": lambda client, name, **kw: client.get_fair_lock(name, **kw),
    "read": lambda client, name, **kw: client.get_read_write_lock(name, **kw).read_lock(),
    "write": lambda client, name, **kw: client.get_read_write_lock(name, **kw).write_lock(),
    "fenced": lambda client, name, **kw: client.get_fenced_lock(name, **kw),
    "spin": lambda client, name, **kw: client.get_spin_lock(name, **kw),
}


def expire(url: str, name: str) -> None:
    """Make the lease of ``name`` run out now (as if renewals had stopped)."""
    raw = raw_redis(url)
    try:
        raw.pexpire(name, 1)
        deadline = time.monotonic() + 2
        while raw.exists(name) and time.monotonic() < deadline:
            time.sleep(0.005)
    finally:
        raw.close()


def run_with(face: Face, lock: Any, url: str, name: str, error: BaseException | None = None) -> Any:
    """A body for ``face``'s owner: ``with lock:`` (``async with``), the lease running out
    inside, then ``error`` raised in the block, if any."""
    if face.is_async:

        async def abody() -> None:
            async with lock:
                await asyncio.get_running_loop().run_in_executor(None, expire, url, name)
                if error is not None:
                    raise error

        return abody

    def body() -> None:
        with lock:
            expire(url, name)
            if error is not None:
                raise error

    return body


@pytest.mark.parametrize("kind", list(KINDS))
async def test_by_default_the_exit_raises(
    face: Face, real_url: str, real_client: Any, name: str, kind: str
) -> None:
    lock = KINDS[kind](real_client, name)
    with pytest.raises(LockNotHeldError) as info:
        await face.actor()(run_with(face, lock, real_url, name))
    assert info.value.name == name


@pytest.mark.parametrize("kind", list(KINDS))
async def test_the_client_option_makes_the_exit_warn(
    face: Face, real_url: str, name: str, kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    client = await face.connect(real_url, raise_on_release_error=False)
    assert client.config.raise_on_release_error is False
    lock = KINDS[kind](client, name)
    a = face.actor()
    with caplog.at_level("WARNING", logger="syncprims.lock"):
        await a(run_with(face, lock, real_url, name))  # does not raise
    warnings = [r for r in caplog.records if r.name == "syncprims.lock"]
    assert len(warnings) == 1
    assert warnings[0].levelname == "WARNING"
    assert repr(name) in warnings[0].getMessage()
    assert "raise_on_release_error" in warnings[0].getMessage()
    # An explicit unlock still raises.
    await a(lock.lock)
    await asyncio.get_running_loop().run_in_executor(None, expire, real_url, name)
    with pytest.raises(LockNotHeldError):
        await a(lock.unlock)


async def test_a_lock_overrides_the_client(
    face: Face, real_url: str, name: str, caplog: pytest.LogCaptureFixture
) -> None:
    loud = await face.connect(real_url)
    quiet = await face.connect(real_url, raise_on_release_error=False)
    a = face.actor()
    with caplog.at_level("WARNING", logger="syncprims.lock"):
        await a(run_with(face, loud.get_lock(name, raise_on_release_error=False), real_url, name))
    assert any(repr(name) in r.getMessage() for r in caplog.records)
    lock = quiet.get_lock(name, raise_on_release_error=True)
    with pytest.raises(LockNotHeldError):
        await a(run_with(face, lock, real_url, name))


async def test_a_quiet_exit_lets_the_blocks_error_through(
    face: Face, real_url: str, real_client: Any, name: str
) -> None:
    a = face.actor()
    lock = real_client.get_lock(name, raise_on_release_error=False)
    with pytest.raises(KeyError):
        await a(run_with(face, lock, real_url, name, KeyError("boom")))
    loud = real_client.get_lock(name)
    with pytest.raises(LockNotHeldError) as info:
        await a(run_with(face, loud, real_url, name, KeyError("boom")))
    assert isinstance(info.value.__context__, KeyError)


async def test_a_normal_exit_is_unchanged(face: Face, real_url: str, name: str) -> None:
    client = await face.connect(real_url, raise_on_release_error=False)
    lock = client.get_lock(name)
    a = face.actor()

    def body() -> None:
        with lock:
            assert lock.is_held_by_current_thread()

    async def abody() -> None:
        async with lock:
            assert await lock.is_held_by_current_thread()

    await a(abody if face.is_async else body)
    assert not await face.call(lock.is_locked)


async def test_a_multi_lock_is_quiet_when_all_its_locks_are(
    face: Face, real_url: str, real_client: Any, name: str, caplog: pytest.LogCaptureFixture
) -> None:
    a = face.actor()
    quiet = [real_client.get_lock(f"{name}:{i}", raise_on_release_error=False) for i in range(2)]
    multi = face.module.MultiLock(*quiet)
    with caplog.at_level("WARNING", logger="syncprims.lock"):
        await a(run_with(face, multi, real_url, f"{name}:0"))
    assert any("raise_on_release_error" in r.getMessage() for r in caplog.records)
    mixed = face.module.MultiLock(quiet[0], real_client.get_lock(f"{name}:1"))
    with pytest.raises(LockNotHeldError):
        await a(run_with(face, mixed, real_url, f"{name}:0"))


def test_the_option_is_validated(real_url: str) -> None:
    with pytest.raises(TypeError):
        syncprims.Config(raise_on_release_error="no")  # type: ignore[arg-type]
    with syncprims.connect(real_url) as client:
        assert client.config.raise_on_release_error is True
        with pytest.raises(TypeError, match="raise_on_release_error"):
            client.get_lock("x", raise_on_release_error="no")  # type: ignore[arg-type]
