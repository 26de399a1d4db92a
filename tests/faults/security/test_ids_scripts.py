"""Owner ids are unguessable; scripts take every key from ``KEYS``."""

from __future__ import annotations

import re
import threading
import uuid
from collections.abc import Iterator
from importlib import resources

import pytest

import syncprims
from syncprims._embedded import RedisServer
from syncprims._protocol import ids
from tests.faults.security.helpers import (
    ACL_COMMANDS,
    plain_redis,
)

pytestmark = [pytest.mark.real, pytest.mark.faults]


# -- owner ids and scripts --------------------------------------------------------------------


def test_owner_ids_are_unguessable(redis_server: RedisServer) -> None:
    """Client ids are UUID4s (122 random bits), request and permit ids 128 random bits."""
    client_ids = [uuid.UUID(ids.new_client_id()) for _ in range(1000)]
    assert all(u.version == 4 and u.variant == uuid.RFC_4122 for u in client_ids)
    assert len(set(client_ids)) == 1000

    def varying_bits(values: list[int], width: int) -> int:
        every, anyone = (1 << width) - 1, 0
        for value in values:
            every &= value
            anyone |= value
        return bin(anyone & ~every).count("1")

    # Over 1000 draws a truly random bit is constant with probability 2**-999.
    assert varying_bits([u.int for u in client_ids], 128) == 122
    requests = [ids.new_request_id() for _ in range(1000)]
    assert all(re.fullmatch(r"[0-9a-f]{32}", r) for r in requests)
    assert varying_bits([int(r, 16) for r in requests], 128) == 128

    admin = plain_redis(redis_server.port)
    clients = [syncprims.connect(redis_server.url) for _ in range(2)]
    try:
        assert clients[0].id != clients[1].id
        for client in clients:
            assert uuid.UUID(client.id).version == 4 and str(uuid.UUID(client.id)) == client.id
        name = f"app:owner-{uuid.uuid4()}"
        lock = clients[0].get_lock(name)
        lock.lock(lease_time=5)
        # The owner field in Redis is "<client id>:<thread>": guessing it takes the UUID.
        assert admin.hkeys(name) == [f"{clients[0].id}:{threading.get_ident()}".encode()]
        lock.unlock()
        pes = clients[1].get_permit_expirable_semaphore(f"app:permits-{uuid.uuid4()}")
        pes.try_set_permits(64)
        permits = [pes.acquire(lease_time=5) for _ in range(64)]
        assert len(set(permits)) == 64
        assert varying_bits([int(p or "", 16) for p in permits], 128) > 100
        pes.delete()
    finally:
        for client in clients:
            client.shutdown()
        admin.close()


_LUA = resources.files("syncprims._protocol").joinpath("lua")
# Channels that are not keys: the latch's channel comes in ARGV (as in Redisson); an RLock
# release's grant goes to the channel of the client it pops from the waiters' registry (a
# prefix in ARGV, with the lock's hash tag, and the client id read from the registration),
# given to grant_deliver.lua's deliver() by the releases of the RLock and the FairLock.
_CHANNELS_IN_ARGV = {
    ("latch_ops.lua", "ARGV[4]"),
    ("lock_unlock_one.lua", "ARGV[7] .. client"),
    ("fair_unlock.lua", "ARGV[7] .. client"),
}
_ROOTED = re.compile(r"KEYS\[[^\]]+\](\s*\.\.\s*.+)?$")  # KEYS[i], or KEYS[i] .. suffix
_DYNAMIC_CODE = re.compile(r"\b(loadstring|load|dofile|require|setfenv|getfenv|_G)\b")


def _calls(source: str, function: str) -> Iterator[list[str]]:
    """The argument lists (split on top-level commas) of every ``function(...)`` in
    ``source``, definitions (``local function f(a, b)``) included."""
    for match in re.finditer(r"(?<![\w.])" + re.escape(function) + r"\(", source):
        depth, start, i, quote = 1, match.end(), match.end(), ""
        args: list[str] = []
        while depth:
            ch = source[i]
            if quote:
                quote = "" if ch == quote else quote
            elif ch in "'\"":
                quote = ch
            elif ch == "(":
                depth += 1
            elif ch == ")":
                depth -= 1
            elif ch == "," and depth == 1:
                args.append(source[start:i].strip())
                start = i + 1
            i += 1
        args.append(source[start : i - 1].strip())
        yield args


