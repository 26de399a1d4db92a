"""Observability: the package logger, DEBUG records, LossReason and OpenTelemetry metrics."""

from __future__ import annotations

import asyncio
import logging
import re
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import (
    HistogramDataPoint,
    InMemoryMetricReader,
    NumberDataPoint,
)

import syncprims
import syncprims.metrics
from syncprims import LossReason
from tests.harness import Face

ROOT = Path(__file__).resolve().parent.parent

LOGGERS = (
    "syncprims",
    "syncprims.lock",
    "syncprims.semaphore",
    "syncprims.watchdog",
    "syncprims.pubsub",
    "syncprims.services",
    "syncprims.listeners",
    "syncprims.transport",
    "syncprims.election",
)
"""Every logger the package creates (``docs/observability.md`` documents each)."""


def test_the_package_logger_has_a_null_handler() -> None:
    handlers = logging.getLogger("syncprims").handlers
    assert any(isinstance(handler, logging.NullHandler) for handler in handlers)


def test_every_logger_the_package_creates_is_documented() -> None:
    found = set()
    for path in (ROOT / "syncprims").rglob("*.py"):
        found |= set(re.findall(r"getLogger\(\"([\w.]+)\"\)", path.read_text("utf-8")))
    contrib = ("syncprims.celery", "syncprims.django")  # syncprims.contrib's, public API only
    assert found == {*LOGGERS, *contrib}
    page = (ROOT / "docs" / "observability.md").read_text("utf-8")
    for name in (*LOGGERS, *contrib):
        assert f"`{name}`" in page, f"{name} is not documented in docs/observability.md"


def test_loss_reasons_are_strings() -> None:
    reason = LossReason.RENEWAL_FAILED
    assert isinstance(reason, str)
    assert reason == "it could not be renewed before its lease ran out"
    assert "lease ran out" in reason
    assert f"lost: {reason}" == "lost: it could not be renewed before its lease ran out"


async def test_acquire_wait_and_release_are_logged_at_debug(
    face: Face, real_client: Any, name: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="syncprims")
    lock = real_client.get_lock(name)
    a, b = face.actor(), face.actor()
    await a(lock.lock)
    assert not await b(lock.try_lock, 0.2)  # waits, then times out
    await a(lock.unlock)
    messages = [r.getMessage() for r in caplog.records if r.name == "syncprims.lock"]
    assert any(
        re.fullmatch(rf"lock '{name}': acquired in [\d.]+ s after 0 .*", m) for m in messages
    )
    assert any(f"lock '{name}' is taken (TTL" in m and "waiting up to 0.2 s" in m for m in messages)
    assert any(
        re.fullmatch(rf"lock '{name}': timeout in [\d.]+ s after \d+ .*", m) for m in messages
    )
    assert any(re.fullmatch(rf"lock '{name}': released after [\d.]+ s held", m) for m in messages)


async def test_renewals_are_logged_at_debug(
    face: Face, real_url: str, name: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="syncprims")
    client = await face.connect(real_url, lock_watchdog_timeout=0.3)
    lock = client.get_lock(name)
    a = face.actor()
    await a(lock.lock)
    await asyncio.sleep(0.4)  # renewed every 0.1 s
    await a(lock.unlock)
    renewals = [
        r.getMessage()
        for r in caplog.records
        if r.name == "syncprims.watchdog" and r.levelno == logging.DEBUG
    ]
    assert any(re.fullmatch(r"renewed 1 lock hold\(s\) in [\d.]+ s", m) for m in renewals)


async def test_the_loss_reason_is_an_enum(face: Face, real_url: str, name: str) -> None:
    reasons: list[str] = []
    reported = threading.Event()

    def on_lost(lost_name: str, reason: str) -> None:  # a str callback still fits
        reasons.append(reason)
        reported.set()

    client = await face.connect(real_url, lock_watchdog_timeout=0.6)
    lock = client.get_lock(name, on_lost=on_lost)
    a = face.actor()
    other = await face.connect(real_url)
    await a(lock.lock)
    await face.call(other.get_lock(name).force_unlock)  # another client breaks the lock
    assert await asyncio.get_running_loop().run_in_executor(None, reported.wait, 5)
    assert reasons == [LossReason.NOT_HELD]
    assert reasons[0] is LossReason.NOT_HELD


