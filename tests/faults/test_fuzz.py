"""Bad input to every public primitive: a typed error and nothing written, or a documented result.

Every call below runs against a dedicated ``redis-server`` (module-scoped, flushed before each
example, so nothing else writes there). Each hypothesis example builds a known state, takes a
full dump of the keyspace (type, value, TTL of every key), makes one call with generated
arguments and checks it against an oracle written from the documentation (``docs/errors.md``,
the docstrings): bad arguments raise exactly the builtin ``TypeError`` or ``ValueError`` and the
dump is unchanged; good ones give the documented result (a hold with the documented TTL, the
documented count...). Valid waits never block: the resource is free (or held by the caller)
whenever a generated wait is valid.

Both faces run the same bodies: the sync face's calls block inside the example's coroutine,
the asyncio face's are awaited in one task (one owner per example).

The tests at the end pin inputs beyond the documented limits (leases and TTLs above
``MAX_LEASE_SECONDS``, counts above ``MAX_COUNT``, ints beyond any float, tiny MultiLock
leases): this fuzz found each accepted and then corrupting Redis or hanging; now each is
refused with ``ValueError`` and nothing written.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import math
import time
from collections.abc import Awaitable, Callable, Coroutine, Iterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any, TypeVar

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import syncprims
import syncprims.asyncio
from syncprims._embedded import RedisServer
from syncprims._protocol.timing import MAX_LEASE_SECONDS
from syncprims._protocol.values import MAX_COUNT
from syncprims.errors import LockNotHeldError, PermitNotHeldError
from tests.harness import raw_redis

pytestmark = [pytest.mark.real, pytest.mark.faults]

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


@pytest.fixture(scope="module")
def fuzz_server() -> Iterator[RedisServer]:
    """A redis-server of this module's own: every example flushes it."""
    server = RedisServer()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def fuzz_loop() -> Iterator[asyncio.AbstractEventLoop]:
    loop = asyncio.new_event_loop()
    yield loop
    loop.run_until_complete(loop.shutdown_asyncgens())
    loop.run_until_complete(loop.shutdown_default_executor())
    loop.close()


@pytest.fixture(scope="module", params=["sync", "async"])
def drv(
    request: pytest.FixtureRequest,
    fuzz_server: RedisServer,
    fuzz_loop: asyncio.AbstractEventLoop,
) -> Iterator[Driver]:
    face: str = request.param
    client: Any
    if face == "sync":
        client = syncprims.connect(fuzz_server.url)
    else:
        client = fuzz_loop.run_until_complete(syncprims.asyncio.connect(fuzz_server.url))
    raw = raw_redis(fuzz_server.url)
    yield Driver(face, client, fuzz_loop, raw)
    if face == "sync":
        client.shutdown()
    else:
        fuzz_loop.run_until_complete(client.shutdown())
    raw.close()


@pytest.fixture(scope="module")
def sync_drv(fuzz_server: RedisServer, fuzz_loop: asyncio.AbstractEventLoop) -> Iterator[Driver]:
    """The sync face only (for the known-bug pins: the bugs live in the shared core)."""
    client = syncprims.connect(fuzz_server.url)
    raw = raw_redis(fuzz_server.url)
    yield Driver("sync", client, fuzz_loop, raw)
    client.shutdown()
    raw.close()


# -- the keyspace ---------------------------------------------------------------------------------

Dump = dict[bytes, tuple[str, object, int]]


def reset(raw: Any) -> None:
    """An empty database but for one bystander key (with a TTL) no call may touch."""
    raw.flushdb()
    raw.set(BYSTANDER, "untouched", px=600_000)


def dump(raw: Any) -> Dump:
    """Every key: (type, value, PTTL)."""
    out: Dump = {}
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


def assert_unchanged(before: Dump, after: Dump) -> None:
    """Same keys, types and values; TTLs only ran down (a rejected call wrote nothing)."""
    added = [short(key) for key in after if key not in before]
    removed = [short(key) for key in before if key not in after]
    assert not added and not removed, f"keys added {added}, removed {removed}"
    for key, (kind, value, ttl) in before.items():
        kind_after, value_after, ttl_after = after[key]
        assert (kind_after, value_after) == (kind, value), f"{short(key)!r} changed"
        if ttl < 0:
            assert ttl_after == ttl, f"{short(key)!r}: TTL {ttl} -> {ttl_after}"
        else:
            assert 0 <= ttl - ttl_after <= TTL_SLACK_MS, f"{short(key)!r}: TTL {ttl} -> {ttl_after}"


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


# -- locks: durations -----------------------------------------------------------------------------


def expected_ttl(kind: str, lease: int, held_ttl: int | None) -> int:
    """The lock's TTL after an acquire with ``lease`` ms (Redisson's layout, as in
    rw_write_acquire.lua / rw_read_acquire.lua: a re-entrant write adds the lease to what is
    left, a re-entrant read keeps the longer of the two; the others reset it)."""
    if held_ttl is None:
        return lease
    if kind == "write":
        return held_ttl + lease
    if kind == "read":
        return max(held_ttl, lease)
    return lease


