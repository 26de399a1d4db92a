"""The RLock as a package: its algorithm (:mod:`~syncprims._core.lock.core`) and the parts
it owns, each a module of its own (``docs/design.md``, "Waking waiters").

The lock kinds built on it (FairLock, SpinLock, FencedLock, both read-write sides, the
non-reentrant locks, the leader election's lock) and the MultiLock use the names below.
"""

from syncprims._core.lock.core import LOCK_RENEWAL, AttemptUndo, LockCore
from syncprims._core.lock.grant import Grant
from syncprims._core.lock.holds import Holds
from syncprims._core.lock.release import Releases, release_on_exit
from syncprims._core.lock.replica_sync import ReplicaSync
from syncprims._core.lock.wakeup import ONE_WAKE_ENTRY_MS, UNLOCK_MESSAGE, lock_policy

__all__ = [
    "LOCK_RENEWAL",
    "ONE_WAKE_ENTRY_MS",
    "UNLOCK_MESSAGE",
    "AttemptUndo",
    "Grant",
    "Holds",
    "LockCore",
    "Releases",
    "ReplicaSync",
    "lock_policy",
    "release_on_exit",
]
