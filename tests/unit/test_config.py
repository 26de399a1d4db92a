"""Config validation happens at construction."""

from __future__ import annotations

import math
from datetime import timedelta
from typing import Any

import attrs
import pytest

from syncprims import TLS, Config, SingleServer


def test_defaults_follow_redisson() -> None:
    config = Config()
    assert config.lock_watchdog_timeout == 30.0
    assert config.watchdog_period == 10.0
    assert config.subscription_timeout == 7.5
    assert config.fair_lock_wait_timeout == 300.0
    assert config.watchdog_batch_size == 100
    assert config.server == SingleServer(url="redis://127.0.0.1:6379")


def test_single_server_and_timedelta_durations() -> None:
    config = Config.single_server(
        "redis://h:1/2", password="pw", lock_watchdog_timeout=timedelta(seconds=9), timeout=1
    )
    assert config.server.password == "pw"
    assert config.lock_watchdog_timeout == 9.0
    assert config.timeout == 1.0
    assert "pw" not in repr(config)


def test_redacted_url_hides_the_password() -> None:
    server = SingleServer(url="redis://user:secret@host:6379/0")
    assert "secret" not in server.redacted_url()
    assert "user:***@host" in server.redacted_url()
    assert "secret" not in Config(server=server).describe()


@pytest.mark.parametrize(
    ("options", "error"),
    [
        ({"lock_watchdog_timeout": 0}, ValueError),
        ({"lock_watchdog_timeout": -1}, ValueError),
        ({"lock_watchdog_timeout": math.nan}, ValueError),
        ({"lock_watchdog_timeout": math.inf}, ValueError),
        ({"lock_watchdog_timeout": "30"}, TypeError),
        ({"timeout": 0}, ValueError),
        ({"retry_attempts": -1}, ValueError),
        ({"retry_attempts": 1.5}, TypeError),
        ({"watchdog_batch_size": 0}, ValueError),
        ({"max_connections": 0}, ValueError),
        ({"retry_delay": (2, 1)}, ValueError),
        ({"retry_delay": 1}, TypeError),
    ],
)
def test_bad_values_fail_at_construction(options: dict[str, Any], error: type[Exception]) -> None:
    with pytest.raises(error):
        Config(**options)


@pytest.mark.parametrize("url", ["http://x", "localhost:6379", "redis+cluster://x"])
def test_bad_urls(url: str) -> None:
    with pytest.raises(ValueError, match="url must start"):
        SingleServer(url=url)


def test_frozen() -> None:
    config = Config()
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        config.timeout = 5  # type: ignore[misc]


def test_unlock_latch_ttl_covers_every_retry() -> None:
    config = Config(timeout=3, connect_timeout=1, retry_attempts=3, retry_delay=(0.05, 1.0))
    assert config.operation_timeout == (1 + 3 + 1) * 4
    assert config.unlock_latch_ttl_ms == 20_000
    assert Config().unlock_latch_ttl_ms == (5 + 3 + 2) * 5 * 1000


def test_tls_defaults_verify() -> None:
    tls = TLS()
    assert tls.verify and tls.check_hostname