@pytest.mark.parametrize("kind", list(LOCKS))
@FUZZ
@given(data=st.data())
def test_lock_durations(drv: Driver, kind: str, data: st.DataObject) -> None:
    """try_lock / lock / acquire / the fenced token methods with any wait, lease, blocking
    and timeout: TypeError/ValueError and nothing written, or one more hold with the
    documented TTL (the lock is free, or held by the caller: a valid wait never blocks)."""
    methods = ["try_lock", "lock", "acquire"]
    if kind == "fenced":
        methods += ["try_lock_and_get_token", "lock_and_get_token"]
    method = data.draw(st.sampled_from(methods), label="method")
    held = data.draw(st.booleans(), label="held before")
    args: tuple[object, ...]
    lease: object = None
    if method.startswith("try_lock"):
        wait, lease = data.draw(WAITS, label="wait_time"), data.draw(LOCK_LEASES, label="lease")
        args, expected = (wait, lease), wait_error(wait) or lease_error(lease)
    elif method == "acquire":
        blocking, timeout = data.draw(BLOCKING, "blocking"), data.draw(TIMEOUTS, "timeout")
        args, expected = (blocking, timeout), acquire_error(blocking, timeout)
    else:
        lease = data.draw(LOCK_LEASES, label="lease")
        args, expected = (lease,), lease_error(lease)

    async def body() -> None:
        reset(drv.raw)
        call = drv.call
        lock = LOCKS[kind](drv.client, NAME)
        try:
            if held:
                assert await call(lock.try_lock, 0, 60) is True
            holds = await call(lock.get_hold_count)
            held_ttl = int(drv.raw.pttl(NAME)) if held else None
            token = await call(lock.get_token) if kind == "fenced" else 0
            before = dump(drv.raw)
            result = await attempt(call(getattr(lock, method), *args))
            if expected is not None:
                check_rejected(result, expected, before, drv.raw)
                assert await call(lock.get_hold_count) == holds
                return
            check_accepted(result, f"{method}{args!r}")
            if method.endswith("_token"):
                assert result == token + 1
            else:
                assert result is (None if method == "lock" else True)
            lease_ms = (
                round(drv.client.config.lock_watchdog_timeout * 1000)
                if lease is None
                else lease_to_ms(lease)
            )
            ttl = expected_ttl(kind, lease_ms, held_ttl)
            ttl_now = int(drv.raw.pttl(NAME))
            assert ttl_now <= ttl
            if ttl > TTL_SLACK_MS:  # not about to expire: the hold and its TTL are there
                assert ttl_now >= ttl - TTL_SLACK_MS, (ttl_now, ttl)
                assert await call(lock.get_hold_count) == holds + 1
        finally:
            await call(lock.force_unlock)

    drv.run(body())


@FUZZ
@given(data=st.data())
def test_multi_lock(drv: Driver, data: st.DataObject) -> None:
    """MultiLock: its constructor refuses non-locks (TypeError) and no lock (ValueError);
    try_lock / lock / acquire validate like a lock's, or hold every sub-lock."""
    module = drv.module
    parts = data.draw(
        st.one_of(
            st.lists(st.sampled_from(["lock", "fair", "write"]), min_size=1, max_size=3),
            st.lists(st.one_of(st.sampled_from(["lock", "fair", "write"]), JUNK), max_size=3),
        ),
        label="parts",
    )
    client = drv.client
    subs: list[object] = [
        (
            client.get_lock(f"{NAME}:{i}")
            if part == "lock"
            else client.get_fair_lock(f"{NAME}:{i}")
            if part == "fair"
            else client.get_read_write_lock(f"{NAME}:{i}").write_lock()
            if part == "write"
            else part
        )
        for i, part in enumerate(parts)
    ]
    bad = [sub for sub in subs if not isinstance(sub, module.RLock)]
    if bad or not subs:
        with pytest.raises(TypeError if bad else ValueError) as raised:
            module.MultiLock(*subs)
        assert type(raised.value) is (TypeError if bad else ValueError)
        return
    multi = module.MultiLock(*subs)
    method = data.draw(st.sampled_from(["try_lock", "lock", "acquire"]), label="method")
    args: tuple[object, ...]
    lease: object = None
    if method == "try_lock":
        wait, lease = data.draw(WAITS, label="wait_time"), data.draw(LOCK_LEASES, label="lease")
        args, expected = (wait, lease), wait_error(wait) or lease_error(lease)
    elif method == "acquire":
        blocking, timeout = data.draw(BLOCKING, "blocking"), data.draw(TIMEOUTS, "timeout")
        args, expected = (blocking, timeout), acquire_error(blocking, timeout)
    else:
        lease = data.draw(LOCK_LEASES, label="lease")
        args, expected = (lease,), lease_error(lease)
    if expected is None and lease is not None:
        lease_s = lease_to_ms(lease) / 1000
        if lease_s <= lease_s * 0.01 + 0.002:  # no validity possible: refused (multi-lock.md)
            expected = ValueError
    one_attempt = expected is None and lease is not None and lease_to_ms(lease) < 100
    if one_attempt:
        # A lease shorter than the acquire's time plus the drift allowance never gives a
        # valid attempt (docs/multi-lock.md): one attempt only, or a long wait never ends.
        method, args = "try_lock", (0, lease)

    async def body() -> None:
        reset(drv.raw)
        try:
            before = dump(drv.raw)
            result = await attempt(drv.call(getattr(multi, method), *args))
            if expected is not None:
                check_rejected(result, expected, before, drv.raw)
                return
            check_accepted(result, f"{method}{args!r}")
            if result is False:  # no validity left: what the attempt took was released
                assert one_attempt
                assert_unchanged(before, await settled_dump(drv.raw))
                return
            assert result is (None if method == "lock" else True)
            for sub in multi.locks:
                # a tiny lease may already be over: then the sub-lock is simply gone
                if int(drv.raw.pttl(sub.name)) > TTL_SLACK_MS:
                    assert await drv.call(sub.is_held_by_current_thread) is True
        finally:
            for sub in multi.locks:
                await drv.call(sub.force_unlock)

    drv.run(body())


