"""``ServerReplyError.code``: Redis's error code as a field, so that nothing matches message
text (issue 29), also where redis-py maps the code to a class and drops it."""

from __future__ import annotations

import re

import pytest
import redis.exceptions

from syncprims import AuthenticationError, RedisConnectionError, ServerReplyError
from syncprims._protocol.timing import threading_wait
from syncprims._transport.errors import error_code, translate


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (redis.exceptions.NoPermissionError("this user has no permissions"), "NOPERM"),
        (redis.exceptions.NoScriptError("No matching script"), "NOSCRIPT"),
        (redis.exceptions.ReadOnlyError("You can't write against a read only replica"), "READONLY"),
        (
            redis.exceptions.ResponseError("UNBLOCKED client unblocked via CLIENT UNBLOCK"),
            "UNBLOCKED",
        ),
        (redis.exceptions.ResponseError("ERR user_script:1: Script attempted"), "ERR"),
        (redis.exceptions.ResponseError("WRONGTYPE Operation against a key"), "WRONGTYPE"),
        (redis.exceptions.ResponseError("something without a code"), ""),
    ],
)
def test_error_code(error: Exception, code: str) -> None:
    assert error_code(error) == code


def test_a_translated_reply_carries_its_code() -> None:
    refused = translate(
        redis.exceptions.NoPermissionError("this user has no permissions to run 'evalsha'"),
        context="acquiring lock 'x'",
        address="127.0.0.1:6379",
        timeout=3.0,
        sent=True,
    )
    assert isinstance(refused, ServerReplyError)
    assert refused.code == "NOPERM"
    assert "NOPERM this user" in str(refused)  # the message still shows it
    unblocked = translate(
        redis.exceptions.ResponseError("UNBLOCKED force unblock from blocking operation"),
        context="waiting for replicas",
        address="127.0.0.1:6379",
        timeout=3.0,
        sent=True,
    )
    assert isinstance(unblocked, ServerReplyError) and unblocked.code == "UNBLOCKED"
    assert str(unblocked).count("UNBLOCKED") == 1


def test_an_authentication_error_has_a_code() -> None:
    error = translate(
        redis.exceptions.AuthenticationError("invalid username-password pair"),
        context="connecting",
        address="127.0.0.1:6379",
        timeout=3.0,
        sent=False,
    )
    assert isinstance(error, AuthenticationError) and error.code == "WRONGPASS"


def _translated(error: Exception) -> Exception:
    return translate(error, context="connecting", address="db:6379", timeout=3.0, sent=False)


@pytest.mark.parametrize(
    "reply",
    [
        "HELLO must be called with the client already authenticated, otherwise the HELLO "
        "AUTH <user> <pass> option can be used",
        "Authentication required.",
        "NOAUTH Authentication required.",
    ],
)
def test_a_server_that_wants_a_password_says_so(reply: str) -> None:
    error = _translated(redis.exceptions.AuthenticationError(reply))
    assert isinstance(error, AuthenticationError) and error.code == "NOAUTH"
    assert str(error).startswith("Redis at db:6379 wants a password and none was given")
    assert "redis://[user]:password@host:port" in str(error)


def test_a_server_that_is_not_redis_is_named_with_what_it_sent() -> None:
    error = _translated(redis.exceptions.InvalidResponse('Protocol error, got "H"'))
    assert isinstance(error, RedisConnectionError)
    assert str(error) == (
        'the server at db:6379 does not speak the Redis protocol (Protocol error, got "H") '
        "while connecting: check the URL's host and port"
    )


def test_another_client_error_keeps_its_type_and_text() -> None:
    error = _translated(redis.exceptions.DataError("Invalid input of type: 'dict'"))
    assert str(error) == (
        "Redis client error while connecting (Redis at db:6379): DataError: Invalid input of "
        "type: 'dict'"
    )


@pytest.mark.parametrize(
    ("permits", "blocking", "fix"),
    [
        (True, 2, "to take 2 permits, write acquire(permits=2)"),
        (False, 2, "to wait at most 2 s, write acquire(timeout=2)"),
        (True, 0.5, "to wait at most 0.5 s, write acquire(timeout=0.5)"),
    ],
)
def test_a_count_passed_as_blocking_says_what_to_write(
    permits: bool, blocking: float, fix: str
) -> None:
    with pytest.raises(TypeError, match=re.escape(fix)):
        threading_wait(blocking, -1, permits=permits)
