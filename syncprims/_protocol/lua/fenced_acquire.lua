-- FencedLock acquire (Redisson RedissonFencedLock; redisson-spec.md 7): an RLock acquire
-- that also increments the lock's token on every successful acquisition, reentrant ones too.
-- KEYS[1] lock name (hash: owner field -> hold count)
-- KEYS[2] token "redisson_lock_token:{name}" (integer, no TTL)
-- ARGV[1] lease, milliseconds
-- ARGV[2] owner field
-- Reply: {0, token} when acquired; {1, the holder's TTL in ms (-1: none)} when not.
--        (Redisson answers {-1, token} / {pttl, -1}, which a holder without TTL makes
--        ambiguous; the flag first is ours.)
if (redis.call('exists', KEYS[1]) == 0) or (redis.call('hexists', KEYS[1], ARGV[2]) == 1) then
    local token = redis.call('incr', KEYS[2])
    redis.call('hincrby', KEYS[1], ARGV[2], 1)
    redis.call('pexpire', KEYS[1], ARGV[1])
    return {0, token}
end
return {1, redis.call('pttl', KEYS[1])}