EXPIRABLES = ["rlock", "fair", "fenced", "rw", "semaphore", "permit"]


async def make_expirable(drv: Driver, kind: str) -> tuple[Any, list[bytes]]:
    """An existing object of ``kind`` and its keys."""
    client, call = drv.client, drv.call
    if kind in ("rlock", "fair", "fenced"):
        lock = LOCKS[kind](client, NAME)
        assert await call(lock.try_lock, 0, 60) is True
        keys = [NAME.encode()]
        if kind == "fenced":
            keys.append(f"redisson_lock_token:{tagged(NAME)}".encode())
        return lock, keys
    if kind == "rw":
        rw = client.get_read_write_lock(NAME)
        assert await call(rw.write_lock().try_lock, 0, 60) is True
        return rw, [NAME.encode()]
    if kind == "semaphore":
        sem = client.get_semaphore(NAME)
        assert await call(sem.try_set_permits, 3) is True
        return sem, [NAME.encode()]
    pes = client.get_permit_expirable_semaphore(NAME)
    assert await call(pes.try_set_permits, 2) is True
    assert isinstance(await call(pes.try_acquire, 0, 60), str)
    return pes, [NAME.encode(), f"{tagged(NAME)}:timeout".encode()]


@pytest.mark.parametrize("kind", EXPIRABLES)
@FUZZ
@given(
    method=st.sampled_from(["expire", "expire_at"]),
    ttl=LOCK_LEASES,
    when=st.one_of(
        JUNK,
        st.datetimes(min_value=datetime(1970, 1, 2), max_value=datetime(9000, 1, 1)),
        st.datetimes(timezones=st.just(UTC)),
    ),
)
def test_expire(drv: Driver, kind: str, method: str, ttl: object, when: object) -> None:
    """expire(ttl) / expire_at(when): TypeError/ValueError and nothing written, or every key
    of the object gets the TTL (a time in the past deletes them)."""

    async def body() -> None:
        reset(drv.raw)
        obj, keys = await make_expirable(drv, kind)
        try:
            before = dump(drv.raw)
            arg = ttl if method == "expire" else when
            expected = ttl_error(ttl) if method == "expire" else None
            if method == "expire_at" and not isinstance(when, datetime):
                expected = TypeError
            started = time.time()
            result = await attempt(drv.call(getattr(obj, method), arg))
            if expected is not None:
                check_rejected(result, expected, before, drv.raw)
                return
            check_accepted(result, f"{method}({arg!r})")
            assert result is True
            if isinstance(when, datetime) and method == "expire_at":
                target = when.timestamp() * 1000 - started * 1000
            else:
                target = lease_to_ms(ttl)
            for key in keys:
                left = int(drv.raw.pttl(key))
                if target > TTL_SLACK_MS:
                    assert target - TTL_SLACK_MS <= left <= target + TTL_SLACK_MS, (key, left)
                elif target <= 0:
                    assert left == -2  # expired at once
        finally:
            if kind in ("rlock", "fair", "fenced"):
                await drv.call(obj.force_unlock)

    drv.run(body())


# -- semaphores and the latch ---------------------------------------------------------------------


