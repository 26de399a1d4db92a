"""Optional metrics: lock wait and hold times, contention, renewals and losses.

Off until you turn them on; while off they cost one module attribute load and an ``is None``
test per event (see ``docs/observability.md``). Turn them on once, at start-up, with
[enable_opentelemetry][syncprims.metrics.enable_opentelemetry] (needs the ``otel`` extra:
``pip install "syncprims[otel]"``).

Example:
    ```python
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    import syncprims.metrics

    reader = InMemoryMetricReader()
    syncprims.metrics.enable_opentelemetry(MeterProvider(metric_readers=[reader]))
    ```

The instruments ([INSTRUMENTS][syncprims.metrics.INSTRUMENTS]), their attributes and units:
docs/observability.md, "Metrics (OpenTelemetry)".
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from syncprims import _observe
from syncprims._protocol.loss import LossReason

if TYPE_CHECKING:
    from opentelemetry.metrics import MeterProvider

__all__ = [
    "DURATION_BUCKETS",
    "INSTRUMENTS",
    "disable",
    "enable_opentelemetry",
    "is_enabled",
]

INSTRUMENTS = (
    "syncprims.lock.wait.duration",
    "syncprims.lock.hold.duration",
    "syncprims.lock.contention",
    "syncprims.lock.renewals",
    "syncprims.lock.losses",
)
"""The names of the instruments syncprims records."""

DURATION_BUCKETS = (
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
    300.0,
)
"""Bucket boundaries, seconds, advised for the two duration histograms."""


def _kind(kind: str) -> str:
    return kind.replace(" ", "_").replace("-", "_")


class _OpenTelemetryMetrics:
    """Records into OpenTelemetry instruments of one meter."""

    def __init__(self, meter_provider: MeterProvider | None) -> None:
        from importlib.metadata import version

        from opentelemetry import metrics

        meter = (meter_provider or metrics.get_meter_provider()).get_meter(
            "syncprims", version("syncprims")
        )
        self._wait = meter.create_histogram(
            "syncprims.lock.wait.duration",
            unit="s",
            description="Time from an acquire call to its end (acquired, timed out or failed).",
            explicit_bucket_boundaries_advisory=DURATION_BUCKETS,
        )
        self._hold = meter.create_histogram(
            "syncprims.lock.hold.duration",
            unit="s",
            description="Time from an owner's first hold of a lock to its last release.",
            explicit_bucket_boundaries_advisory=DURATION_BUCKETS,
        )
        self._contention = meter.create_counter(
            "syncprims.lock.contention",
            unit="{attempt}",
            description="Acquire attempts that found the lock held by another owner.",
        )
        self._renewals = meter.create_counter(
            "syncprims.lock.renewals",
            unit="{renewal}",
            description="Lock holds renewed by the watchdog.",
        )
        self._losses = meter.create_counter(
            "syncprims.lock.losses",
            unit="{loss}",
            description="Lock holds found lost (expired, broken, or not renewed in time).",
        )

    def acquire(self, kind: str, seconds: float, outcome: str, failed_attempts: int) -> None:
        kind = _kind(kind)
        self._wait.record(seconds, {"syncprims.lock.kind": kind, "syncprims.lock.outcome": outcome})
        if failed_attempts:
            self._contention.add(failed_attempts, {"syncprims.lock.kind": kind})

    def hold(self, kind: str, seconds: float) -> None:
        self._hold.record(seconds, {"syncprims.lock.kind": _kind(kind)})

    def renewals(self, kind: str, count: int) -> None:
        self._renewals.add(count, {"syncprims.lock.kind": _kind(kind)})

    def loss(self, kind: str, reason: LossReason) -> None:
        self._losses.add(
            1,
            {"syncprims.lock.kind": _kind(kind), "syncprims.lock.loss.reason": reason.name.lower()},
        )


def enable_opentelemetry(meter_provider: MeterProvider | None = None) -> None:
    """Record syncprims' metrics with OpenTelemetry, from now on, for every client.

    Call it once at start-up, after configuring your ``MeterProvider``; calling it again
    replaces the instruments (with another provider's, say).

    Args:
        meter_provider: the provider to take the ``syncprims`` meter from; ``None`` (default):
            OpenTelemetry's global provider (``opentelemetry.metrics.get_meter_provider()``).

    Raises:
        ImportError: ``opentelemetry-api`` is not installed (install ``syncprims[otel]``).
    """
    try:
        recorder = _OpenTelemetryMetrics(meter_provider)
    except ModuleNotFoundError as error:
        if error.name is None or not error.name.startswith("opentelemetry"):
            raise
        raise ImportError(
            "syncprims metrics need opentelemetry-api: pip install 'syncprims[otel]'"
        ) from error
    _observe.metrics = recorder


def disable() -> None:
    """Stop recording metrics (back to the no-op: nothing is measured)."""
    _observe.metrics = None


def is_enabled() -> bool:
    """Whether metrics are being recorded."""
    return _observe.metrics is not None
