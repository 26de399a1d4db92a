"""Commands encoded once (``syncprims._protocol.wire``): the same bytes as redis-py writes,
sent as they are, and a lock's kept calls follow what they were made from."""

from __future__ import annotations

import importlib.util
from typing import Any

import pytest
from redis.connection import Connection

import syncprims
from syncprims._core.lock import wakeup as wakeup_module
from syncprims._core.lock.kept import KEPT, KeptCalls
from syncprims._protocol import scripts
from syncprims._protocol.contracts import Arg, ScriptCall, WiredCall
from syncprims._protocol.wire import Splice, Wired, encode, pack, wired

COMMANDS: list[tuple[Any, ...]] = [
    ("EVALSHA", scripts.LOCK_ACQUIRE.sha, 1, "lock", 30000, "id:1"),
    ("EVALSHA", scripts.LOCK_UNLOCK.sha, 3, "n", "c", "latch", "0", 30000, "f", "PUBLISH", 1),
    ("SET", "naïve-ключ", b"\x00\xffraw", -5, ""),
    ("SET", "k", 1.5, -0.25, 10**20),
    ("PING",),
]


def redis_py_bytes(command: tuple[Any, ...]) -> bytes:
    """What redis-py's own (pure-Python) encoder writes for ``command``."""
    packed: list[bytes] = Connection().pack_command(*command)  # type: ignore[no-untyped-call]
    return b"".join(packed)


@pytest.mark.parametrize("command", COMMANDS)
def test_the_encoding_is_redis_pys(command: tuple[Any, ...]) -> None:
    assert encode(command) == redis_py_bytes(command)
    if importlib.util.find_spec("hiredis") is not None:
        import hiredis

        assert encode(command) == hiredis.pack_command(command)


@pytest.mark.parametrize("command", COMMANDS[:3])
def test_a_splice_is_the_whole_encoded_with_its_value(command: tuple[Any, ...]) -> None:
    at = len(command) - 2
    splice = Splice(command, at)
    for value in ("x", "redisson_unlock_latch:{lock}:00ff", "é" * 40):
        whole = (*command[:at], value, *command[at + 1 :])
        made = splice(value)
        assert made == whole and type(made) is Wired
        assert made.wire == [encode(whole)]


def test_pack_sends_an_encoded_command_as_it_is() -> None:
    command = wired(COMMANDS[0])
    assert pack(command) is command.wire
    plain = ScriptCall(scripts.LOCK_ACQUIRE, ["lock"], [30000, "id:1"])
    call = WiredCall.of(plain)
    assert call.command() == plain.command() == COMMANDS[0]
    assert (call.script, call.keys, call.args) == (plain.script, plain.keys, plain.args)


@pytest.mark.parametrize("bad", [True, None, ["list"]])
def test_other_arguments_are_refused(bad: object) -> None:
    with pytest.raises(TypeError, match="must be str, bytes or a number"):
        encode(("SET", "k", bad))


def test_a_locks_kept_calls_follow_what_they_were_made_from(
    fake_server: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The encoded first attempt and unlock of an RLock are the commands the lock would
    make afresh: for each owner, lease and wait, and after a constant of the scripts moves."""
    client = syncprims.connect(fake_server.url)
    try:
        one_wake = client.get_lock("kept")._core.one_wake
        assert one_wake is not None

        def afresh(field: str, lease: int, wait: float) -> tuple[Any, ...]:
            waits = "1" if wait > 0 else "0"
            call = one_wake.acquire_command(field, lease, waits, "0", member="", fresh="")
            return call.command()

        for field, lease, wait in [("a:1", 30000, 0.0), ("a:2", 30000, 0.0), ("a:1", 5000, 1.0)]:
            for _ in range(2):
                made = one_wake.first_command(field, lease, wait).command()
                assert made == afresh(field, lease, wait)
                assert pack(made) == [encode(afresh(field, lease, wait))]
        monkeypatch.setattr(wakeup_module, "ONE_WAKE_SLICE_MS", 60_000)
        made = one_wake.first_command("a:1", 30000, 0.0).command()
        assert made == afresh("a:1", 30000, 0.0) and 60_000 in made

        for latch in ("latch:1", "latch:2"):
            call = one_wake.unlock_command("a:1", 30000, latch, "")
            assert list(call.keys).index(latch) == 2
            whole = ScriptCall(call.script, call.keys, call.args).command()
            assert call.command() == whole
            assert pack(call.command()) == [encode(whole)]
    finally:
        client.shutdown()


def test_kept_calls_encode_from_the_second_time_on() -> None:
    """A call made once is only noted (a lock object made per use encodes nothing); from
    its second time on it is sent encoded, and a spliced one with each call's own key."""
    kept = KeptCalls()
    key = ("acquire", "a:1", 30000)

    def make() -> ScriptCall:
        return ScriptCall(scripts.LOCK_ACQUIRE, ["lock"], [30000, "a:1"])

    assert kept.get(key) is None and type(kept.keep(key, make())) is ScriptCall
    assert kept.get(key) is None and type(kept.keep(key, make())) is ScriptCall
    third = kept.get(key)
    assert type(third) is WiredCall and third.command() == make().command()
    assert kept.get(key) is third

    def unlock(latch: str) -> ScriptCall:
        keys = ["lock", "channel", latch]
        args: list[Arg] = ["0", 30000, "a:1", "PUBLISH", 1000]
        return kept.spliced(("unlock", "a:1"), scripts.LOCK_UNLOCK, keys, args, 2)

    made = [unlock(f"latch:{i}") for i in range(4)]
    assert [type(call) for call in made] == [ScriptCall, ScriptCall, WiredCall, WiredCall]
    for i, call in enumerate(made):
        whole = ScriptCall(call.script, call.keys, call.args).command()
        assert f"latch:{i}" in whole and pack(call.command()) == [encode(whole)]
    for i in range(KEPT + 1):  # a few kept at most: the oldest go
        kept.keep(("other", i), make())
    assert kept.get(key) is None
