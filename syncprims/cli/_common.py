"""What the subcommands share: reaching the server once, and failing in one line.

A command that cannot start (no server, refused credentials, a URL that is not Redis's)
raises :class:`CommandError`; ``syncprims.cli.main`` prints its message as one line on
stderr and exits with its status, without a traceback.
"""

from __future__ import annotations

import os
from typing import Any
from urllib.parse import urlsplit

from syncprims._transport.compat import ERRORS
from syncprims._transport.errors import error_code
from syncprims._transport.sources import client_from_url, redact

__all__ = ["CHECK_TIMEOUT", "CommandError", "checked_redis", "default_url", "redact"]

CHECK_TIMEOUT = 3.0
"""Seconds a command waits to connect to the server, and for each reply, before it gives up."""


class CommandError(Exception):
    """A command cannot go on: ``str(error)`` is the one line to print.

    Attributes:
        status: the exit status (2: bad input or unreachable server; 1: the run failed).
    """

    def __init__(self, message: str, status: int = 2) -> None:
        super().__init__(message)
        self.status = status


def default_url() -> str | None:
    """``$REDIS_URL``, or ``None`` when it is unset or empty."""
    return os.environ.get("REDIS_URL") or None


def checked_redis(url: str) -> Any:
    """A client for ``url``, any form :func:`syncprims.connect` takes (a valkey-py client
    for ``valkey://`` forms), that has answered one PING.

    Args:
        url: the server's URL.

    Returns:
        A ``redis.Redis``, ``redis.RedisCluster`` or their valkey-py twins; the caller
        closes it.

    Raises:
        CommandError: a malformed URL, refused credentials, or a server that does not answer
            within :data:`CHECK_TIMEOUT` seconds (the message names the URL without its password).
    """
    where = redact(url)
    try:
        client: Any = client_from_url(url, timeout=CHECK_TIMEOUT, connect_timeout=CHECK_TIMEOUT)
    except ImportError as error:  # valkey:// without valkey-py
        raise CommandError(f"cannot use {where}: {error}") from None
    except (ValueError, TypeError) as error:
        raise CommandError(f"bad Redis URL {where!r}: {error}") from None
    except (*ERRORS.failures, *ERRORS.cluster) as error:  # a cluster's seeds did not answer
        raise CommandError(f"cannot reach Redis at {where}: {_reason(error)}") from None
    try:
        client.ping()
    except BaseException as error:
        client.close()
        code = error_code(error) if isinstance(error, ERRORS.response) else ""
        if isinstance(error, ERRORS.authentication) or code in (
            "NOAUTH",
            "WRONGPASS",
            "NOPERM",
        ):
            if urlsplit(url).password is None and code != "NOPERM":
                raise CommandError(
                    f"Redis at {where} wants a password and the URL gives none "
                    "(redis://[user]:password@host:port)"
                ) from None
            raise CommandError(
                f"Redis at {where} refused the credentials: {_reason(error)}"
            ) from None
        if isinstance(error, ERRORS.master_not_found):
            raise CommandError(
                f"cannot reach Redis at {where}: no sentinel answered with that master"
            ) from None
        if isinstance(error, (*ERRORS.failures, *ERRORS.cluster)):
            raise CommandError(f"cannot reach Redis at {where}: {_reason(error)}") from None
        raise
    return client


def _reason(error: BaseException) -> str:
    """The error's message on one line (at most 200 characters), or its type's name."""
    text = " ".join(str(error).split())
    if len(text) > 200:
        text = text[:199] + "…"
    return text or type(error).__name__
