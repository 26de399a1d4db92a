-- ReadWriteLock, write side unlock, idempotent per request id (Redisson
-- RedissonWriteLock#unlockInnerAsync; spec 5.5). Releasing the write lock while this owner
-- still holds read locks downgrades the lock to read mode (no message).
-- KEYS[1] lock name
-- KEYS[2] channel "redisson_rwlock:{name}"
-- KEYS[3] unlock latch "redisson_unlock_latch:{name}:<request id>"
-- ARGV[1] message ("1": wakes every waiter, so that readers enter together)
-- ARGV[2] lease to re-arm when write holds remain, milliseconds
-- ARGV[3] writer field
-- ARGV[4] publish command
-- ARGV[5] latch TTL, milliseconds
-- Reply: nil when this owner holds no write lock; 0 when write holds remain; 1 when the
--        write lock was released (the lock deleted, or downgraded to read).
local val = redis.call('get', KEYS[3])
if val ~= false then
    return tonumber(val)
end
local mode = redis.call('hget', KEYS[1], 'mode')
if mode == false then
    redis.call(ARGV[4], KEYS[2], ARGV[1])
    return nil  -- no latch (Redisson sets it to 1: a retry then answered "released")
end
if mode ~= 'write' or redis.call('hexists', KEYS[1], ARGV[3]) == 0 then
    return nil
end
local counter = redis.call('hincrby', KEYS[1], ARGV[3], -1)
if counter > 0 then
    redis.call('pexpire', KEYS[1], ARGV[2])
    redis.call('set', KEYS[3], 0, 'px', ARGV[5])
    return 0
end
redis.call('hdel', KEYS[1], ARGV[3])
if redis.call('hlen', KEYS[1]) == 1 then
    redis.call('del', KEYS[1])
    redis.call(ARGV[4], KEYS[2], ARGV[1])
else
    redis.call('hset', KEYS[1], 'mode', 'read')
end
redis.call('set', KEYS[3], 1, 'px', ARGV[5])
return 1
