-- ReadWriteLock force unlock of one side (Redisson RedissonReadLock / RedissonWriteLock
-- #forceUnlockAsync; spec 5.6). Reader lease keys are left to expire.
-- KEYS[1] lock name
-- KEYS[2] channel "redisson_rwlock:{name}"
-- ARGV[1] the side: "read" or "write"
-- ARGV[2] message ("0" for read, "1" for write)
-- ARGV[3] publish command
-- Reply: 1 when the lock was held in that mode and was deleted, else 0.
if redis.call('hget', KEYS[1], 'mode') == ARGV[1] then
    redis.call('del', KEYS[1])
    redis.call(ARGV[3], KEYS[2], ARGV[2])
    return 1
end
return 0