@FUZZ
@given(
    method=st.sampled_from(["try_set_permits", "add_permits", "try_acquire", "acquire", "release"]),
    permits=COUNTS,
    exists=st.booleans(),
    start=st.integers(min_value=0, max_value=5),
)
def test_semaphore_counts(
    drv: Driver, method: str, permits: object, exists: bool, start: int
) -> None:
    """Semaphore counts: TypeError/ValueError and nothing written, or the documented count
    (release without acquire adds permits, as in Redisson; try_acquire of too many, or
    try_set_permits of an existing semaphore, answers False and changes nothing)."""

    async def body() -> None:
        reset(drv.raw)
        call = drv.call
        sem = drv.client.get_semaphore(NAME)
        if exists:
            assert await call(sem.try_set_permits, start) is True
            assert await call(sem.expire, 300) is True
        available = start if exists else 0
        before = dump(drv.raw)
        if method == "add_permits":
            expected: Expected = (
                TypeError
                if isinstance(permits, bool) or not isinstance(permits, int)
                else ValueError
                if abs(permits) > MAX_COUNT
                else None
            )
        else:
            expected = count_error(permits)
        fn = getattr(sem, method)
        args: tuple[object, ...] = (permits,)
        if method == "acquire":  # acquire(blocking, timeout, *, permits), as threading's
            fn, args = functools.partial(sem.acquire, permits=permits), ()
        if method == "acquire" and expected is None:
            assert isinstance(permits, int)
            if permits > available:  # would wait forever: one attempt instead
                fn, args = sem.try_acquire, (permits, None)
        if method == "try_acquire":
            args = (permits, None)
        result = await attempt(call(fn, *args))
        if expected is not None:
            check_rejected(result, expected, before, drv.raw)
            return
        check_accepted(result, f"{method}({permits!r})")
        assert isinstance(permits, int)
        now = await call(sem.available_permits)
        if method == "try_set_permits":
            assert result is (not exists)
            assert now == (available if exists else permits)
        elif method == "add_permits":
            assert result == now == available + permits
        elif method == "release":
            assert now == available + permits
        elif permits <= available:  # acquire, try_acquire
            assert result is True
            assert now == available - permits
        else:
            assert result is False
        if result is False:
            assert_unchanged(before, dump(drv.raw))
        if exists:  # every operation keeps the TTL
            assert 0 < int(drv.raw.pttl(NAME)) <= 300_000

    drv.run(body())


@FUZZ
@given(
    method=st.sampled_from(["try_acquire", "latch.wait", "latch.await_", "permit.try_acquire"]),
    wait=WAITS,
    lease=PERMIT_LEASES,
)
def test_waits(drv: Driver, method: str, wait: object, lease: object) -> None:
    """Wait times of semaphores, permits and the latch: TypeError/ValueError and nothing
    written, or at once the documented result (a permit is free, the latch is open)."""

    async def body() -> None:
        reset(drv.raw)
        call, client = drv.call, drv.client
        args: tuple[object, ...]
        if method == "try_acquire":
            sem = client.get_semaphore(NAME)
            assert await call(sem.try_set_permits, 1) is True
            fn, args, expected = sem.try_acquire, (1, wait), wait_error(wait)
        elif method == "permit.try_acquire":
            pes = client.get_permit_expirable_semaphore(NAME)
            assert await call(pes.try_set_permits, 1) is True
            fn, args = pes.try_acquire, (wait, lease)
            expected = wait_error(wait) or lease_error(lease)
        else:
            latch = client.get_count_down_latch(NAME)  # open: it does not exist
            fn = latch.wait if method == "latch.wait" else latch.await_
            args, expected = (wait,), wait_error(wait)
        before = dump(drv.raw)
        started = time.time() * 1000
        result = await attempt(call(fn, *args))
        if expected is not None:
            check_rejected(result, expected, before, drv.raw)
            return
        check_accepted(result, f"{method}{args!r}")
        if method == "try_acquire":
            assert result is True and drv.raw.get(NAME) == b"0"
        elif method == "permit.try_acquire":
            assert isinstance(result, str) and permit_id_error(result) is None
            ((member, score),) = drv.raw.zrange(f"{tagged(NAME)}:timeout", 0, -1, withscores=True)
            assert member == bytes.fromhex(result)
            if lease is None:
                assert score == NEVER
            else:
                assert close_to(score, started + lease_to_ms(lease)), (score, lease)
        else:
            assert result is True
            assert_unchanged(before, dump(drv.raw))

    drv.run(body())


