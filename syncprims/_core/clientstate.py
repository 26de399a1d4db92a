"""What a client's locks share, kept per client (one :class:`ClientLocks` per executor):
the ACL fall-back decision, the callers waiting now, and the late-release book-keeping.

These were class-level registries of ``LockCore`` keyed by client id; per client, two
clients of one process cannot see each other's entries, and a forked child starts with none
(its client id is new: the parent's holds, waits and refusals are not its own).
"""

from __future__ import annotations

import logging
import os
import threading
import weakref

from syncprims._core.kept import KeptCalls
from syncprims._protocol.contracts import Executor
from syncprims.errors import ServerReplyError

__all__ = ["ClientLocks", "client_locks"]

log = logging.getLogger("syncprims.lock")


class ClientLocks:
    """One client's lock book-keeping (its lock objects share it)."""

    __slots__ = ("holds", "incarnations", "kept", "local_waiters", "own_keys_refused", "tainted")

    own_keys_refused: bool
    local_waiters: dict[str, set[object]]
    holds: dict[tuple[str, int], int]
    incarnations: dict[tuple[str, int], int]
    tainted: set[tuple[str, str]]
    kept: KeptCalls

    def __init__(self) -> None:
        self.clear()

    def clear(self) -> None:
        """Forget everything (a forked child's clients)."""
        # The ACL fall-back: the client's Redis user may not touch syncprims' own keys (an
        # ACL written for Redisson's keys), so its locks use Redisson's scripts and wake-ups.
        self.own_keys_refused = False
        # lock name -> tokens of this process's callers waiting for it now (one wake-up)
        self.local_waiters = {}
        # Late releases (``syncprims._core.release``), keyed by (lock name, owner id): holds
        # its callers have (acquires returned minus unlocks called, on any object of the
        # name: both sides of a read-write lock count together), and its field's incarnation.
        self.holds = {}
        self.incarnations = {}
        # (lock name, field) of releases whose outcome is unknown and may have ended a last
        # hold (or acquires whose reply is still to come)
        self.tainted = set()
        # The client's locks' calls encoded once (``syncprims._core.kept``), keyed by lock
        # name and all a call is made from: shared by every lock object of a name, so that
        # one made per use (``client.get_lock(name)`` in a request handler) benefits too.
        self.kept = KeptCalls()

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


_STATES: weakref.WeakKeyDictionary[Executor, ClientLocks] = weakref.WeakKeyDictionary()
_MAKING = threading.Lock()


def client_locks(executor: Executor) -> ClientLocks:
    """The book-keeping of ``executor``'s client (made at its first lock object, once even
    when two threads make their first lock objects at the same moment)."""
    state = _STATES.get(executor)
    if state is None:
        with _MAKING:
            state = _STATES.get(executor)
            if state is None:
                state = _STATES[executor] = ClientLocks()
    return state


def _forget_in_child() -> None:
    """In a forked child: every client has a new id; nothing of the parent's is its own."""
    global _MAKING
    _MAKING = threading.Lock()  # the parent's may have been taken when it forked
    for state in list(_STATES.values()):
        state.clear()


os.register_at_fork(after_in_child=_forget_in_child)
