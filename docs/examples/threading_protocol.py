"""An RLock speaks the threading.Lock protocol: acquire(blocking, timeout) / release()."""

import os
import threading

import syncprims

url = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379")

with syncprims.connect(url) as client:
    lock = client.get_lock("reports:nightly")
    assert lock.acquire()  # blocks until held; the watchdog keeps it alive

    def other() -> None:
        # Another thread is another owner: it cannot take the lock while we hold it.
        print("other thread got it:", lock.acquire(blocking=False))

    t = threading.Thread(target=other)
    t.start()
    t.join()
    lock.release()
    print("free again:", not lock.locked())
