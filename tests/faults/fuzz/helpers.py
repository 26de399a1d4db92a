"""Shared by the fuzz modules: the driver of both faces, keyspace dumps, the oracles written
from the documentation, and the hypothesis strategies (see ``__init__``)."""

from __future__ import annotations

import asyncio
import inspect
import math
import time
from collections.abc import Awaitable, Callable, Coroutine
from datetime import timedelta
from decimal import Decimal
from typing import Any, TypeVar

from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st

import syncprims
import syncprims.asyncio
from syncprims._core.semaphore import MAX_PERMITS_PER_CALL
from syncprims._protocol.timing import MAX_LEASE_SECONDS
from syncprims._protocol.values import MAX_COUNT

T = TypeVar("T")
Expected = type[Exception] | None

FUZZ = settings(
    max_examples=40,
    deadline=None,
    database=None,  # no .hypothesis/ directory in the repository
    suppress_health_check=[HealthCheck.too_slow],
)

NAME = "fuzz:obj"
BYSTANDER = "fuzz:bystander"
TTL_SLACK_MS = 2000  # how much a TTL may run down between two looks (slow machines)
NEVER = 922337203685477  # the score of a permit that never expires (docs/semaphores.md)
LATCH_PREFIX = b"redisson_unlock_latch:"

# Bounds of the fuzzed ranges: above them live the bugs pinned at the end of this module.
LOCK_LEASE_MAX = 1e12  # seconds: leases above MAX_LEASE_SECONDS (1e9) are refused
WAIT_MAX = 1e300  # seconds
SAFE_COUNT = 2**53 - 16  # counts above MAX_COUNT (2**31 - 1) are refused


# -- the server, the faces ------------------------------------------------------------------------