def _script_violations(sources: dict[str, str], granted: set[str]) -> list[str]:
    """What breaks the rules in Lua ``sources`` (file name -> text without comment lines):

    * every key a ``redis.call``/``redis.pcall`` touches is a ``KEYS`` entry, or one with a
      suffix appended, or a local or helper parameter holding one (helpers' call sites are
      checked in turn): no ``ARGV`` datum, no literal, chooses a key;
    * a command is a literal the ACL user is granted, or comes from ``ARGV`` (the library
      passes ``PUBLISH``/``SPUBLISH``, ``pexpire``/``pexpireat``);
    * no code is built at run time.
    """
    found: list[str] = []
    helpers: dict[str, tuple[str, list[str]]] = {}  # name -> (file, parameters)
    for file, source in sources.items():
        for match in re.finditer(r"local function (\w+)\(([^)]*)\)", source):
            helpers[match[1]] = (file, [p.strip() for p in match[2].split(",") if p.strip()])
    key_params: dict[str, set[int]] = {}  # helper -> positions of parameters used as keys
    derived_in: dict[str, set[str]] = {}  # file -> its locals that hold a KEYS entry
    for file, source in sources.items():
        if _DYNAMIC_CODE.search(source):
            found.append(f"{file}: builds code at run time")
        derived = derived_in[file] = {
            m[1] for m in re.finditer(r"local (\w+) = (.+)", source) if _ROOTED.match(m[2].strip())
        }
        params = {
            p: (name, pos)
            for name, (where, ps) in helpers.items()
            if where == file
            for pos, p in enumerate(ps)
        }
        for call in ("redis.call", "redis.pcall"):
            for args in _calls(source, call):
                command, key = args[0], args[1] if len(args) > 1 else ""
                text = f"{file}: {call}({', '.join(args)})"
                if command.lower() == "'pubsub'" and key.startswith("'"):
                    # a container command: its subcommand is granted, its arguments are
                    # channels (an RLock's direct grant counts a client's subscribers)
                    command = f"'pubsub|{key.strip(chr(39))}'"
                    key = args[2] if len(args) > 2 else ""
                if command.startswith("'"):
                    if command.strip("'").lower() not in granted:
                        found.append(f"{text}: command not granted to the ACL user")
                elif not re.fullmatch(r"ARGV\[\d+\]", command) and command not in params:
                    found.append(f"{text}: command from data")
                if not key or _ROOTED.match(key) or key in derived:
                    continue
                if key in params:
                    name, pos = params[key]
                    key_params.setdefault(name, set()).add(pos)
                elif (file, key) not in _CHANNELS_IN_ARGV:
                    found.append(f"{text}: key not from KEYS")
    for name, positions in key_params.items():
        for file, source in sources.items():
            for args in _calls(source, name):
                if args == helpers[name][1]:
                    continue  # the definition
                for pos in positions:
                    if pos >= len(args):
                        continue  # left out: nil, no key (an optional key parameter)
                    key = args[pos]
                    if (
                        not _ROOTED.match(key)
                        and key not in derived_in[file]
                        and (file, key) not in _CHANNELS_IN_ARGV
                    ):
                        found.append(f"{file}: {name}({', '.join(args)}): key not from KEYS")
    return found


def test_scripts_take_every_key_from_KEYS() -> None:  # noqa: N802
    """Every key a script touches comes from ``KEYS``, every literal command is granted to
    the least-privilege user, and no code is built at run time."""
    granted = {rule[1:] for rule in ACL_COMMANDS if rule.startswith("+")}
    granted.add("pubsub|shardnumsub")  # a cluster's (ACL_COMMANDS' note lists it)
    sources = {
        path.name: "\n".join(
            line for line in path.read_text("utf-8").splitlines() if not line.startswith("--")
        )
        for path in _LUA.iterdir()
        if path.name.endswith(".lua")
    }
    assert len(sources) >= 20
    assert sum(len(list(_calls(s, "redis.call"))) for s in sources.values()) > 150
    assert _script_violations(sources, granted) == []

    # The checker itself catches what it looks for.
    bad = {
        "a.lua": "redis.call('set', ARGV[1], '1')",
        "b.lua": "redis.call('get', 'fixed:key')",
        "c.lua": "local k = ARGV[2]\nredis.call('del', k)",
        "d.lua": "redis.call('flushall')",
        "e.lua": "local c = 'del'\nredis.call(c, KEYS[1])",
        "f.lua": "loadstring(ARGV[1])()",
        "g.lua": "local function h(name)\n  redis.call('del', name)\nend\nh(ARGV[1])",
        "j.lua": "local function j(a, b)\n  redis.call('del', b)\nend\n"
        "local k = ARGV[1]\nj(KEYS[1], k)",
    }
    violations = _script_violations(bad, granted)
    assert {v.split(":")[0] for v in violations} == set(bad), violations
    good = {
        "h.lua": "local function h(name)\n  redis.call('del', name)\nend\nh(KEYS[1] .. ':x')",
        "i.lua": "local k = KEYS[2] .. ':' .. ARGV[1]\nredis.call(ARGV[3], k, '0')",
        # a helper's key parameter given a local that holds a KEYS entry, or left out (nil)
        "k.lua": "local function f(a, b)\n  if b then redis.call('del', b) end\nend\n"
        "local k = KEYS[2]\nf(KEYS[1], k)\nf(KEYS[1])",
    }
    assert _script_violations(good, granted) == []
