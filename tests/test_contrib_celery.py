"""syncprims.contrib.celery against real Celery workers (prefork pools, started here as
subprocesses), whose broker and result backend are a redis-server of this module's own.

Every run of a key counts itself in Redis and counts an overlap when another run of the
same key is inside its body at the same time (``tests/contrib/celery_app.py``).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("celery", reason="celery is not installed (pip install -e '.[dev]')")

import redis
from celery.result import EagerResult

import syncprims
from syncprims._embedded import RedisServer
from syncprims.contrib.celery import SKIPPED, RunLockLostError
from tests.contrib import celery_app
from tests.contrib.celery_app import app

pytestmark = [pytest.mark.real, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[1]
WATCHDOG = 2.0  # the workers' lock_watchdog_timeout, seconds
SENDS = int(os.environ.get("SYNCPRIMS_CELERY_SENDS", "1000"))


class Worker:
    """A ``celery worker`` subprocess (prefork, in a session of its own)."""

    def __init__(self, url: str, queue: str, name: str, concurrency: int = 2) -> None:
        self.name = f"{name}@syncprims-test"
        env = {
            **os.environ,
            "SYNCPRIMS_TEST_CELERY_URL": url,
            "SYNCPRIMS_TEST_CELERY_QUEUE": queue,
            "SYNCPRIMS_TEST_CELERY_WATCHDOG": str(WATCHDOG),
            "PYTHONPATH": str(ROOT),
        }
        self.log = Path(f"/tmp/syncprims-celery-{uuid.uuid4().hex}.log")
        with self.log.open("w") as out:
            self.process = self._start(env, queue, concurrency, out)

    def _start(self, env: dict[str, str], queue: str, concurrency: int, out: Any) -> Any:
        return subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "tests.contrib.celery_app", "worker",
             "-P", "prefork", "-c", str(concurrency), "-n", self.name, "-Q", queue,
             "--without-heartbeat", "--without-gossip", "--without-mingle", "-l", "INFO"],
            env=env, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip

    def wait_ready(self, store: redis.Redis, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while not store.get(f"ready:{self.name}"):
            assert self.process.poll() is None, self.log.read_text()
            assert time.monotonic() < deadline, f"worker {self.name} not ready in {timeout} s"
            time.sleep(0.05)

    def kill(self) -> None:
        """SIGKILL every process of the worker at once (an OOM kill, a lost host)."""
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(10)

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)  # a warm shutdown
            try:
                self.process.wait(20)
            except subprocess.TimeoutExpired:
                self.kill()
        self.log.unlink(missing_ok=True)


@pytest.fixture(scope="module")
def server() -> Iterator[RedisServer]:
    with RedisServer() as running:
        app.conf.update(broker_url=running.url, result_backend=running.url)
        yield running
        app.close()


@pytest.fixture(scope="module")
def store(server: RedisServer) -> Iterator[redis.Redis]:
    client = celery_app.store()
    yield client
    client.close()


@pytest.fixture(scope="module")
def queue() -> str:
    return f"q-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
def workers(server: RedisServer, store: redis.Redis, queue: str) -> Iterator[list[Worker]]:
    """Two workers, two prefork children each, on the module's queue."""
    started = [Worker(server.url, queue, f"w{i}") for i in (1, 2)]
    try:
        for worker in started:
            worker.wait_ready(store)
        yield started
    finally:
        for worker in started:
            worker.stop()


@pytest.fixture
def key() -> str:
    return uuid.uuid4().hex[:12]


def state_of(task_id: str) -> str:
    return str(app.AsyncResult(task_id).state)


def wait_for(predicate: Callable[[], bool], timeout: float = 30, what: str = "") -> float:
    """Poll until ``predicate()``; the seconds it took."""
    start = time.monotonic()
    while not predicate():
        assert time.monotonic() - start < timeout, f"not within {timeout} s: {what}"
        time.sleep(0.02)
    return time.monotonic() - start


def settled(ids: list[str], timeout: float = 30) -> list[str]:
    """The final states of the runs ``ids`` (``SKIPPED`` counts as final)."""
    final = {"SUCCESS", "FAILURE", SKIPPED}
    wait_for(lambda: all(state_of(i) in final for i in ids), timeout, f"runs {ids} ended")
    return [state_of(i) for i in ids]


def count(store: redis.Redis, what: str, key: str) -> int:
    return int(store.get(f"{what}:{key}") or 0)


def send(task: Any, queue: str, *args: Any) -> str:
    return str(task.apply_async(args, queue=queue).id)