class Driver:
    """One face's client on the dedicated server, and a way to run an example's body."""

    def __init__(self, face: str, client: Any, loop: asyncio.AbstractEventLoop, raw: Any) -> None:
        self.face = face
        self.client = client
        self.loop = loop
        self.raw = raw
        self.module: Any = syncprims.asyncio if face == "async" else syncprims

    def __repr__(self) -> str:
        return f"<Driver {self.face}>"

    def run(self, body: Coroutine[Any, Any, T]) -> T:
        """Run one example's body in one task (the asyncio face's owner for the example)."""
        return self.loop.run_until_complete(body)

    async def call(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Call a method of either face: blocking (sync) or awaited (asyncio)."""
        result = fn(*args)
        if inspect.isawaitable(result):
            result = await result
        return result

    async def as_other_owner(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Call as another owner: another thread (sync), another task (asyncio)."""
        if self.face == "async":
            return await asyncio.create_task(self.call(fn, *args))
        return await asyncio.get_running_loop().run_in_executor(None, lambda: fn(*args))


# -- the keyspace ---------------------------------------------------------------------------------


class Dump(dict[bytes, tuple[str, object, int]]):
    """Every key: (type, value, PTTL), and when the look started and ended (monotonic s)."""

    started = 0.0
    ended = 0.0


def reset(raw: Any) -> None:
    """An empty database but for one bystander key (with a TTL) no call may touch."""
    raw.flushdb()
    raw.set(BYSTANDER, "untouched", px=600_000)


def dump(raw: Any) -> Dump:
    """Every key: (type, value, PTTL)."""
    out = Dump()
    out.started = time.monotonic()
    for key in raw.scan_iter(count=1000):
        kind = raw.type(key).decode()
        value: object
        if kind == "string":
            value = raw.get(key)
        elif kind == "hash":
            value = raw.hgetall(key)
        elif kind == "list":
            value = raw.lrange(key, 0, -1)
        elif kind == "zset":
            value = raw.zrange(key, 0, -1, withscores=True)
        elif kind == "set":
            value = raw.smembers(key)
        else:
            value = kind
        out[key] = (kind, value, int(raw.pttl(key)))
    out.ended = time.monotonic()
    return out


async def settled_dump(raw: Any) -> Dump:
    """The dump once the unlock latches (deleted by the client's janitor) are gone.

    It awaits between looks: the asyncio face's janitor runs on the example's event loop.
    """
    deadline = time.monotonic() + 3
    while True:
        state = dump(raw)
        if not any(key.startswith(LATCH_PREFIX) for key in state) or time.monotonic() > deadline:
            return state
        await asyncio.sleep(0.02)


def short(key: bytes) -> bytes:
    return key if len(key) <= 80 else key[:80] + b"..."


def _latch(key: bytes) -> bool:
    return key.startswith(b"redisson_unlock_latch:")


def assert_unchanged(before: Dump, after: Dump) -> None:
    """Same keys, types and values; TTLs only ran down, by no more than the time between the
    looks (a rejected call wrote nothing; however slow the machine, a TTL another call set
    shows). An unlock latch key may go between the looks: the janitor deletes them in the
    background (a loaded run deleted one that an earlier release left); one that comes is
    still a write."""
    ran = math.ceil((after.ended - before.started) * 1000) + 2  # each PTTL rounds down
    added = [short(key) for key in after if key not in before]
    removed = [short(key) for key in before if key not in after and not _latch(key)]
    assert not added and not removed, f"keys added {added}, removed {removed}"
    for key, (kind, value, ttl) in before.items():
        if key not in after:  # a latch key the janitor deleted
            continue
        kind_after, value_after, ttl_after = after[key]
        assert (kind_after, value_after) == (kind, value), f"{short(key)!r} changed"
        if ttl < 0:
            assert ttl_after == ttl, f"{short(key)!r}: TTL {ttl} -> {ttl_after}"
        else:
            assert 0 <= ttl - ttl_after <= ran, f"{short(key)!r}: TTL {ttl} -> {ttl_after}"


async def attempt(awaitable: Awaitable[Any]) -> Any:
    """The call's result, or the exception it raised (results are never exceptions)."""
    try:
        return await awaitable
    except Exception as error:
        return error


def check_rejected(result: Any, expected: type[Exception], before: Dump, raw: Any) -> None:
    """Exactly ``expected`` was raised and nothing was written."""
    event(f"refused: {expected.__name__}")
    assert type(result) is expected, f"expected {expected.__name__}, got {result!r}"
    assert_unchanged(before, dump(raw))


def check_accepted(result: Any, what: str) -> None:
    event("accepted")
    assert not isinstance(result, Exception), f"{what} raised {type(result).__name__}: {result}"


# -- oracles, from the documentation --------------------------------------------------------------


def duration_error(value: object, *, none: bool, zero: bool, inf: bool) -> Expected:
    """docs/errors.md: durations are seconds (int/float, not bool) or a timedelta; negative
    and NaN are refused; a lease/TTL must also be > 0 and finite."""
    if value is None:
        return None if none else TypeError
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        seconds = float(value)
    else:
        return TypeError
    if math.isnan(seconds) or seconds < 0:
        return ValueError
    if seconds == 0 and not zero:
        return ValueError
    if math.isinf(seconds) and not inf:
        return ValueError
    if not inf and seconds > MAX_LEASE_SECONDS:  # leases and TTLs: docs/locks.md
        return ValueError
    return None


def wait_error(value: object) -> Expected:
    """``wait_time``: ``None``/0 is one attempt, ``math.inf`` waits forever."""
    return duration_error(value, none=True, zero=True, inf=True)


def lease_error(value: object) -> Expected:
    """``lease_time``: ``None`` is the watchdog (or "never" for a permit); else > 0, finite."""
    return duration_error(value, none=True, zero=False, inf=False)


def ttl_error(value: object) -> Expected:
    """``expire(ttl)``: a positive finite duration."""
    return duration_error(value, none=False, zero=False, inf=False)


def acquire_error(blocking: object, timeout: object) -> Expected:
    """``threading.Lock.acquire(blocking, timeout)``: a bool; -1/None; no timeout when not
    blocking; otherwise a duration."""
    if not isinstance(blocking, bool):
        return TypeError
    if timeout is not None and (
        isinstance(timeout, bool) or not isinstance(timeout, (int, float, timedelta))
    ):
        return TypeError  # the type is checked first
    if timeout is None or timeout == -1:
        return None
    if not blocking:
        return ValueError
    return wait_error(timeout)


def count_error(value: object) -> Expected:
    """Counts (permits, latch counts): an int, not a bool, >= 0."""
    if isinstance(value, bool) or not isinstance(value, int):
        return TypeError
    return ValueError if value < 0 or value > MAX_COUNT else None


def permit_id_error(value: object) -> Expected:
    """A permit id: a str of 32 hexadecimal characters (16 bytes)."""
    if not isinstance(value, str):
        return TypeError
    try:
        raw = bytes.fromhex(value)
    except ValueError:
        return ValueError
    return None if len(raw) == 16 else ValueError


def permit_ids_error(value: list[object] | tuple[object, ...]) -> Expected:
    """A list of permit ids (``release(ids)``, all or none): not empty, no id twice, at
    most ``MAX_PERMITS_PER_CALL``, each a permit id."""
    if not value or len(value) > MAX_PERMITS_PER_CALL:
        return ValueError
    for one in value:
        error = permit_id_error(one)
        if error is not None:
            return error
    return ValueError if len({str(one).lower() for one in value}) != len(value) else None


def lease_to_ms(value: object) -> int:
    """A valid lease in milliseconds, rounded up, at least 1."""
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
    else:
        assert isinstance(value, (int, float))
        seconds = float(value)
    return max(1, math.ceil(seconds * 1000))


def close_to(actual: float, target: float) -> bool:
    """Within the TTL slack, or within float precision for huge values."""
    return abs(actual - target) <= max(TTL_SLACK_MS, abs(target) * 1e-12)


def tagged(name: str) -> str:
    """docs/interop.md: a name without ``{`` is wrapped in derived keys, one with it is kept."""
    return name if "{" in name else "{" + name + "}"


# -- strategies -----------------------------------------------------------------------------------


def pick(*strategies: st.SearchStrategy[object]) -> st.SearchStrategy[object]:
    """One of ``strategies``, chosen first (repeat one to weigh it): ``st.one_of`` would merge
    the branches of a nested choice like JUNK into its own, and JUNK would crowd out the rest."""
    return st.sampled_from(strategies).flatmap(lambda strategy: strategy)


JUNK = pick(
    st.none(),
    st.booleans(),
    st.text(max_size=6),
    st.binary(max_size=6),
    st.lists(st.integers(), max_size=2),
    st.fractions(),
    st.one_of(st.decimals(allow_nan=False), st.just(Decimal("NaN"))),
    st.complex_numbers(max_magnitude=10),
    st.dates(),
    st.builds(object),
)


def durations(max_value: float) -> st.SearchStrategy[object]:
    """Any duration-ish value, finite ones at most ``max_value`` seconds."""
    return pick(
        JUNK,
        st.none(),
        st.integers(min_value=-(2**70), max_value=int(max_value)),
        st.integers(min_value=-5, max_value=120),
        st.floats(max_value=max_value),
        st.floats(min_value=-1.0, max_value=120.0),
        st.sampled_from(
            [math.inf, -math.inf, math.nan, 0, 0.0, -0.0, 5e-324, 1e-7, 0.0004, 1, 2.5, 60, -1]
        ),
        st.timedeltas(max_value=timedelta(seconds=min(max_value, 8e13))),
    )


WAITS = durations(WAIT_MAX)
LOCK_LEASES = durations(LOCK_LEASE_MAX)
PERMIT_LEASES = durations(1e12)  # capped like every lease (MAX_LEASE_SECONDS)
COUNTS = pick(
    JUNK,
    st.integers(min_value=-SAFE_COUNT, max_value=SAFE_COUNT),
    st.integers(min_value=0, max_value=SAFE_COUNT),
    st.integers(min_value=-3, max_value=6),
    st.integers(min_value=0, max_value=6),
    st.floats(allow_nan=True),
    st.timedeltas(max_value=timedelta(days=1)),
)
BLOCKING = pick(st.booleans(), st.booleans(), st.booleans(), JUNK, st.integers(0, 1))
TIMEOUTS = pick(WAITS, WAITS, st.sampled_from([-1, -1.0, None, -2, -0.5, timedelta(seconds=-1)]))
PERMIT_IDS = pick(
    JUNK,
    st.uuids().map(lambda u: u.hex),  # well-formed, unknown
    st.uuids().map(lambda u: u.hex.upper()),
    st.text(alphabet="0123456789abcdefABCDEF xg\n", min_size=28, max_size=36),
    st.integers(),
)
NAMES = pick(
    st.text(max_size=12),
    st.text(max_size=12),
    st.text(alphabet=st.sampled_from("{}:\x00 aZé漢😀\udc80\ud800"), max_size=8),
    st.sampled_from(["", "{", "}", "{}", "{}x", "a{b", "{a}", "{a}:b", "\x00", "\udc80", "😀"]),
    JUNK,
    st.integers(),
    st.floats(allow_nan=True),
    st.lists(st.text(max_size=2), max_size=2),
)

LOCKS: dict[str, Callable[[Any, str], Any]] = {
    "rlock": lambda client, name: client.get_lock(name),
    "fair": lambda client, name: client.get_fair_lock(name),
    "fenced": lambda client, name: client.get_fenced_lock(name),
    "read": lambda client, name: client.get_read_write_lock(name).read_lock(),
    "write": lambda client, name: client.get_read_write_lock(name).write_lock(),
}


# -- names ----------------------------------------------------------------------------------------


def name_errors(name: object) -> tuple[Expected, Expected]:
    """(error of the getter, error of the first call): docs/errors.md refuses non-``str``,
    empty and non-UTF-8 names (lone surrogates) at once, in the getter."""
    if not isinstance(name, str):
        return TypeError, None
    if not name:
        return ValueError, None
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return ValueError, None
    return None, None


async def name_round_trip(drv: Driver, kind: str, name: str) -> None:
    """Use an accepted name and check the keys against docs/interop.md."""
    raw, call, key = drv.raw, drv.call, name.encode()
    client = drv.client

    def keys() -> set[bytes]:
        return {k for k in dump(raw) if k != BYSTANDER.encode() and not k.startswith(LATCH_PREFIX)}

    if kind in LOCKS:
        lock = LOCKS[kind](client, name)
        assert await call(lock.try_lock, 0, 30) is True
        assert await call(lock.is_held_by_current_thread) is True
        state = keys()
        assert key in state
        fields = {k: v for k, v in raw.hgetall(key).items() if k != b"mode"}
        assert list(fields.values()) == [b"1"]
        if kind == "fenced":
            assert state == {key, f"redisson_lock_token:{tagged(name)}".encode()}
        elif kind == "read":
            (lease_key,) = state - {key}
            assert lease_key.startswith(f"{tagged(name)}:".encode())
            assert lease_key.endswith(b":rwlock_timeout:1")
        else:
            assert state == {key}
        await call(lock.unlock)
        assert key not in keys()
        await call(lock.delete)
    elif kind == "semaphore":
        sem = client.get_semaphore(name)
        assert await call(sem.try_set_permits, 2) is True
        assert await call(sem.try_acquire, 1) is True
        assert keys() == {key} and raw.get(key) == b"1"
        await call(sem.release, 1)
        assert await call(sem.available_permits) == 2
        assert await call(sem.delete) is True
    elif kind == "permit":
        pes = client.get_permit_expirable_semaphore(name)
        assert await call(pes.try_set_permits, 1) is True
        permit = await call(pes.try_acquire, 0, 30)
        assert isinstance(permit, str)
        timeouts = f"{tagged(name)}:timeout".encode()
        assert keys() == {key, timeouts}
        assert [member for member, _ in raw.zrange(timeouts, 0, -1, withscores=True)] == [
            bytes.fromhex(permit)
        ]
        await call(pes.release, permit)
        assert await call(pes.available_permits) == 1
        assert await call(pes.delete) is True
    else:
        latch = client.get_count_down_latch(name)
        assert await call(latch.try_set_count, 1) is True
        assert keys() == {key} and raw.get(key) == b"1"
        await call(latch.count_down)
        assert await call(latch.get_count) == 0
        assert keys() == set()


def getter(client: Any, kind: str) -> Callable[[object], Any]:
    getters: dict[str, Callable[[object], Any]] = {
        "rlock": client.get_lock,
        "fair": client.get_fair_lock,
        "fenced": client.get_fenced_lock,
        "read": lambda name: client.get_read_write_lock(name).read_lock(),
        "write": lambda name: client.get_read_write_lock(name).write_lock(),
        "semaphore": client.get_semaphore,
        "permit": client.get_permit_expirable_semaphore,
        "latch": client.get_count_down_latch,
    }
    return getters[kind]


async def first_use(drv: Driver, kind: str, obj: Any) -> Any:
    if kind in LOCKS:
        return await drv.call(obj.try_lock, 0, 30)
    if kind in ("semaphore", "permit"):
        return await drv.call(obj.try_set_permits, 1)
    return await drv.call(obj.try_set_count, 1)


NAME_KINDS = [*LOCKS, "semaphore", "permit", "latch"]
