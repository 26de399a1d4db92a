"""Options are validated at construction; URLs become redis-py clients."""

from __future__ import annotations

import math
from datetime import timedelta
from typing import Any

import attrs
import pytest
import redis
import redis.asyncio

from syncprims import Config, redis_from_url
from syncprims._transport.sources import async_redis_from_url, redact, sync_source


def test_defaults_follow_redisson() -> None:
    config = Config()
    assert config.lock_watchdog_timeout == 30.0
    assert config.subscription_timeout == 7.5
    assert config.fair_lock_wait_timeout == 300.0
    assert config.watchdog_batch_size == 100
    assert config.retry_attempts == 4
    assert config.timeout is None  # the redis-py client's socket timeout, else 3 s


def test_timedelta_durations() -> None:
    config = Config(lock_watchdog_timeout=timedelta(seconds=9), timeout=1, retry_delay=(0.1, 1))
    assert config.lock_watchdog_timeout == 9.0
    assert config.timeout == 1.0
    assert config.retry_delay == (0.1, 1.0)


@pytest.mark.parametrize(
    ("options", "error"),
    [
        ({"lock_watchdog_timeout": 0}, ValueError),
        ({"lock_watchdog_timeout": -1}, ValueError),
        ({"lock_watchdog_timeout": math.nan}, ValueError),
        ({"lock_watchdog_timeout": math.inf}, ValueError),
        ({"lock_watchdog_timeout": "30"}, TypeError),
        ({"timeout": 0}, ValueError),
        ({"timeout": "3"}, TypeError),
        ({"retry_attempts": -1}, ValueError),
        ({"retry_attempts": 1.5}, TypeError),
        ({"watchdog_batch_size": 0}, ValueError),
        ({"retry_delay": (2, 1)}, ValueError),
        ({"retry_delay": 1}, TypeError),
    ],
)
def test_bad_values_fail_at_construction(options: dict[str, Any], error: type[Exception]) -> None:
    with pytest.raises(error):
        Config(**options)


def test_unknown_option_names_the_known_ones() -> None:
    with pytest.raises(TypeError, match="lock_watchdog_timout") as info:
        Config.from_options({"lock_watchdog_timout": 10})
    assert "lock_watchdog_timeout" in str(info.value)
    with pytest.raises(TypeError, match="password"):
        Config.from_options({"password": "x"})


def test_frozen() -> None:
    config = Config()
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        config.timeout = 5  # type: ignore[misc]


def test_redact_hides_the_password() -> None:
    assert redact("redis://user:secret@host:6379/0") == "redis://user:***@host:6379/0"
    assert redact("redis://host:6379") == "redis://host:6379"


def test_url_makes_a_redis_py_client_with_syncprims_defaults() -> None:
    client = redis_from_url("redis://u:pw@h:1/2?client_name=app")
    assert isinstance(client, redis.Redis)
    kwargs = client.connection_pool.connection_kwargs
    assert (kwargs["host"], kwargs["port"], kwargs["db"]) == ("h", 1, 2)
    assert (kwargs["username"], kwargs["password"], kwargs["client_name"]) == ("u", "pw", "app")
    assert kwargs["socket_timeout"] == 3.0
    assert kwargs["socket_connect_timeout"] == 5.0
    assert kwargs["retry"].get_retries() == 0  # syncprims decides what may be retried
    short = redis_from_url("redis://h:1", timeout=0.5)
    assert isinstance(short, redis.Redis)
    assert short.connection_pool.connection_kwargs["socket_timeout"] == 0.5
    secure = redis_from_url("rediss://h:1?ssl_ca_certs=/ca.pem")
    assert isinstance(secure, redis.Redis)
    tls = secure.connection_pool
    assert tls.connection_class is redis.SSLConnection
    assert tls.connection_kwargs["ssl_ca_certs"] == "/ca.pem"


def test_sentinel_url_makes_the_masters_client() -> None:
    client = redis_from_url("redis+sentinel://:pw@h1:1,h2:2/mymaster?sentinel_password=sp")
    assert isinstance(client, redis.Redis)
    pool: Any = client.connection_pool
    assert pool.service_name == "mymaster"
    assert pool.connection_kwargs["password"] == "pw"
    sentinels = pool.sentinel_manager.sentinels
    assert [(s.connection_pool.connection_kwargs["host"], s.connection_pool.connection_kwargs[
        "port"]) for s in sentinels] == [("h1", 1), ("h2", 2)]  # fmt: skip
    assert sentinels[0].connection_pool.connection_kwargs["password"] == "sp"


def test_async_url_client_has_no_socket_timeout() -> None:
    client = async_redis_from_url("redis://h:1", timeout=2)
    assert isinstance(client, redis.asyncio.Redis)
    assert client.connection_pool.connection_kwargs["socket_timeout"] is None


@pytest.mark.parametrize(
    ("url", "match"),
    [
        ("http://x", "must start with"),
        ("localhost:6379", "must start with"),
        ("redis+cluster://", "no hosts"),
        ("redis+cluster://h", "host:port"),
        ("redis+sentinel://h:1", "master name"),
    ],
)
def test_bad_urls(url: str, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        redis_from_url(url)


@pytest.mark.parametrize("source", [42, None, b"redis://x", object(), redis.asyncio.Redis()])
def test_wrong_source_type_is_a_clear_type_error(source: object) -> None:
    with pytest.raises(TypeError, match=r"redis\.Redis|redis\.asyncio") as info:
        sync_source(source)
    assert type(source).__name__ in str(info.value)