def test_two_concurrent_sends_of_a_key_run_once(
    workers: list[Worker], store: redis.Redis, queue: str, key: str
) -> None:
    ids = [send(celery_app.work, queue, key, 1.0) for _ in range(2)]
    assert sorted(settled(ids)) == [SKIPPED, "SUCCESS"]
    assert count(store, "runs", key) == 1
    assert count(store, "skipped", f"t:{key}") == 1  # the on_skipped hook (a metric)
    skipped = next(i for i in ids if state_of(i) == SKIPPED)
    assert app.AsyncResult(skipped).result == {
        "lock": f"t:{key}",
        "reason": "its lock is held by another run",
    }
    # the lock was released at the end of the run: the next send of the key runs
    assert settled([send(celery_app.work, queue, key, 0)]) == ["SUCCESS"]


def test_send_task_by_name_is_covered(
    workers: list[Worker], store: redis.Redis, queue: str, key: str
) -> None:
    name = celery_app.work.name
    ids = [str(app.send_task(name, args=[key, 1.0], queue=queue).id) for _ in range(2)]
    assert sorted(settled(ids)) == [SKIPPED, "SUCCESS"]
    assert count(store, "runs", key) == 1


def test_the_default_key_is_the_task_and_its_arguments(
    workers: list[Worker], store: redis.Redis, queue: str, key: str
) -> None:
    same = [
        str(celery_app.default_key.apply_async((key, 1.0), queue=queue).id),
        str(
            celery_app.default_key.apply_async(kwargs={"key": key, "seconds": 1.0}, queue=queue).id
        ),
    ]
    other = send(celery_app.default_key, queue, key, 0.9)  # other arguments: another key
    assert sorted(settled(same)) == [SKIPPED, "SUCCESS"]
    assert settled([other]) == ["SUCCESS"]


def test_retry_policy_runs_both_one_after_the_other(
    workers: list[Worker], store: redis.Redis, queue: str, key: str
) -> None:
    ids = [send(celery_app.work_retry, queue, key, 0.5) for _ in range(2)]
    assert settled(ids) == ["SUCCESS", "SUCCESS"]
    assert (count(store, "runs", key), count(store, "overlaps", key)) == (2, 0)


def test_wait_policy_runs_both_one_after_the_other(
    workers: list[Worker], store: redis.Redis, queue: str, key: str
) -> None:
    ids = [send(celery_app.work_wait, queue, key, 0.5) for _ in range(2)]
    assert settled(ids) == ["SUCCESS", "SUCCESS"]
    assert (count(store, "runs", key), count(store, "overlaps", key)) == (2, 0)


def test_a_failed_run_releases_its_lock(
    workers: list[Worker], store: redis.Redis, queue: str, key: str
) -> None:
    assert settled([send(celery_app.failing, queue, key)]) == ["FAILURE"]
    assert settled([send(celery_app.work, queue, key, 0)]) == ["SUCCESS"]


def test_a_time_limit_releases_at_once_and_a_revoke_within_the_lease(
    workers: list[Worker], server: RedisServer, store: redis.Redis, queue: str, key: str
) -> None:
    with syncprims.connect(server.url) as client:
        assert settled([send(celery_app.limited, queue, key, 30)]) == ["FAILURE"]
        assert not client.get_lock(f"t:{key}").is_locked()  # released by the run itself
        task_id = send(celery_app.work, queue, f"{key}-revoked", 60)
        wait_for(lambda: count(store, "active", f"{key}-revoked") == 1, what="the run started")
        app.control.revoke(task_id, terminate=True)  # SIGTERM to the child running it
        wait_for(lambda: state_of(task_id) == "REVOKED", 10, "the run revoked")
        lock = client.get_lock(f"t:{key}-revoked")
        freed = wait_for(lambda: not lock.is_locked(), WATCHDOG + 5, "the key freed")
    assert freed <= WATCHDOG + 0.5


def test_a_lost_lock_is_told_and_cancels_the_run(
    workers: list[Worker], server: RedisServer, store: redis.Redis, queue: str, key: str
) -> None:
    task_id = send(celery_app.cancellable, queue, key, 20)
    wait_for(lambda: bool(store.get(f"started:{key}")), what="the run started")
    with syncprims.connect(server.url) as client:
        assert client.get_lock(f"t:{key}").force_unlock()
    took = wait_for(lambda: state_of(task_id) == "FAILURE", WATCHDOG + 5, "the run cancelled")
    assert took < WATCHDOG  # the watchdog's next renewal (every third of it) found it gone
    assert store.get(f"lost:t:{key}") == b"NOT_HELD"  # on_lock_lost was called
    error = app.AsyncResult(task_id).result
    assert isinstance(error, RunLockLostError)
    assert "was lost while it ran" in str(error)


