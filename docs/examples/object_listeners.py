"""Object listeners (docs/locks.md, "Listening for expiry and deletion"): one client is told
when another client's lock is released or its lease runs out."""

import os
import threading

import syncprims

URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379")

with syncprims.connect(URL) as watcher, syncprims.connect(URL) as worker:
    released, expired = threading.Event(), threading.Event()

    def on_deleted(name: str) -> None:  # runs on the watcher's services thread
        print(f"{name} was released")
        released.set()

    def on_expired(name: str) -> None:
        print(f"{name}'s lease ran out")
        expired.set()

    lock = watcher.get_lock("orders:listened")
    listener = lock.add_listener(on_deleted=on_deleted, on_expired=on_expired)

    with worker.get_lock("orders:listened"):
        pass  # the release deletes the lock's key: on_deleted
    assert released.wait(5)

    worker.get_lock("orders:listened").lock(lease_time=0.1)  # never unlocked: on_expired
    assert expired.wait(5)

    lock.remove_listener(listener)
