"""Quick start: a lock shared by every process that talks to the same Redis."""

import os

import redis

import syncprims

# The redis-py client your application already has (here from $REDIS_URL).
r = redis.Redis.from_url(os.environ.get("REDIS_URL", "redis://127.0.0.1:6379"))

with syncprims.connect(r) as client:  # uses r's pool and settings; r stays yours
    lock = client.get_lock("orders:42")

    # Wait as long as it takes; the watchdog renews the lease until the block ends.
    with lock:
        print("held:", lock.is_held_by_current_thread())

    # Wait at most 5 s; if acquired, the lock expires by itself after 30 s.
    if lock.try_lock(wait_time=5, lease_time=30):
        try:
            print("hold count:", lock.get_hold_count())
        finally:
            lock.unlock()

    print("locked now:", lock.is_locked())

print("the application's client still works:", r.ping())
r.close()
