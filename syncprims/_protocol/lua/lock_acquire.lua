-- RLock acquire (Redisson RedissonLock#tryLockInnerAsync; redisson-spec.md 2.2).
-- KEYS[1] lock name (hash: owner field -> hold count)
-- ARGV[1] lease, milliseconds
-- ARGV[2] owner field "<client uuid>:<owner id>"
-- Reply: nil when acquired (new or reentrant hold; the TTL is reset to the lease),
--        else the holder's remaining TTL in ms (-1 when the key has no TTL).
if (redis.call('exists', KEYS[1]) == 0) or (redis.call('hexists', KEYS[1], ARGV[2]) == 1) then
    redis.call('hincrby', KEYS[1], ARGV[2], 1)
    redis.call('pexpire', KEYS[1], ARGV[1])
    return nil
end
return redis.call('pttl', KEYS[1])
