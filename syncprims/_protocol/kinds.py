"""The one table of the kinds of object: each kind's names and where it is made.

``info()``, the error messages, the metrics, ``syncprims inspect``, ``syncprims demo`` and
the tests read this table; a new kind is one row here plus its module (CONTRIBUTING's
recipe). Each core class names its row (``ObjectCore.KIND``), and its ``kind`` (the
display name, in messages) is the row's.
"""

from __future__ import annotations

from typing import Any

import attrs

__all__ = ["KINDS", "Kind", "make"]


@attrs.frozen
class Kind:
    """One kind of object.

    Attributes:
        name: its short name: ``syncprims inspect --kind`` and ``syncprims demo
            --primitive`` take it.
        display: how messages and ``info()`` name it (``"fair lock"``).
        cls: its public class (``"FairLock"``).
        getter: the client method that makes it from a name (``"get_fair_lock"``; a side
            of a read-write lock: the read-write lock's, with ``side``); ``""`` for a kind
            made another way (a MultiLock, from locks).
        side: the method of the getter's object that gives it (``"write_lock"``), or ``""``.
        layout: how ``info()`` reads a lock's keys (``syncprims._core.info.lock_info``):
            ``"lock"``, ``"fair"``, ``"spin"``, ``"fenced"`` or ``"rw"``; ``""`` for a
            kind that is not a lock.
        inspect: whether ``syncprims inspect --kind`` takes it.
        demo: the demo's one-line description (``""``: not in the demo).
        generic: whether it behaves as an RLock does (the generic lock tests run on it).
    """

    name: str
    display: str
    cls: str
    getter: str = ""
    side: str = ""
    layout: str = ""
    inspect: bool = False
    demo: str = ""
    generic: bool = False

    @property
    def title(self) -> str:
        """The display name, with the class where the two differ (``syncprims inspect``)."""
        plain = self.display.replace("-", "").replace(" ", "").lower()
        return self.display if plain == self.cls.lower() else f"{self.display} ({self.cls})"


# fmt: off
_ROWS = (
    Kind("lock", "lock", "RLock", "get_lock", layout="lock", inspect=True, generic=True,
         demo="RLock, one holder at a time"),
    Kind("fair", "fair lock", "FairLock", "get_fair_lock", layout="fair", inspect=True,
         generic=True, demo="FairLock, one holder at a time in request order"),
    Kind("spin", "spin lock", "SpinLock", "get_spin_lock", layout="spin", generic=True,
         demo="SpinLock, one holder at a time, waiters poll (no pub/sub)"),
    Kind("nonreentrant", "non-reentrant lock", "NonReentrantLock", "get_non_reentrant_lock",
         layout="lock", demo="NonReentrantLock, one holder at a time, a second acquire is "
         "refused"),
    Kind("nonreentrant-fair", "non-reentrant fair lock", "NonReentrantFairLock",
         "get_non_reentrant_fair_lock", layout="fair",
         demo="NonReentrantFairLock, in request order, not reentrant"),
    Kind("fenced", "fenced lock", "FencedLock", "get_fenced_lock", layout="fenced",
         inspect=True, generic=True),
    Kind("rw", "read-write lock", "ReadWriteLock", "get_read_write_lock", layout="rw",
         inspect=True, demo="ReadWriteLock, many readers or one writer, see --read-ratio"),
    Kind("read", "read lock", "ReadLock", "get_read_write_lock", "read_lock", layout="rw"),
    Kind("write", "write lock", "WriteLock", "get_read_write_lock", "write_lock", layout="rw",
         generic=True),
    Kind("multi", "multi-lock", "MultiLock"),  # get_multi_lock(*locks): not made by a name
    Kind("redlock", "RedLock", "RedLock", "get_red_lock",
         demo="RedLock over independent masters, see --masters"),
    Kind("semaphore", "semaphore", "Semaphore", "get_semaphore", inspect=True,
         demo="Semaphore, at most --permits holders at once"),
    Kind("pes", "permit-expirable semaphore", "PermitExpirableSemaphore",
         "get_permit_expirable_semaphore", inspect=True),
    Kind("latch", "count-down latch", "CountDownLatch", "get_count_down_latch", inspect=True),
    Kind("election", "leader election", "LeaderElection", "get_leader_election",
         layout="fair", demo="LeaderElection, one leader at a time: each thread a candidate, "
         "each turn a leadership (campaign, then resign)"),
    Kind("object", "object", "RObject"),
)
# fmt: on

KINDS: dict[str, Kind] = {kind.name: kind for kind in _ROWS}
"""Every kind, by its short name, in the order the CLI lists them. Each ``info()`` layout is
also the short name of the kind it is named by (``KINDS[layout]``)."""


def make(kind: Kind, client: Any, name: str, **options: Any) -> Any:
    """A ``kind`` object named ``name`` of ``client`` (either face), made as a user makes it.

    Raises:
        ValueError: ``kind`` is not made by a client method (a MultiLock, an object).
    """
    if not kind.getter:
        raise ValueError(f"a {kind.display} is not made by one client method")
    made = getattr(client, kind.getter)(name, **options)
    return getattr(made, kind.side)() if kind.side else made
