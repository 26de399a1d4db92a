"""The errors syncprims raises: one tree with one root, ``SyncPrimsError`` (the tree, what
each error means and what to do about it: docs/errors.md).

Transport errors are translated from redis-py's exceptions at one boundary (the command
executor); the original is chained as ``__cause__``.
"""

from __future__ import annotations

import redis.exceptions

__all__ = [
    "AuthenticationError",
    "ClientClosedError",
    "LockError",
    "LockLostError",
    "LockNotHeldError",
    "LockReentryError",
    "LockTimeoutError",
    "MonkeyPatchedError",
    "PermitNotHeldError",
    "ReplicaSyncError",
    "RedisConnectionError",
    "RedisTimeoutError",
    "ServerReplyError",
    "SyncPrimsError",
    "TransportError",
]


class SyncPrimsError(Exception):
    """The root of every error syncprims raises (bad arguments aside)."""


class LockError(SyncPrimsError):
    """A lock operation was refused.

    Attributes:
        name: the lock's name.
        owner: the owner field (``"<client uuid>:<owner id>"``) the operation was made for,
            or ``None``.
    """

    def __init__(self, message: str, *, name: str, owner: str | None = None) -> None:
        super().__init__(message)
        self.name = name
        self.owner = owner


class LockNotHeldError(LockError, RuntimeError):
    """``unlock()`` by an owner that does not hold the lock (also when it expired)."""


class LockReentryError(LockError, RuntimeError):
    """An owner that holds a non-reentrant lock tried to acquire it again (Redisson 4.4's
    ``IllegalMonitorStateException`` of ``RedissonNonReentrantLock``; the server refused it
    with the error code ``NON_REENTRANT_REACQUIRE`` and changed nothing). The hold it has is
    kept."""


class LockLostError(LockError):
    """A held lock was lost: it expired, was force-unlocked, or could not be renewed."""


class LockTimeoutError(LockError, TimeoutError):
    """A lock could not be acquired within its wait time (a ``synchronized`` function given a
    ``wait_time``; ``try_lock`` answers ``False`` instead)."""


class PermitNotHeldError(SyncPrimsError, ValueError):
    """Release of a permit id that is unknown, already released, or whose lease ran out.

    Attributes:
        name: the semaphore's name.
        permit_id: the id, as given.
    """

    def __init__(self, message: str, *, name: str, permit_id: str) -> None:
        super().__init__(message)
        self.name = name
        self.permit_id = permit_id


class ReplicaSyncError(SyncPrimsError):
    """Fewer replicas than ``Config.lock_synced_replicas`` acknowledged an acquisition in
    time; it was undone (Redisson's ``NoSyncedSlavesException``).

    Attributes:
        name: the object's name.
        acknowledged: replicas that acknowledged.
        required: replicas required.
    """

    def __init__(self, message: str, *, name: str, acknowledged: int, required: int) -> None:
        super().__init__(message)
        self.name = name
        self.acknowledged = acknowledged
        self.required = required


class TransportError(SyncPrimsError):
    """Redis could not be reached, or did not answer in time.

    Attributes:
        maybe_executed: ``True`` when the command may have run on the server (the failure
            came after it was sent); ``False`` when it certainly did not.
    """

    def __init__(self, message: str, *, maybe_executed: bool) -> None:
        super().__init__(message)
        self.maybe_executed = maybe_executed

    def __repr__(self) -> str:  # before redis-py's RedisError's, less useful, in the leaves
        return f"{type(self).__name__}({str(self)!r})"


class RedisConnectionError(TransportError, redis.exceptions.ConnectionError, ConnectionError):
    """The connection to Redis failed or broke (also ``redis.exceptions.ConnectionError``)."""


class RedisTimeoutError(TransportError, redis.exceptions.TimeoutError, TimeoutError):
    """Redis did not answer within the configured timeout (also
    ``redis.exceptions.TimeoutError``)."""


class ServerReplyError(SyncPrimsError):
    """Redis answered with an error reply (a script error, an ACL refusal, ...).

    Attributes:
        code: Redis's error code, the reply's first word (``"NOPERM"``, ``"NOSCRIPT"``,
            ``"UNBLOCKED"``, ``"WRONGPASS"``, ``"ERR"``, ...), also where redis-py turned
            it into an exception class and dropped it from the message; ``""`` when the
            reply had none. Compare this, not the message text.

    The redis-py exception is chained as ``__cause__``.
    """

    def __init__(self, message: str, *, code: str = "") -> None:
        super().__init__(message)
        self.code = code


class AuthenticationError(ServerReplyError):
    """Redis refused the user name or password (``WRONGPASS``, a disabled user, ``AUTH``
    without a password set). Never retried: it cannot succeed by trying again."""


class ClientClosedError(SyncPrimsError, RuntimeError):
    """The client was shut down; create a new one."""


class MonkeyPatchedError(SyncPrimsError, RuntimeError):
    """``syncprims.connect()`` (the sync face) was called in a process that gevent or
    eventlet monkey-patched: its services thread and blocking sockets would become greenlets
    of one OS thread, and a lock could expire while its holder runs (docs/asyncio.md,
    "gevent and eventlet"). Use the asyncio face there, or an unpatched process."""
