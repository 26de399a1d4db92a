"""What a client's locks share (one :class:`ClientLocks` per client, a part of the state its
executor owns, ``Executor.state``): the ACL fall-back decision, the callers waiting now, the
late-release book-keeping, the calls encoded once and the waits a release may grant.

Per client, two clients of one process cannot see each other's entries, and a forked child
starts with none (its client id is new: the parent's holds, waits and refusals are not its
own); the executor's fork hook empties it in place, so the lock objects holding it keep it.
"""

from __future__ import annotations

import itertools
import logging
import threading

import attrs

from syncprims._core.lock.kept import KeptCalls
from syncprims._protocol.contracts import Executor
from syncprims._protocol.grantwait import GrantWait
from syncprims.errors import ServerReplyError

__all__ = ["ClientLocks", "client_locks"]

log = logging.getLogger("syncprims.lock")


@attrs.define(eq=False)
class ClientLocks:
    """One client's lock book-keeping (its lock objects share it)."""

    # The ACL fall-back: the client's Redis user may not touch syncprims' own keys (an ACL
    # written for Redisson's keys), so its locks use Redisson's scripts and wake-ups.
    own_keys_refused: bool = False
    # lock name -> tokens of this process's callers waiting for it now (one wake-up)
    local_waiters: dict[str, set[object]] = attrs.field(factory=dict)
    # Late releases (``syncprims._core.lock.release``), keyed by (lock name, owner id): holds
    # its callers have (acquires returned minus unlocks called, on any object of the
    # name: both sides of a read-write lock count together), and its field's incarnation.
    holds: dict[tuple[str, int], int] = attrs.field(factory=dict)
    incarnations: dict[tuple[str, int], int] = attrs.field(factory=dict)
    # (lock name, field) of releases whose outcome is unknown and may have ended a last
    # hold (or acquires whose reply is still to come)
    tainted: set[tuple[str, str]] = attrs.field(factory=set)
    kept: KeptCalls = attrs.field(factory=KeptCalls)  # the calls encoded once (``kept.py``)
    # The waits a release may grant the lock to (``syncprims._core.lock.grant``): every
    # member of every wait in progress -> its wait. The grant channel's rule runs on the
    # subscriber's thread: the waits' events are applied under ``grant_mutex``.
    grant_waits: dict[str, GrantWait] = attrs.field(factory=dict)
    grant_mutex: threading.Lock = attrs.field(factory=threading.Lock)
    wait_ids: itertools.count[int] = attrs.field(factory=lambda: itertools.count(1))

    def clear(self) -> None:
        """Forget everything (a forked child's clients): every field made anew, a new
        ``grant_mutex`` too (the parent's may have been taken)."""
        ClientLocks.__init__(self)

    def refuses_own_keys(self, error: ServerReplyError, *, tried: bool, where: str) -> bool:
        """The ACL fall-back, decided here for every lock kind (RLock, FairLock, MultiLock
        and RedLock ask): after ``error`` on a call that used syncprims' own keys
        (``tried``), whether the call should be made again with Redisson's script. A
        ``NOPERM`` (nothing ran) turns syncprims' keys off for this client, logged once;
        ``where``: the keys the warning names."""
        if not tried or error.code != "NOPERM":
            return False
        if self.own_keys_refused:
            return True  # another call of this client found it first
        self.own_keys_refused = True
        log.warning(
            "the Redis user may not use the keys of the one wake-up per release and the "
            "one-hop grant (%s...): falling back to Redisson's wake-ups (for an RLock, a "
            "waiter in every waiting client per release); grant ~syncprims_lock_* keys and "
            "&syncprims_lock_herald:* and "
            "&syncprims_lock_grant:* channels "
            "to get it back (docs/configuration.md)",
            where,
        )
        return True


def client_locks(executor: Executor) -> ClientLocks:
    """The book-keeping of ``executor``'s client (made at its first lock object)."""
    return executor.state.of(ClientLocks)
