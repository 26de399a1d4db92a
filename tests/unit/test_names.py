"""Key and channel names match Redisson's catalogue (redisson-spec.md 1.1)."""

from __future__ import annotations

import pytest

from syncprims._protocol.names import (
    check_cluster_name,
    check_name,
    has_hash_tag,
    lock_channel,
    prefix_name,
    suffix_name,
    unlock_key_name,
)


def test_prefix_wraps_a_plain_name_in_a_hash_tag() -> None:
    assert prefix_name("redisson_lock_queue", "foo") == "redisson_lock_queue:{foo}"


def test_prefix_keeps_an_existing_hash_tag() -> None:
    assert prefix_name("redisson_lock_queue", "{t}:x") == "redisson_lock_queue:{t}:x"


def test_suffix() -> None:
    assert suffix_name("foo", "timeout") == "{foo}:timeout"
    assert suffix_name("{t}:x", "timeout") == "{t}:x:timeout"


def test_lock_channel_has_the_double_underscore() -> None:
    assert lock_channel("foo") == "redisson_lock__channel:{foo}"
    assert lock_channel("{t}:x") == "redisson_lock__channel:{t}:x"


def test_unlock_key_name() -> None:
    rid = "0123456789abcdef0123456789abcdef"
    assert unlock_key_name("foo", rid) == f"redisson_unlock_latch:{{foo}}:{rid}"


@pytest.mark.parametrize(("bad", "error"), [("", ValueError), (None, TypeError), (b"x", TypeError)])
def test_check_name_rejects(bad: object, error: type[Exception]) -> None:
    with pytest.raises(error):
        check_name(bad)


def test_check_name_accepts_any_non_empty_str() -> None:
    assert check_name("a b:{c}") == "a b:{c}"


@pytest.mark.parametrize(
    ("name", "tagged"),
    [
        ("plain", False),
        ("{t}x", True),
        ("a{b}c", True),
        ("{}x", False),
        ("a{b", False),
        ("}{x}", True),
    ],
)
def test_hash_tags_follow_redis_cluster(name: str, tagged: bool) -> None:
    assert has_hash_tag(name) is tagged


def test_cluster_names() -> None:
    assert check_cluster_name("{t}:x") == "{t}:x"
    assert check_cluster_name("plain") == "plain"
    with pytest.raises(ValueError, match="hash tag"):
        check_cluster_name("{}x")
