"""Names, ``on_lost`` and the watchdog timeout option."""

from __future__ import annotations

from datetime import timedelta

import pytest
from hypothesis import event, given
from hypothesis import strategies as st

import syncprims
import syncprims.asyncio
from syncprims._embedded import RedisServer
from tests.faults.fuzz.helpers import (
    BYSTANDER,
    FUZZ,
    JUNK,
    NAME,
    NAME_KINDS,
    NAMES,
    Driver,
    attempt,
    check_accepted,
    check_rejected,
    dump,
    durations,
    first_use,
    getter,
    name_errors,
    name_round_trip,
    pick,
    reset,
    settled_dump,
    ttl_error,
)

pytestmark = [pytest.mark.real, pytest.mark.faults]


@pytest.mark.parametrize("kind", NAME_KINDS)
@FUZZ
@given(name=NAMES)
def test_names(drv: Driver, kind: str, name: object) -> None:
    """Any name: refused with TypeError/ValueError and nothing written, or a working object
    whose keys are named as documented (braces, NUL, unicode included)."""

    async def body() -> None:
        reset(drv.raw)
        before = dump(drv.raw)
        at_getter, at_use = name_errors(name)
        obj = await attempt(drv.call(getter(drv.client, kind), name))
        if at_getter is not None:
            check_rejected(obj, at_getter, before, drv.raw)
            return
        check_accepted(obj, f"get {kind}({name!r})")
        assert obj.name == name
        if at_use is not None:
            check_rejected(await attempt(first_use(drv, kind, obj)), at_use, before, drv.raw)
            return
        assert isinstance(name, str)
        await name_round_trip(drv, kind, name)

    drv.run(body())


@pytest.mark.parametrize("size", [64 * 1024, 1024 * 1024])
def test_huge_names_work(drv: Driver, size: int) -> None:
    """No name length limit is documented: a 1 MB name is one key of that name."""
    name = "n" * (size - 5) + "{tag}"

    async def body() -> None:
        reset(drv.raw)
        for kind in ("rlock", "fenced", "semaphore", "latch"):
            await name_round_trip(drv, kind, name)
        assert (await settled_dump(drv.raw)).keys() == {BYSTANDER.encode()}

    drv.run(body())


@FUZZ
@given(
    method=st.sampled_from(["get_lock", "get_fair_lock", "get_fenced_lock", "get_read_write_lock"]),
    on_lost=pick(JUNK, st.just(print), st.just(lambda name, reason: None)),
)
def test_on_lost_must_be_callable(drv: Driver, method: str, on_lost: object) -> None:
    """``on_lost``: ``None`` or a callable, else TypeError (nothing is sent)."""
    reset(drv.raw)
    before = dump(drv.raw)
    result = drv.run(attempt(drv.call(lambda: getattr(drv.client, method)(NAME, on_lost=on_lost))))
    if on_lost is None or callable(on_lost):
        check_accepted(result, f"{method}(on_lost={on_lost!r})")
        assert result.name == NAME
    else:
        check_rejected(result, TypeError, before, drv.raw)


@FUZZ
@given(value=durations(1e300))
def test_watchdog_timeout_option(fuzz_server: RedisServer, value: object) -> None:
    """``lock_watchdog_timeout``: a positive finite duration, else TypeError/ValueError when
    the configuration is built (before any connection)."""
    expected = ttl_error(value)
    if expected is not None:
        with pytest.raises(expected) as raised:
            syncprims.Config(lock_watchdog_timeout=value)  # type: ignore[arg-type]
        assert type(raised.value) is expected
        event(f"refused: {expected.__name__}")
        return
    event("accepted")
    assert isinstance(value, (int, float, timedelta))
    config = syncprims.Config(lock_watchdog_timeout=value)
    seconds = value.total_seconds() if isinstance(value, timedelta) else float(value)
    assert config.lock_watchdog_timeout == seconds  # kept as float seconds


def test_bad_watchdog_timeout_refused_before_connecting() -> None:
    """connect() validates the options before it connects (nothing listens on port 1)."""
    with pytest.raises(ValueError, match="lock_watchdog_timeout"):
        syncprims.connect("redis://127.0.0.1:1", lock_watchdog_timeout=-1)
    with pytest.raises(TypeError):
        syncprims.connect("redis://127.0.0.1:1", lock_watchdog_timeout="30")  # type: ignore[arg-type]
