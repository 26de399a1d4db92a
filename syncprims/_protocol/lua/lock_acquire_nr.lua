-- Non-reentrant lock acquire (Redisson 4.4 RedissonNonReentrantLock#tryLockInnerAsync,
-- character for character but for layout): lock_acquire.lua, except that an owner that holds
-- the lock already gets an error reply (ARGV[3], "NON_REENTRANT_REACQUIRE") instead of
-- another hold.
-- KEYS[1] lock name (hash: owner field -> 1)
-- ARGV[1] lease, milliseconds
-- ARGV[2] owner field "<client uuid>:<owner id>"
-- ARGV[3] the error code of a reentry
-- Reply: nil when acquired, else the holder's remaining TTL in ms (-1: no TTL).
if redis.call('exists', KEYS[1]) == 0 then
    redis.call('hincrby', KEYS[1], ARGV[2], 1)
    redis.call('pexpire', KEYS[1], ARGV[1])
    return nil
end
if redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
    return redis.error_reply(ARGV[3])
end
return redis.call('pttl', KEYS[1])
