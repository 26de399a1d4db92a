-- RLock force unlock (Redisson RedissonLock#forceUnlockAsync; redisson-spec.md 2.5).
-- KEYS[1] lock name
-- KEYS[2] unlock channel
-- ARGV[1] unlock message ("0")
-- ARGV[2] publish command
-- Reply: 1 when a lock was deleted (and the message published), else 0.
if (redis.call('del', KEYS[1]) == 1) then
    redis.call(ARGV[2], KEYS[2], ARGV[1])
    return 1
end
return 0