@FUZZ
@given(
    method=st.sampled_from(
        ["try_set_permits", "set_permits", "acquire", "release", "try_release", "update"]
    ),
    value=COUNTS,
    permit=PERMIT_IDS,
    real=st.booleans(),
    lease=PERMIT_LEASES,
    start=st.integers(min_value=1, max_value=4),
    exists=st.booleans(),
)
def test_permit_expirable_semaphore(
    drv: Driver,
    *,
    method: str,
    value: object,
    permit: object,
    real: bool,
    lease: object,
    start: int,
    exists: bool,
) -> None:
    """PermitExpirableSemaphore: bad counts, leases and permit ids raise TypeError/ValueError
    and write nothing; an unknown id raises PermitNotHeldError (a ValueError) from release,
    answers False from try_release / update_lease_time, and changes nothing."""

    async def body() -> None:
        reset(drv.raw)
        call = drv.call
        pes = drv.client.get_permit_expirable_semaphore(NAME)
        held = None
        if exists:
            assert await call(pes.try_set_permits, start) is True
            held = await call(pes.try_acquire, 0, 300)
            assert isinstance(held, str)
        permit_id = held if real and held is not None else permit
        timeouts = f"{tagged(NAME)}:timeout"
        before = dump(drv.raw)
        args: tuple[object, ...]
        if method in ("try_set_permits", "set_permits"):
            args, expected = (value,), count_error(value)
        elif method == "acquire":
            args, expected = (), lease_error(lease)
        elif method == "update":
            args = (permit_id, lease)
            expected = permit_id_error(permit_id) or lease_error(lease)
        else:
            args, expected = (permit_id,), permit_id_error(permit_id)
        fn = getattr(pes, "update_lease_time" if method == "update" else method)
        if method == "acquire":  # acquire(blocking, timeout, *, lease_time)
            fn = functools.partial(pes.acquire, lease_time=lease)
        no_permit = method == "acquire" and (not exists or start < 2)
        if no_permit and expected is None:  # acquire() would wait forever: one attempt
            fn, args = pes.try_acquire, (0, lease)
        started = time.time() * 1000
        result = await attempt(call(fn, *args))
        if expected is not None:
            check_rejected(result, expected, before, drv.raw)
            return
        known = exists and permit_id == held
        if method == "release" and not known:
            assert isinstance(result, PermitNotHeldError), result
            assert result.name == NAME and result.permit_id == permit_id
            assert_unchanged(before, dump(drv.raw))
            return
        check_accepted(result, f"{method}{args!r}")
        # the lease given now, as a score, read before any call reclaims expired leases
        given_id = {"acquire": result, "update": permit_id}.get(method)
        score = (
            drv.raw.zscore(timeouts, bytes.fromhex(given_id)) if isinstance(given_id, str) else None
        )
        leased = await call(pes.acquired_permits)
        available = await call(pes.available_permits)
        if method == "try_set_permits":
            assert result is (not exists)
            if not exists:
                assert available == value
        elif method == "set_permits":
            assert isinstance(value, int)
            assert available + leased == value
        elif no_permit:
            assert result is None
        elif method in ("release", "try_release"):
            assert result is (None if method == "release" else known)
            if known:
                assert (available, leased) == (start, 0)
        elif method == "update" and not known:
            assert result is False
        else:  # a new permit, or a new lease for the one held
            if method == "acquire":
                assert isinstance(result, str) and permit_id_error(result) is None
            else:
                assert result is True
            if lease is None:
                assert score == NEVER
            else:
                assert score is not None and close_to(score, started + lease_to_ms(lease))
            if lease is None or lease_to_ms(lease) > TTL_SLACK_MS:  # not expired yet
                taken = 2 if method == "acquire" else 1
                assert (available, leased) == (start - taken, taken)
        if result is False or no_permit:
            assert_unchanged(before, dump(drv.raw))

    drv.run(body())


@FUZZ
@given(count=COUNTS, start=st.integers(min_value=0, max_value=3))
def test_latch_counts(drv: Driver, count: object, start: int) -> None:
    """try_set_count: TypeError/ValueError and nothing written; else set when the latch is
    open (``get_count()`` is the count), False and nothing changed when it is not."""

    async def body() -> None:
        reset(drv.raw)
        latch = drv.client.get_count_down_latch(NAME)
        if start:
            assert await drv.call(latch.try_set_count, start) is True
        before = dump(drv.raw)
        result = await attempt(drv.call(latch.try_set_count, count))
        expected = count_error(count)
        if expected is not None:
            check_rejected(result, expected, before, drv.raw)
            return
        check_accepted(result, f"try_set_count({count!r})")
        assert result is (start == 0)
        assert await drv.call(latch.get_count) == (start or count)
        if not result:
            assert_unchanged(before, dump(drv.raw))

    drv.run(body())


# -- misuse ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", list(LOCKS))
def test_unlock_misuse(drv: Driver, kind: str) -> None:
    """unlock() never held, a second unlock(), and unlock() by another owner raise
    LockNotHeldError (a RuntimeError); none of them changes what is held."""

    async def body() -> None:
        reset(drv.raw)
        call = drv.call
        lock = LOCKS[kind](drv.client, NAME)
        before = await settled_dump(drv.raw)
        error = await attempt(call(lock.unlock))
        assert type(error) is LockNotHeldError and isinstance(error, RuntimeError)
        assert error.name == NAME
        assert_unchanged(before, await settled_dump(drv.raw))

        assert await call(lock.try_lock, 0, 60) is True
        await call(lock.unlock)
        before = await settled_dump(drv.raw)
        assert type(await attempt(call(lock.unlock))) is LockNotHeldError
        assert_unchanged(before, await settled_dump(drv.raw))

        assert await call(lock.try_lock, 0, 60) is True
        before = await settled_dump(drv.raw)
        error = await attempt(drv.as_other_owner(lock.unlock))
        assert type(error) is LockNotHeldError
        assert await call(lock.is_held_by_current_thread) is True
        assert await call(lock.get_hold_count) == 1
        assert_unchanged(before, await settled_dump(drv.raw))
        await call(lock.unlock)
        assert await call(lock.is_locked) is False

    drv.run(body())


