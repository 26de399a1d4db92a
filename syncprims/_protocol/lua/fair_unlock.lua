-- FairLock unlock, idempotent per request id (Redisson RedissonFairLock#unlockInnerAsync;
-- redisson-spec.md 4.7). Only the waiter at the head of the queue is notified.
-- KEYS[1] lock name
-- KEYS[2] wait queue
-- KEYS[3] waiter deadlines
-- KEYS[4] channel base "redisson_lock__channel:{name}" (a waiter listens on base:<owner>)
-- KEYS[5] unlock latch "redisson_unlock_latch:{name}:<request id>"
-- ARGV[1] unlock message ("0")
-- ARGV[2] lease to re-arm when the hold count stays above 0, milliseconds
-- ARGV[3] owner field
-- ARGV[4] now, epoch milliseconds
-- ARGV[5] publish command
-- ARGV[6] latch TTL, milliseconds
-- Reply: nil when the owner does not hold the lock; 0 when a reentrant hold was released;
--        1 when the lock was released; 2 when the lock did not exist (the head waiter is
--        notified anyway; Redisson answers 1 there, syncprims raises: see FairLock).
-- @include fair_purge
local val = redis.call('get', KEYS[5])
if val ~= false then
    return tonumber(val)
end
purge(KEYS[2], KEYS[3], tonumber(ARGV[4]))
local function notify_head()
    local head = redis.call('lindex', KEYS[2], 0)
    if head ~= false then
        redis.call(ARGV[5], KEYS[4] .. ':' .. head, ARGV[1])
    end
end
if redis.call('exists', KEYS[1]) == 0 then
    notify_head()
    redis.call('set', KEYS[5], 2, 'px', ARGV[6])
    return 2
end
if redis.call('hexists', KEYS[1], ARGV[3]) == 0 then
    return nil
end
local counter = redis.call('hincrby', KEYS[1], ARGV[3], -1)
if counter > 0 then
    redis.call('pexpire', KEYS[1], ARGV[2])
    redis.call('set', KEYS[5], 0, 'px', ARGV[6])
    return 0
end
redis.call('del', KEYS[1])
redis.call('set', KEYS[5], 1, 'px', ARGV[6])
notify_head()
return 1