@pytest.fixture
def reader() -> Iterator[InMemoryMetricReader]:
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    syncprims.metrics.enable_opentelemetry(provider)
    try:
        yield reader
    finally:
        syncprims.metrics.disable()
        provider.shutdown()


def _points(reader: InMemoryMetricReader) -> dict[str, list[NumberDataPoint | HistogramDataPoint]]:
    data = reader.get_metrics_data()
    out: dict[str, list[NumberDataPoint | HistogramDataPoint]] = {}
    if data is None:
        return out
    for resource in data.resource_metrics:
        for scope in resource.scope_metrics:
            assert scope.scope.name == "syncprims"
            for metric in scope.metrics:
                if metric.name in {"syncprims.lock.wait.duration", "syncprims.lock.hold.duration"}:
                    assert metric.unit == "s"
                out.setdefault(metric.name, []).extend(
                    point
                    for point in metric.data.data_points
                    if isinstance(point, NumberDataPoint | HistogramDataPoint)
                )
    return out


def _total(points: list[NumberDataPoint | HistogramDataPoint], **attributes: str) -> float:
    """Sum of counter values, or count of histogram records, matching ``attributes``."""
    total = 0.0
    for point in points:
        found = point.attributes or {}
        if all(found.get(key) == value for key, value in attributes.items()):
            total += point.count if isinstance(point, HistogramDataPoint) else point.value
    return total


async def test_opentelemetry_metrics(
    face: Face, real_url: str, name: str, reader: InMemoryMetricReader
) -> None:
    assert syncprims.metrics.is_enabled()
    client = await face.connect(real_url, lock_watchdog_timeout=0.3)
    fair = client.get_fair_lock(name + ":fair")
    lock = client.get_lock(name)
    a, b = face.actor(), face.actor()
    await a(lock.lock)
    assert not await b(lock.try_lock, 0.1)  # contention, then a timeout
    await asyncio.sleep(0.35)  # the watchdog renews every 0.1 s
    await a(lock.unlock)
    await a(fair.lock, 5)
    await a(fair.unlock)
    other = await face.connect(real_url)
    await a(lock.lock)
    await face.call(other.get_lock(name).force_unlock)  # the watchdog finds the hold gone
    points: dict[str, list[NumberDataPoint | HistogramDataPoint]] = {}
    for _ in range(50):
        points = _points(reader)
        if _total(points.get("syncprims.lock.losses", [])):
            break
        await asyncio.sleep(0.05)

    wait = points["syncprims.lock.wait.duration"]
    kind = "syncprims.lock.kind"
    assert _total(wait, **{kind: "lock", "syncprims.lock.outcome": "acquired"}) == 2
    assert _total(wait, **{kind: "lock", "syncprims.lock.outcome": "timeout"}) == 1
    assert _total(wait, **{kind: "fair_lock", "syncprims.lock.outcome": "acquired"}) == 1
    timed_out = next(
        p
        for p in wait
        if isinstance(p, HistogramDataPoint)
        and (p.attributes or {}).get("syncprims.lock.outcome") == "timeout"
    )
    assert timed_out.min >= 0.1
    assert _total(points["syncprims.lock.contention"], **{kind: "lock"}) >= 1
    hold = points["syncprims.lock.hold.duration"]
    assert _total(hold, **{kind: "lock"}) == 1
    assert _total(hold, **{kind: "fair_lock"}) == 1
    held = next(
        p
        for p in hold
        if isinstance(p, HistogramDataPoint) and (p.attributes or {}).get(kind) == "lock"
    )
    assert held.min >= 0.35
    assert _total(points["syncprims.lock.renewals"], **{kind: "lock"}) >= 2
    losses = points["syncprims.lock.losses"]
    assert _total(losses, **{kind: "lock", "syncprims.lock.loss.reason": "not_held"}) == 1


async def test_metrics_off_records_nothing(face: Face, real_client: Any, name: str) -> None:
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    syncprims.metrics.enable_opentelemetry(provider)
    syncprims.metrics.disable()
    assert not syncprims.metrics.is_enabled()
    lock = real_client.get_lock(name)
    a = face.actor()
    await a(lock.lock)
    await a(lock.unlock)
    assert _points(reader) == {}
    provider.shutdown()
