-- RLock unlock, idempotent per request id (Redisson RedissonLock#unlockInnerAsync, 3.24+;
-- redisson-spec.md 2.4).
-- KEYS[1] lock name
-- KEYS[2] unlock channel "redisson_lock__channel:{name}"
-- KEYS[3] unlock latch "redisson_unlock_latch:{name}:<request id>"
-- ARGV[1] unlock message ("0")
-- ARGV[2] lease to re-arm when the hold count stays above 0, milliseconds
-- ARGV[3] owner field
-- ARGV[4] publish command ("PUBLISH" or "SPUBLISH")
-- ARGV[5] latch TTL, milliseconds
-- Reply: nil when the owner does not hold the lock, 0 when a reentrant hold was released
--        (still held), 1 when the lock was released (key deleted, message published).
--        A retry of the same request returns the first execution's reply.
local val = redis.call('get', KEYS[3])
if val ~= false then
    return tonumber(val)
end
if (redis.call('hexists', KEYS[1], ARGV[3]) == 0) then
    return nil
end
local counter = redis.call('hincrby', KEYS[1], ARGV[3], -1)
if (counter > 0) then
    redis.call('pexpire', KEYS[1], ARGV[2])
    redis.call('set', KEYS[3], 0, 'px', ARGV[5])
    return 0
end
redis.call('del', KEYS[1])
redis.call(ARGV[4], KEYS[2], ARGV[1])
redis.call('set', KEYS[3], 1, 'px', ARGV[5])
return 1