def test_enqueue_de_duplication_lasts_until_the_run_starts(
    workers: list[Worker], store: redis.Redis, queue: str, key: str
) -> None:
    sent = time.monotonic()
    # It starts in 1 s and runs 3 s: the third send below starts while it runs, also on a
    # loaded host (with 1 s, the third was delivered after the first had ended).
    first = celery_app.queued.apply_async((key, 3.0), queue=queue, countdown=1)
    second = celery_app.queued.apply_async((key, 1.0), queue=queue)
    assert second.state == SKIPPED  # not sent: an EagerResult
    assert second.result == {
        "lock": f"t:{key}:queued",
        "reason": "a message of the same key is queued",
    }
    for _ in range(3):  # queued: every send is de-duplicated
        assert celery_app.queued.apply_async((key, 0), queue=queue).state == SKIPPED
    wait_for(lambda: count(store, "active", key) == 1, what="the first run started")
    assert time.monotonic() - sent >= 1
    assert count(store, "skipped", f"t:{key}:queued") == 4  # the on_skipped hook
    third = celery_app.queued.apply_async((key, 0), queue=queue)  # the run gave it back
    # Sent, not de-duplicated (an EagerResult): its run is skipped by the run lock, and on
    # a loaded host that may already have happened by now (loaded run 16).
    warned = [line for w in workers for line in w.log.read_text().splitlines() if "WARN" in line]
    assert not isinstance(third, EagerResult), f"{third.result}; the workers warned: {warned}"
    assert settled([str(first.id), str(third.id)]) == ["SUCCESS", SKIPPED]  # run lock: taken


def test_same_key_sends_never_overlap(
    workers: list[Worker], store: redis.Redis, queue: str, key: str
) -> None:
    """SENDS sends of one key to two workers (two children each): no two runs overlap."""
    start = time.monotonic()
    ids = [send(celery_app.work, queue, key, 0.002) for _ in range(SENDS)]
    states = settled(ids, timeout=max(60, SENDS / 10))
    elapsed = time.monotonic() - start
    runs, skipped = count(store, "runs", key), count(store, "skipped", f"t:{key}")
    print(f"{SENDS} sends: {runs} runs, {skipped} skipped, overlaps "
          f"{count(store, 'overlaps', key)}, {elapsed:.1f} s")  # fmt: skip
    assert count(store, "overlaps", key) == 0
    assert runs == states.count("SUCCESS") and skipped == states.count(SKIPPED)
    assert runs + skipped == SENDS and runs >= 1


def test_a_killed_worker_frees_the_key_within_the_lease(
    workers: list[Worker], server: RedisServer, store: redis.Redis, key: str
) -> None:
    queue = f"kill-{key}"
    victim = Worker(server.url, queue, f"victim-{key}", concurrency=1)
    try:
        victim.wait_ready(store)
        send(celery_app.work, queue, key, 60)
        wait_for(lambda: count(store, "active", key) == 1, what="the run started")
        with syncprims.connect(server.url) as client:
            lock = client.get_lock(f"t:{key}")
            assert lock.is_locked()
            victim.kill()
            freed = wait_for(lambda: not lock.is_locked(), WATCHDOG + 5, "the key freed")
    finally:
        victim.stop()
    print(f"a SIGKILLed worker's key was free {freed:.2f} s after the kill")
    assert freed <= WATCHDOG + 0.5  # within the lease, from the last renewal


def test_a_redelivered_run_waits_out_its_dead_run(
    workers: list[Worker], store: redis.Redis, queue: str, key: str
) -> None:
    """acks_late + reject_on_worker_lost: the child running the task is SIGKILLed; the
    worker requeues the message, and the redelivered run waits for the dead run's lease
    instead of skipping."""
    task_id = send(celery_app.durable, queue, key, 3)
    # "runs" is the body's last count before its sleep: killed after "active" and before
    # it (a loaded run), the first run was never counted, and "runs" never reached 2
    wait_for(lambda: count(store, "runs", key) == 1, what="the run started")
    child = int(store.get(f"pid:{key}") or 0)
    assert child > 1 and child not in (w.process.pid for w in workers)
    killed = time.monotonic()
    os.kill(child, signal.SIGKILL)
    store.decr(f"active:{key}")  # the dead run's body never left
    wait_for(lambda: count(store, "runs", key) == 2, WATCHDOG + 10, "the redelivered run")
    restarted = time.monotonic() - killed
    print(f"the redelivered run started {restarted:.2f} s after the kill")
    assert settled([task_id]) == ["SUCCESS"]
    assert count(store, "overlaps", key) == 0
    # the lease (from the last renewal before the kill), plus the worker noticing the dead
    # child, requeueing, and a child free to take the message (a new one forked): seconds
    # under load
    assert restarted <= WATCHDOG + 8
