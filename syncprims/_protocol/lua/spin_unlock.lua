-- SpinLock unlock, idempotent per request id (Redisson RedissonSpinLock#unlockInnerAsync):
-- the RLock unlock without the PUBLISH (nobody subscribes; waiters poll).
-- KEYS[1] lock name
-- KEYS[2] unlock latch "redisson_unlock_latch:{name}:<request id>"
-- ARGV[1] lease to re-arm when the hold count stays above 0, milliseconds
-- ARGV[2] owner field
-- ARGV[3] latch TTL, milliseconds
-- Reply: nil when the owner does not hold the lock, 0 when a reentrant hold was released
--        (still held), 1 when the lock was released (key deleted).
--        A retry of the same request returns the first execution's reply.
local val = redis.call('get', KEYS[2])
if val ~= false then
    return tonumber(val)
end
if (redis.call('hexists', KEYS[1], ARGV[2]) == 0) then
    return nil
end
local counter = redis.call('hincrby', KEYS[1], ARGV[2], -1)
if (counter > 0) then
    redis.call('pexpire', KEYS[1], ARGV[1])
    redis.call('set', KEYS[2], 0, 'px', ARGV[3])
    return 0
end
redis.call('del', KEYS[1])
redis.call('set', KEYS[2], 1, 'px', ARGV[3])
return 1