def test_read_lock_unlocked_by_another_reader(drv: Driver) -> None:
    """Two readers share the read lock; one that released its hold cannot release the
    other's (LockNotHeldError, nothing written)."""

    async def body() -> None:
        reset(drv.raw)
        call = drv.call
        read = drv.client.get_read_write_lock(NAME).read_lock()
        assert await drv.as_other_owner(read.try_lock, 0, 60) is True
        assert await call(read.try_lock, 0, 60) is True
        await call(read.unlock)
        before = await settled_dump(drv.raw)
        error = await attempt(call(read.unlock))
        assert type(error) is LockNotHeldError and error.name == NAME
        assert_unchanged(before, await settled_dump(drv.raw))
        assert await call(read.is_locked) is True  # the other reader still holds it
        readers = {k: v for k, v in drv.raw.hgetall(NAME).items() if k != b"mode"}
        assert list(readers.values()) == [b"1"]
        await drv.as_other_owner(read.force_unlock)

    drv.run(body())


def test_unlock_after_the_lease_ran_out(drv: Driver) -> None:
    """A hold whose explicit lease ran out: is_lost, and unlock() raises LockNotHeldError
    (docs/errors.md) and writes nothing."""

    async def body() -> None:
        reset(drv.raw)
        locks = {kind: LOCKS[kind](drv.client, f"{NAME}:{kind}") for kind in LOCKS}
        for lock in locks.values():
            assert await drv.call(lock.try_lock, 0, 0.2) is True
        await asyncio.sleep(0.35)
        before = await settled_dump(drv.raw)
        assert not {lock.name.encode() for lock in locks.values()} & before.keys()
        for kind, lock in locks.items():
            assert lock.is_lost is True, kind
            error = await attempt(drv.call(lock.unlock))
            assert type(error) is LockNotHeldError, (kind, error)
        assert_unchanged(before, await settled_dump(drv.raw))

    drv.run(body())


@pytest.mark.parametrize("kind", list(LOCKS))
def test_force_unlock_of_a_free_lock(drv: Driver, kind: str) -> None:
    """force_unlock() of a lock nobody holds answers False and writes nothing."""

    async def body() -> None:
        reset(drv.raw)
        lock = LOCKS[kind](drv.client, NAME)
        before = dump(drv.raw)
        assert await drv.call(lock.force_unlock) is False
        assert_unchanged(before, dump(drv.raw))
        assert await drv.call(lock.try_lock, 0, 60) is True
        assert await drv.as_other_owner(lock.force_unlock) is True
        assert await drv.call(lock.is_locked) is False

    drv.run(body())


def test_multi_lock_unlock_not_held(drv: Driver) -> None:
    """MultiLock.unlock() without holding raises LockNotHeldError and writes nothing."""

    async def body() -> None:
        reset(drv.raw)
        client = drv.client
        multi = drv.module.MultiLock(client.get_lock(f"{NAME}:a"), client.get_lock(f"{NAME}:b"))
        before = await settled_dump(drv.raw)
        assert type(await attempt(drv.call(multi.unlock))) is LockNotHeldError
        assert_unchanged(before, await settled_dump(drv.raw))

    drv.run(body())


def test_semaphore_release_without_acquire_adds_permits(drv: Driver) -> None:
    """docs/semaphores.md: permits belong to nobody; a release adds them (Redisson)."""

    async def body() -> None:
        reset(drv.raw)
        sem = drv.client.get_semaphore(NAME)
        await drv.call(sem.release, 2)
        assert await drv.call(sem.available_permits) == 2
        await drv.as_other_owner(sem.release, 1)
        assert await drv.call(sem.available_permits) == 3

    drv.run(body())


def test_permit_release_misuse(drv: Driver) -> None:
    """A bogus or already released permit id: PermitNotHeldError from release, False from
    try_release; the permits actually leased are untouched."""

    async def body() -> None:
        reset(drv.raw)
        call = drv.call
        pes = drv.client.get_permit_expirable_semaphore(NAME)
        assert await call(pes.try_set_permits, 2) is True
        permit = await call(pes.try_acquire, 0, 60)
        assert isinstance(permit, str)
        bogus = "f" * 32 if permit != "f" * 32 else "e" * 32
        before = dump(drv.raw)
        error = await attempt(call(pes.release, bogus))
        assert type(error) is PermitNotHeldError and isinstance(error, ValueError)
        assert await call(pes.try_release, bogus) is False
        assert_unchanged(before, dump(drv.raw))
        await call(pes.release, permit)
        before = dump(drv.raw)
        assert type(await attempt(call(pes.release, permit))) is PermitNotHeldError
        assert await call(pes.try_release, permit) is False
        assert_unchanged(before, dump(drv.raw))
        assert await call(pes.available_permits) == 2

    drv.run(body())


