-- ReadWriteLock with writer preference: a waiting writer stops waiting without the lock
-- (syncprims; not in Redisson). Removes its entry from the waiting writers' set; when no
-- writer waits any more, the readers it held back are woken ("1" wakes every waiter).
-- KEYS[1] waiting writers "syncprims_rwlock_writers:{name}"
-- KEYS[2] channel "redisson_rwlock:{name}"
-- ARGV[1] writer field
-- ARGV[2] message ("1")
-- ARGV[3] publish command
-- Reply: 1 when the entry was there, else 0.
local removed = redis.call('zrem', KEYS[1], ARGV[1])
if removed == 1 and redis.call('exists', KEYS[1]) == 0 then
    redis.call(ARGV[3], KEYS[2], ARGV[2])
end
return removed
