"""The unlock-latch janitor: batches, and how long a batch waits (on a real event loop)."""

from __future__ import annotations

import asyncio

from syncprims._services import janitor
from syncprims._services.janitor import Janitor
from syncprims._services.loop import CallerLoop, ServiceLoop


class _Recorder:
    """Records each UNLINK with the loop time it was sent at."""

    def __init__(self) -> None:
        self.unlinks: list[tuple[float, tuple[str | int, ...]]] = []

    async def command(self, *args: str | int, context: str, route: str | None = None) -> object:
        assert args[0] == "UNLINK"
        self.unlinks.append((asyncio.get_running_loop().time(), args[1:]))
        return len(args) - 1


async def _until(recorder: _Recorder, count: int, timeout: float) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while len(recorder.unlinks) < count and asyncio.get_running_loop().time() < deadline:
        await asyncio.sleep(0.005)


def test_a_busy_janitor_flushes_once_a_second_a_quiet_one_at_once() -> None:
    async def main() -> None:
        recorder = _Recorder()
        j = Janitor(CallerLoop(asyncio.get_running_loop(), "test"), recorder)
        loop = asyncio.get_running_loop()

        # Quiet: one key goes within the short delay.
        j.discard("k0")
        await _until(recorder, 1, 5)
        assert recorder.unlinks[0][1] == ("k0",)

        # Busy: a batch of BUSY_KEYS keys in one UNLINK ...
        keys = [f"b{i}" for i in range(janitor.BUSY_KEYS)]
        for key in keys:
            j.discard(key)
        await _until(recorder, 2, 5)
        assert recorder.unlinks[1][1] == tuple(keys)

        # ... so the next batch waits the long delay, not the short one.
        started = loop.time()
        j.discard("late")
        await _until(recorder, 3, 5)
        assert recorder.unlinks[2][1] == ("late",)
        waited = recorder.unlinks[2][0] - started
        assert waited >= janitor.BUSY_FLUSH_DELAY * 0.9, waited

        # That batch was small: the one after it goes after the short delay again.
        started = loop.time()
        j.discard("quiet")
        await _until(recorder, 4, 5)
        waited = recorder.unlinks[3][0] - started
        assert waited < janitor.BUSY_FLUSH_DELAY * 0.9, waited

    asyncio.run(main())


def test_take_hands_over_what_is_pending_grouped_by_slot() -> None:
    """Shutdown and exit take the pending keys to delete them at once; the scheduled flush
    then finds nothing, and the groups keep one slot and at most BATCH keys each."""

    async def main() -> None:
        recorder = _Recorder()
        slots = {"a": 1, "b": 2}
        j = Janitor(
            CallerLoop(asyncio.get_running_loop(), "test"), recorder, lambda key: slots[key[0]]
        )
        keys = [f"a{i}" for i in range(janitor.BATCH + 1)] + ["b0"]
        for key in keys:
            j.discard(key)
        assert j.pending()
        taken = j.take()
        assert taken == keys and not j.pending()
        groups = j.groups(taken)
        assert [len(group) for group in groups] == [janitor.BATCH, 1, 1]
        assert {key[0] for key in groups[0] + groups[1]} == {"a"} and groups[2] == ["b0"]
        await asyncio.sleep(janitor.FLUSH_DELAY * 3)
        assert recorder.unlinks == []  # taken: the scheduled flush had nothing to delete

    asyncio.run(main())


def test_a_closed_services_loop_starts_no_task_and_leaves_no_coroutine_unawaited() -> None:
    """After the client's shutdown (``CallerLoop.close``), a flush that comes due (a key
    discarded late) starts nothing: a task spawned then was destroyed pending when the loop
    ended, with ``RuntimeWarning: coroutine 'Janitor._unlink' was never awaited``."""
    import gc
    import warnings

    async def main() -> None:
        recorder = _Recorder()
        services = CallerLoop(asyncio.get_running_loop(), "test")
        j = Janitor(services, recorder)
        services.close()
        j.discard("late")  # call_soon is a no-op now: flush by hand, as a due timer would
        j._flush()
        await asyncio.sleep(0.05)
        assert recorder.unlinks == []
        assert not services._tasks

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        asyncio.run(main())
        gc.collect()


def test_a_closing_service_loop_starts_no_task_while_it_waits_for_its_threads() -> None:
    """The sync face's services loop, once closed, waits for the blocking calls still out on
    its worker threads; a flush that comes due meanwhile starts nothing (a task spawned then
    was destroyed pending when the loop ended: a loaded run's ``coroutine
    'Janitor._unlink' was never awaited``)."""
    import threading
    import time

    recorder = _Recorder()
    services = ServiceLoop("test")
    j = Janitor(services, recorder)
    loop = services.loop()
    started, release, flushed = threading.Event(), threading.Event(), threading.Event()

    def blocking_call() -> None:  # a janitor UNLINK or a renewal, still out at shutdown
        started.set()
        release.wait(10)

    loop.call_soon_threadsafe(lambda: loop.run_in_executor(None, blocking_call))
    assert started.wait(5)
    closer = threading.Thread(target=services.close)
    closer.start()
    time.sleep(0.2)  # close() has stopped the loop; it now waits for the worker thread

    def flush_now() -> None:  # as the due timer of a key discarded late would
        j.discard("late")
        j._flush()
        flushed.set()

    loop.call_soon_threadsafe(flush_now)
    assert flushed.wait(5)
    release.set()
    closer.join(10)
    assert not closer.is_alive()
    assert recorder.unlinks == []
    assert not services._tasks  # nothing was started (and so nothing destroyed pending)
