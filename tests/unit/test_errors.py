"""``ServerReplyError.code``: Redis's error code as a field, so that nothing matches message
text (issue 29), also where redis-py maps the code to a class and drops it."""

from __future__ import annotations

import pytest
import redis.exceptions

from syncprims import AuthenticationError, ServerReplyError
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