def test_permit_release_after_its_lease_ran_out(drv: Driver) -> None:
    """A permit whose lease ran out: release raises PermitNotHeldError; the permit is back."""

    async def body() -> None:
        reset(drv.raw)
        pes = drv.client.get_permit_expirable_semaphore(NAME)
        assert await drv.call(pes.try_set_permits, 1) is True
        permit = await drv.call(pes.try_acquire, 0, 0.1)
        assert isinstance(permit, str)
        await asyncio.sleep(0.25)
        assert type(await attempt(drv.call(pes.release, permit))) is PermitNotHeldError
        assert await drv.call(pes.available_permits) == 1

    drv.run(body())


def test_latch_misuse(drv: Driver) -> None:
    """count_down() of an open latch changes nothing; wait() of a closed one times out."""

    async def body() -> None:
        reset(drv.raw)
        latch = drv.client.get_count_down_latch(NAME)
        before = dump(drv.raw)
        await drv.call(latch.count_down)
        assert await drv.call(latch.get_count) == 0
        assert_unchanged(before, dump(drv.raw))
        assert await drv.call(latch.try_set_count, 1) is True
        before = dump(drv.raw)
        started = time.monotonic()
        assert await drv.call(latch.wait, 0.05) is False
        assert time.monotonic() - started < 2
        assert_unchanged(before, dump(drv.raw))

    drv.run(body())


# -- inputs beyond the documented limits (found by this fuzz, fixed in the library) ---------


def bug(reason: str) -> pytest.MarkDecorator:
    return pytest.mark.xfail(strict=True, reason=reason)


def refused_cleanly(drv: Driver, fn: Callable[[], object]) -> tuple[bool, object]:
    """(True, None) when ``fn`` raised TypeError/ValueError and wrote nothing, else
    (False, its result). Any other error propagates."""
    before = dump(drv.raw)
    try:
        result = fn()
    except (TypeError, ValueError):
        assert_unchanged(before, dump(drv.raw))
        return True, None
    return False, result


HUGE_LEASE = (
    "a finite lease above ~9.2e15 s passes lease_ms() (syncprims/_protocol/timing.py); the "
    "acquire script's HINCRBY/HSET runs, then its PEXPIRE fails: ServerReplyError, and the "
    "lock stays held with no TTL and no watchdog: held forever"
)


@pytest.mark.parametrize(
    ("kind", "lease"),
    [(kind, 1e16) for kind in LOCKS] + [("rlock", 2**70), ("rlock", 1e300)],
)
def test_huge_lease_leaves_a_lock_without_ttl(sync_drv: Driver, kind: str, lease: float) -> None:
    """Refused with ValueError, nothing written (it used to leave a lock with no TTL)."""
    reset(sync_drv.raw)
    lock = LOCKS[kind](sync_drv.client, NAME)
    try:
        refused, _ = refused_cleanly(sync_drv, lambda: lock.try_lock(0, lease))
        assert refused  # above MAX_LEASE_SECONDS
    finally:
        lock.force_unlock()


def test_huge_watchdog_timeout(fuzz_server: RedisServer) -> None:
    """Refused by Config, before connecting (a lease above MAX_LEASE_SECONDS)."""
    with pytest.raises(ValueError, match="lock_watchdog_timeout"):
        syncprims.connect(fuzz_server.url, lock_watchdog_timeout=1e16)


@pytest.mark.parametrize("kind", ["read", "write"])
def test_reentrant_rw_huge_lease_counts_a_failed_hold(sync_drv: Driver, kind: str) -> None:
    """Refused, and the hold count is still 1 (it used to count the failed hold)."""
    reset(sync_drv.raw)
    lock = LOCKS[kind](sync_drv.client, NAME)
    try:
        assert lock.try_lock(0, 60) is True
        refused, _ = refused_cleanly(sync_drv, lambda: lock.try_lock(0, 1e14))
        assert refused and lock.get_hold_count() == 1
    finally:
        lock.force_unlock()


def test_multi_lock_huge_lease(sync_drv: Driver) -> None:
    """Refused, nothing written (the sub-locks used to stay held with no TTL)."""
    reset(sync_drv.raw)
    subs = [sync_drv.client.get_lock(f"{NAME}:a"), sync_drv.client.get_lock(f"{NAME}:b")]
    try:
        refused, _ = refused_cleanly(sync_drv, lambda: syncprims.MultiLock(*subs).try_lock(0, 1e16))
        assert refused
    finally:
        for sub in subs:
            sub.force_unlock()


def test_multi_lock_tiny_lease_never_returns(
    fuzz_server: RedisServer, fuzz_loop: asyncio.AbstractEventLoop
) -> None:
    """ValueError at once (the wait used to never end)."""

    async def body() -> None:
        client = await syncprims.asyncio.connect(fuzz_server.url)
        subs = [client.get_lock(f"{NAME}:a"), client.get_lock(f"{NAME}:b")]
        try:
            with pytest.raises(ValueError, match="drift"):
                await asyncio.wait_for(syncprims.asyncio.MultiLock(*subs).lock(0.001), 1)
        finally:
            for sub in subs:
                await sub.force_unlock()
            await client.shutdown()

    fuzz_loop.run_until_complete(body())


