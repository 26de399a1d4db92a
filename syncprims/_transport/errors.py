"""The one boundary where redis-py's exceptions become syncprims errors.

Every call the transport makes on a redis-py connection goes through :func:`translate` when
it fails, with whether the command may have reached the server (``sent``): the core decides
from ``TransportError.maybe_executed`` whether an operation may be retried.
"""

from __future__ import annotations

from syncprims._transport.compat import ERRORS
from syncprims.errors import (
    AuthenticationError,
    RedisConnectionError,
    RedisTimeoutError,
    ServerReplyError,
    SyncPrimsError,
    TransportError,
)

__all__ = ["ClusterRedirectError", "error_code", "redirection", "translate"]


class ClusterRedirectError(TransportError):
    """A cluster redirection: MOVED, ASK, TRYAGAIN or CLUSTERDOWN. The command did not run.

    Attributes:
        kind: ``"moved"``, ``"ask"``, ``"tryagain"`` or ``"down"``.
        slot: the slot (moved/ask), else ``None``.
        node: ``(host, port)`` to go to (moved/ask), else ``None``.
        cause: the client library's exception (``MovedError`` and ``AskError`` feed its slot
            map).
    """

    def __init__(
        self,
        message: str,
        *,
        kind: str,
        slot: int | None,
        node: tuple[str, int] | None,
        cause: Exception,
    ) -> None:
        super().__init__(message, maybe_executed=False)
        self.kind = kind
        self.slot = slot
        self.node = node
        self.cause = cause


def redirection(error: BaseException, context: str) -> ClusterRedirectError | None:
    """The :class:`ClusterRedirectError` a redis-py (or valkey-py) error stands for, if it is
    one."""
    if isinstance(error, ERRORS.ask):  # MovedError is a subclass
        kind = "moved" if isinstance(error, ERRORS.moved) else "ask"
        slot, address = getattr(error, "slot_id", 0), getattr(error, "node_addr", "?")
        return ClusterRedirectError(
            f"{kind} while {context}: slot {slot} is at {address}",
            kind=kind,
            slot=int(slot),
            node=(str(getattr(error, "host", "")), int(getattr(error, "port", 0))),
            cause=error,
        )
    if isinstance(error, ERRORS.try_again):
        return ClusterRedirectError(
            f"TRYAGAIN while {context}", kind="tryagain", slot=None, node=None, cause=error
        )
    if isinstance(error, ERRORS.cluster_down):
        return ClusterRedirectError(
            f"CLUSTERDOWN while {context}", kind="down", slot=None, node=None, cause=error
        )
    return None


def error_code(error: BaseException) -> str:
    """Redis's error code of a client library's error reply: the class's (redis-py drops
    the code of the replies it maps to a class: ``NOPERM``, ``NOSCRIPT``, ``READONLY``,
    ...), else the message's first word when it is one (upper case)."""
    for code, kinds in (
        ("NOPERM", ERRORS.no_permission),
        ("NOSCRIPT", ERRORS.no_script),
        ("READONLY", ERRORS.read_only),
    ):
        if isinstance(error, kinds):
            return code
    first = str(error).split(" ", 1)[0]
    return first if first.isupper() and first.replace("_", "").isalpha() else ""


def translate(
    error: BaseException, *, context: str, address: str, timeout: float, sent: bool
) -> SyncPrimsError:
    """Turn a redis-py, valkey-py (once in use) or socket error into the matching syncprims
    error.

    Args:
        error: what redis-py raised.
        context: what was being done, e.g. ``"acquiring lock 'x'"``.
        address: the server, for the message (no password).
        timeout: the reply timeout in force, seconds.
        sent: whether the command may have reached the server.

    Returns:
        The error to raise (``raise translated from error``); a syncprims error unchanged.
    """
    if isinstance(error, SyncPrimsError):  # ours are redis-py errors too: never wrap twice
        return error
    redirect = redirection(error, context)
    if redirect is not None:
        return redirect
    if isinstance(error, ERRORS.read_only) or "previous master is now a slave" in str(error):
        # A failover demoted this server: the command did not run; the next connection
        # finds the new master.
        return RedisConnectionError(
            f"Redis at {address} is no longer the master while {context}: {error}",
            maybe_executed=False,
        )
    if isinstance(error, ERRORS.authentication) and _no_password(error):
        return AuthenticationError(
            f"Redis at {address} wants a password and none was given while {context}: put "
            "it in the URL (redis://[user]:password@host:port) or as the client's password=",
            code="NOAUTH",
        )
    if isinstance(error, ERRORS.authentication):
        return AuthenticationError(
            f"Redis at {address} refused the credentials while {context}: {error} (check the "
            "user name and password, and that the user is enabled)",
            code=error_code(error) or "WRONGPASS",
        )
    if isinstance(error, (*ERRORS.timeout, TimeoutError)):
        return RedisTimeoutError(
            f"Redis at {address} did not reply within {timeout:g} s while {context}",
            maybe_executed=sent,
        )
    if isinstance(error, ERRORS.max_connections):  # redis-py >= 6 (5: a ConnectionError)
        return RedisConnectionError(
            f"the connection pool of Redis at {address} has no free connection while "
            f"{context} ({error})",
            maybe_executed=False,
        )
    if isinstance(error, (*ERRORS.connection, ConnectionError, OSError)):
        return RedisConnectionError(
            f"connection to Redis at {address} failed while {context}: {error}",
            maybe_executed=sent,
        )
    if isinstance(error, ERRORS.invalid_response):
        return RedisConnectionError(
            f"the server at {address} does not speak the Redis protocol ({error}) while "
            f"{context}: check the URL's host and port",
            maybe_executed=sent,
        )
    if isinstance(error, ERRORS.response):
        code = error_code(error)
        shown = f"{code} {error}" if code and not str(error).startswith(code) else str(error)
        return ServerReplyError(f"Redis at {address} refused {context}: {shown}", code=code)
    return SyncPrimsError(
        f"Redis client error while {context} (Redis at {address}): {type(error).__name__}: {error}"
    )


def _no_password(error: BaseException) -> bool:
    """Whether an authentication error says that no password was sent (``NOAUTH``, or
    Redis 6+'s refusal of an unauthenticated ``HELLO``)."""
    text = str(error)
    return (
        text.startswith("NOAUTH")
        or "Authentication required" in text
        or ("HELLO must be called with the client already authenticated" in text)
    )
