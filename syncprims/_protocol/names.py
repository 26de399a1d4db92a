"""Redis key and channel names, Redisson compatible.

Pure: no I/O. The rules and the catalogue come from ``redisson-spec.md`` section 1.1
(Redisson ``RedissonObject.prefixName`` / ``suffixName``): every derived key or channel
carries the object's hash tag, so that one script only ever touches one cluster slot.
"""

from __future__ import annotations

__all__ = [
    "check_cluster_name",
    "check_name",
    "election_names",
    "fair_grant_registry_name",
    "has_hash_tag",
    "key_prefix",
    "lock_channel",
    "lock_handoff_list_prefix",
    "prefix_name",
    "rw_lease_prefix",
    "suffix_name",
    "unlock_key_name",
]


def check_name(name: object) -> str:
    """Validate an object name given by a user and return it.

    Args:
        name: the object's Redis key. Must be a non-empty ``str``.

    Returns:
        The name, unchanged.

    Raises:
        TypeError: ``name`` is not a ``str``.
        ValueError: ``name`` is empty, or cannot be encoded as UTF-8 (a lone surrogate).
    """
    if not isinstance(name, str):
        raise TypeError(f"object name must be a str, not {type(name).__name__}")
    if not name:
        raise ValueError("object name must not be empty")
    try:
        name.encode("utf-8")
    except UnicodeEncodeError as error:
        raise ValueError(f"object name must be encodable as UTF-8: {error}") from None
    return name


def has_hash_tag(name: str) -> bool:
    """Whether Redis Cluster hashes ``name`` by a tag: a ``{`` followed by a ``}`` with at
    least one character between them (the first such pair counts)."""
    start = name.find("{")
    if start < 0:
        return False
    end = name.find("}", start + 1)
    return end > start + 1


def check_cluster_name(name: str) -> str:
    """Refuse, for a cluster, a name whose derived keys would fall in other slots.

    Redisson's rule keeps a name that contains ``{`` as it is in the names it derives
    (``prefix:name``), which only shares the name's slot when the ``{`` opens a real hash
    tag. ``"{}x"`` or ``"a{b"`` would make every script fail with CROSSSLOT.

    Raises:
        ValueError: the name contains ``{`` but no hash tag.
    """
    if "{" in name and not has_hash_tag(name):
        raise ValueError(
            f"in a cluster, a name containing '{{' must hold a hash tag like '{{tag}}' "
            f"(its derived keys would fall in other slots): {name!r}"
        )
    return name


def prefix_name(prefix: str, name: str) -> str:
    """``prefix:{name}``, or ``prefix:name`` when ``name`` already has a hash tag."""
    if "{" in name:
        return f"{prefix}:{name}"
    return f"{prefix}:{{{name}}}"


def suffix_name(name: str, suffix: str) -> str:
    """``{name}:suffix``, or ``name:suffix`` when ``name`` already has a hash tag."""
    return f"{key_prefix(name)}:{suffix}"


def key_prefix(name: str) -> str:
    """``{name}``, or the name itself when it has a hash tag (prefix of derived keys)."""
    return name if "{" in name else f"{{{name}}}"


def rw_lease_prefix(name: str, reader_field: str) -> str:
    """The prefix of one reader's lease keys: ``{name}:<reader field>:rwlock_timeout``."""
    return f"{key_prefix(name)}:{reader_field}:rwlock_timeout"


def lock_channel(name: str) -> str:
    """The unlock channel of an RLock, FencedLock or FairLock: ``redisson_lock__channel:{name}``."""
    return prefix_name("redisson_lock__channel", name)


def unlock_key_name(name: str, request_id: str) -> str:
    """The unlock idempotency key of one unlock call (Redisson 3.24+).

    ``redisson_unlock_latch:{name}:<request id>``; it holds the result of the first
    execution of that unlock so that a retry of the same call returns the same result.
    """
    return prefix_name("redisson_unlock_latch", name) + ":" + request_id


def rw_writers_name(name: str) -> str:
    """The waiting writers of a read-write lock with writer preference (syncprims only):
    ``syncprims_rwlock_writers:{name}``, a sorted set of writer fields by expiry."""
    return prefix_name("syncprims_rwlock_writers", name)


def lock_waiters_name(name: str) -> str:
    """The syncprims clients waiting for an RLock (syncprims only):
    ``syncprims_lock_waiters:{name}``, a sorted set of client ids by expiry."""
    return prefix_name("syncprims_lock_waiters", name)


def lock_herald_channel(name: str) -> str:
    """The channel on which an RLock release names the one syncprims client to wake
    (syncprims only): ``syncprims_lock_herald:{name}``."""
    return prefix_name("syncprims_lock_herald", name)


def lock_grant_channel_prefix(name: str) -> str:
    """The start of an RLock's one-hop grant channels (syncprims only):
    ``syncprims_lock_grant:{name}:``; a client's own channel ends with its client id."""
    return prefix_name("syncprims_lock_grant", name) + ":"


def lock_handoff_list_prefix(name: str) -> str:
    """The start of the lists an RLock release pushes a direct grant on (syncprims only):
    ``syncprims_lock_handoff:{name}:``; a waiting thread's list goes on with
    ``<wait id>|<owner field>``. Each lives while its wait does (at most the lease after
    a push)."""
    return prefix_name("syncprims_lock_handoff", name) + ":"


def fair_grant_registry_name(name: str) -> str:
    """A FairLock's one-hop grant registry (syncprims only): owner field -> ``"<wait slot
    ms> <registration>"`` of each queued waiter that a release may hand the lock to
    (``fair_acquire.lua``): ``syncprims_lock_waiters:{name}:fair``, beside the RLock's
    registry, so that the ACL rules that allow the RLock's grant allow it too. It expires
    10 s after the last registration."""
    return lock_waiters_name(name) + ":fair"


def lock_grant_marker_name(name: str) -> str:
    """The registration an RLock release granted the lock to, while that hold lasts (an
    attempt that claims the grant, or the hold's release, deletes it; syncprims only):
    ``syncprims_lock_granted:{name}``."""
    return prefix_name("syncprims_lock_granted", name)


def lock_reservation_name(name: str) -> str:
    """Which syncprims client a released RLock is reserved for, briefly (syncprims only):
    ``syncprims_lock_next:{name}``."""
    return prefix_name("syncprims_lock_next", name)


def election_names(name: str) -> tuple[str, str, str]:
    """A leader election's own names (syncprims only), all in the slot of ``{name}``: its
    lock ``syncprims_election:{name}`` (a FairLock's hash that also holds the leader's
    record), the term counter ``syncprims_election_term:{name}`` and the channel its
    observers listen on, ``syncprims_election_channel:{name}``."""
    return (
        prefix_name("syncprims_election", name),
        prefix_name("syncprims_election_term", name),
        prefix_name("syncprims_election_channel", name),
    )