def test_expire_huge_ttl(sync_drv: Driver) -> None:
    """Refused with ValueError (it used to be a ServerReplyError)."""
    reset(sync_drv.raw)
    sem = sync_drv.client.get_semaphore(NAME)
    assert sem.try_set_permits(1) is True
    refused, _ = refused_cleanly(sync_drv, lambda: sem.expire(1e16))
    assert refused


OVERFLOW = (
    "OverflowError, neither TypeError nor ValueError: to_seconds() calls float() on an int "
    "above ~1.8e308; lease_ms() calls math.ceil(seconds * 1000) = ceil(inf) for a lease "
    "above ~1.8e305; FairLockCore.slot_ms() does the same with a wait above ~1.8e305"
)


@pytest.mark.parametrize(
    "case",
    ["wait 10**400", "lease 1e306", "expire 1e306", "permit lease 1e306", "fair wait 1e306"],
)
def test_overflow_error(sync_drv: Driver, case: str) -> None:
    """No OverflowError: refused with nothing written, or (a huge wait) accepted."""
    reset(sync_drv.raw)
    client = sync_drv.client
    lock, fair = client.get_lock(NAME), client.get_fair_lock(f"{NAME}:fair")
    calls: dict[str, Callable[[], object]] = {
        "wait 10**400": lambda: lock.try_lock(10**400, 10),
        "lease 1e306": lambda: lock.try_lock(0, 1e306),
        "expire 1e306": lambda: lock.expire(1e306),
        "permit lease 1e306": lambda: client.get_permit_expirable_semaphore(NAME).try_acquire(
            0, 1e306
        ),
        "fair wait 1e306": lambda: fair.try_lock(1e306, 10),
    }
    try:
        refused, result = refused_cleanly(sync_drv, calls[case])
        if case in ("wait 10**400", "fair wait 1e306"):
            assert result is True  # a wait beyond any float is a wait forever; free: taken
        else:
            assert refused
    finally:
        lock.force_unlock()
        fair.force_unlock()


def test_acquire_signalling_nan_timeout(sync_drv: Driver) -> None:
    reset(sync_drv.raw)
    lock = sync_drv.client.get_lock(NAME)
    refused, _ = refused_cleanly(sync_drv, lambda: lock.acquire(True, Decimal("sNaN")))
    assert refused


COUNTS_BUG = (
    "check_count() (syncprims/_protocol/values.py) has no upper bound, and the scripts pass "
    "counts through Lua numbers (doubles: integers exact to 2**53 only) and DECR/INCRBY "
    "(64-bit): large counts are accepted, then stored rounded, read back wrong, or make later "
    "operations fail with ServerReplyError"
)


def sem_try_set_2_63(drv: Driver) -> None:
    sem = drv.client.get_semaphore(NAME)
    refused, _ = refused_cleanly(drv, lambda: sem.try_set_permits(2**63))
    assert refused


def sem_add_2_53_plus_1(drv: Driver) -> None:
    sem = drv.client.get_semaphore(NAME)
    refused, _ = refused_cleanly(drv, lambda: sem.add_permits(2**53 + 1))
    assert refused


def sem_add_2_64(drv: Driver) -> None:
    sem = drv.client.get_semaphore(NAME)
    refused, _ = refused_cleanly(drv, lambda: sem.add_permits(2**64))
    assert refused


def sem_release_2_63(drv: Driver) -> None:
    sem = drv.client.get_semaphore(NAME)
    refused, _ = refused_cleanly(drv, lambda: sem.release(2**63))  # now: ServerReplyError
    assert refused


def latch_2_63(drv: Driver) -> None:
    latch = drv.client.get_count_down_latch(NAME)
    refused, _ = refused_cleanly(drv, lambda: latch.try_set_count(2**63))
    assert refused


def permits_2_53_plus_1(drv: Driver) -> None:
    pes = drv.client.get_permit_expirable_semaphore(NAME)
    refused, _ = refused_cleanly(drv, lambda: pes.try_set_permits(2**53 + 1))
    assert refused


def permits_2_63_minus_1(drv: Driver) -> None:
    pes = drv.client.get_permit_expirable_semaphore(NAME)
    refused, _ = refused_cleanly(drv, lambda: pes.try_set_permits(2**63 - 1))
    assert refused


def permits_set_2_53_plus_1(drv: Driver) -> None:
    pes = drv.client.get_permit_expirable_semaphore(NAME)
    assert pes.try_set_permits(1) is True
    refused, _ = refused_cleanly(drv, lambda: pes.set_permits(2**53 + 1))
    assert refused


@pytest.mark.parametrize(
    "case",
    [
        sem_try_set_2_63,
        sem_add_2_53_plus_1,
        sem_add_2_64,
        sem_release_2_63,
        latch_2_63,
        permits_2_53_plus_1,
        permits_2_63_minus_1,
        permits_set_2_53_plus_1,
    ],
    ids=lambda case: str(case.__name__),
)
def test_huge_counts(sync_drv: Driver, case: Callable[[Driver], None]) -> None:
    """Refused with ValueError before anything is written (counts are Java ints)."""
    reset(sync_drv.raw)
    case(sync_drv)
