"""The Lua scripts, loaded from the ``lua/`` package data.

Pure: reads package files, no I/O to Redis. Each script file starts with a comment naming
its ``KEYS``, ``ARGV`` and replies. Scripts are constant texts: every datum travels through
``KEYS``/``ARGV``, never by string interpolation.
"""

from __future__ import annotations

import hashlib
from importlib import resources

import attrs

__all__ = ["Script", "load"]


@attrs.frozen
class Script:
    """A Lua script and its SHA-1 (the ``EVALSHA`` digest).

    Attributes:
        name: the file stem, e.g. ``"lock_acquire"``.
        source: the Lua text.
        sha: 40 lowercase hex characters.
    """

    name: str
    source: str = attrs.field(repr=False)
    sha: str


def _read(name: str) -> str:
    return resources.files(__package__).joinpath("lua", f"{name}.lua").read_text("utf-8")


def load(name: str) -> Script:
    """Load ``lua/<name>.lua`` from the package.

    A line ``-- @include <other>`` is replaced by ``lua/<other>.lua`` (shared helpers, such
    as the fair lock's stale-waiter purge, are written once).

    Raises:
        FileNotFoundError: no such script.
    """
    lines = []
    for line in _read(name).splitlines(keepends=True):
        if line.startswith("-- @include "):
            lines.append(_read(line.removeprefix("-- @include ").strip()))
        else:
            lines.append(line)
    source = "".join(lines)
    return Script(name=name, source=source, sha=hashlib.sha1(source.encode("utf-8")).hexdigest())


LOCK_ACQUIRE = load("lock_acquire")
LOCK_ACQUIRE_NR = load("lock_acquire_nr")
REENTRY_ERR = "NON_REENTRANT_REACQUIRE"
"""The error code ``LOCK_ACQUIRE_NR`` replies to a refused reentry (Redisson 4.4's
``RedissonNonReentrantLock.REENTRY_ERR``; ``_core/nonreentrant.py``)."""
LOCK_UNLOCK = load("lock_unlock")
LOCK_FORCE_UNLOCK = load("lock_force_unlock")
LOCK_RENEW = load("lock_renew")
HOLDS_CHECK = load("holds_check")
FAIR_ACQUIRE = load("fair_acquire")
FAIR_GIVE_UP = load("fair_give_up")
FAIR_UNLOCK = load("fair_unlock")
FAIR_FORCE_UNLOCK = load("fair_force_unlock")
RW_READ_ACQUIRE = load("rw_read_acquire")
RW_READ_UNLOCK = load("rw_read_unlock")
RW_WRITE_ACQUIRE = load("rw_write_acquire")
RW_WRITE_UNLOCK = load("rw_write_unlock")
RW_FORCE_UNLOCK = load("rw_force_unlock")
RW_READ_RENEW = load("rw_read_renew")
LOCK_ACQUIRE_ONE = load("lock_acquire_one")
LOCK_UNLOCK_ONE = load("lock_unlock_one")
RW_READ_ACQUIRE_WP = load("rw_read_acquire_wp")
RW_WRITE_ACQUIRE_WP = load("rw_write_acquire_wp")
RW_WRITE_GIVE_UP = load("rw_write_give_up")
SEM_ACQUIRE = load("sem_acquire")
SEM_RELEASE = load("sem_release")
SEM_SET = load("sem_set")
PES_ACQUIRE = load("pes_acquire")
PES_RELEASE = load("pes_release")
PES_ADMIN = load("pes_admin")
PES_ACQUIRE_MANY = load("pes_acquire_many")
PES_RELEASE_MANY = load("pes_release_many")
PES_GET_PERMITS = load("pes_get_permits")
PES_ADD_PERMITS = load("pes_add_permits")
PES_LEASE_TIME = load("pes_lease_time")
SEM_TRY_SET_TTL = load("sem_try_set_ttl")
SEM_RELEASE_IF_EXISTS = load("sem_release_if_exists")
LATCH_OPS = load("latch_ops")
FENCED_ACQUIRE = load("fenced_acquire")
FENCED_ACQUIRE_DURABLE = load("fenced_acquire_durable")
SPIN_UNLOCK = load("spin_unlock")
SPIN_FORCE_UNLOCK = load("spin_force_unlock")
EXPIRE = load("expire")
CLEAR_EXPIRE = load("clear_expire")
ELECTION_SEAT = load("election_seat")
ELECTION_READ = load("election_read")
