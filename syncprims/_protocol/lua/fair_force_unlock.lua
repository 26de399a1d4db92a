-- FairLock force unlock (Redisson RedissonFairLock#forceUnlockAsync; spec 4.8).
-- KEYS[1] lock name
-- KEYS[2] wait queue
-- KEYS[3] waiter deadlines
-- KEYS[4] channel base
-- ARGV[1] unlock message ("0")
-- ARGV[2] now, epoch milliseconds
-- ARGV[3] publish command
-- Reply: 1 when a lock was deleted (the head waiter is notified), else 0.
-- @include fair_purge
purge(KEYS[2], KEYS[3], tonumber(ARGV[2]))
if redis.call('del', KEYS[1]) == 1 then
    local head = redis.call('lindex', KEYS[2], 0)
    if head ~= false then
        redis.call(ARGV[3], KEYS[4] .. ':' .. head, ARGV[1])
    end
    return 1
end
return 0
