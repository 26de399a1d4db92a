"""The Celery app the tests' workers run (``celery -A tests.contrib.celery_app worker``).

Its broker, result backend and syncprims' locks are the test's own redis-server
(``SYNCPRIMS_TEST_CELERY_URL``). Every run of a key counts itself in Redis, and counts an
overlap when another run of the key is inside its body at the same time.
"""

from __future__ import annotations

import os
import time
from typing import Any

import celery
import redis
from celery.signals import worker_ready

import syncprims
from syncprims.contrib.celery import ExclusiveTask

URL = os.environ.get("SYNCPRIMS_TEST_CELERY_URL")  # the worker's; the test sets app.conf
WATCHDOG = float(os.environ.get("SYNCPRIMS_TEST_CELERY_WATCHDOG", "2"))

app = celery.Celery("syncprims_test", broker=URL, backend=URL)
app.conf.update(
    syncprims_options={"lock_watchdog_timeout": WATCHDOG},
    broker_connection_retry_on_startup=True,
    worker_prefetch_multiplier=1,
    worker_hijack_root_logger=False,
    task_default_queue=os.environ.get("SYNCPRIMS_TEST_CELERY_QUEUE", "celery"),
    result_expires=600,
)
_stores: dict[str, redis.Redis] = {}


def store() -> redis.Redis:
    """A redis-py client of the app's broker (the test's server)."""
    url = str(app.conf.broker_url)
    if url not in _stores:
        _stores[url] = redis.Redis.from_url(url)
    return _stores[url]


@worker_ready.connect
def _ready(sender: Any, **_: object) -> None:
    store().set(f"ready:{sender.hostname}", os.getpid(), ex=600)


def record(key: str, seconds: float) -> None:
    """A run's body: count it, and an overlap if another run of ``key`` is inside too."""
    r = store()
    r.set(f"pid:{key}", os.getpid())
    if r.incr(f"active:{key}") > 1:
        r.incr(f"overlaps:{key}")
    r.incr(f"runs:{key}")
    try:
        time.sleep(seconds)
    finally:
        r.decr(f"active:{key}")


class Counted(ExclusiveTask):
    """Counts skips and losses in Redis (the metric hooks)."""

    def on_skipped(self, lock: str, reason: str) -> None:
        store().incr(f"skipped:{lock}")

    def on_lock_lost(self, lock: str, reason: syncprims.LossReason) -> None:
        store().set(f"lost:{lock}", reason.name)


@app.task(base=Counted, lock_key="t:{key}")
def work(key: str, seconds: float) -> str:
    record(key, seconds)
    return key


@app.task(base=Counted)  # the default key: the task's name and arguments
def default_key(key: str, seconds: float) -> None:
    record(key, seconds)


@app.task(base=Counted, lock_key="t:{key}", on_taken="retry", lock_retry_countdown=0.3)
def work_retry(key: str, seconds: float) -> None:
    record(key, seconds)


@app.task(base=Counted, lock_key="t:{key}", on_taken="wait", lock_wait=10)
def work_wait(key: str, seconds: float) -> None:
    record(key, seconds)


@app.task(base=Counted, lock_key="t:{key}")
def failing(key: str) -> None:
    record(key, 0.2)
    raise ValueError(f"run of {key} failed")


@app.task(bind=True, base=Counted, lock_key="t:{key}", lock_lost_cancel=True)
def cancellable(self: ExclusiveTask, key: str, seconds: float) -> str:
    store().set(f"started:{key}", 1)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        time.sleep(0.01)
    return f"finished; lost: {self.lock_lost_reason}"


@app.task(base=Counted, lock_key="t:{key}", acks_late=True, reject_on_worker_lost=True)
def durable(key: str, seconds: float) -> None:
    record(key, seconds)


@app.task(base=Counted, lock_key="t:{key}", dedup_ttl=30)
def queued(key: str, seconds: float) -> None:
    record(key, seconds)


@app.task(base=Counted, lock_key="t:{key}", soft_time_limit=1)
def limited(key: str, seconds: float) -> None:
    record(key, seconds)  # SoftTimeLimitExceeded is raised in it after 1 s
