-- SpinLock force unlock (Redisson RedissonSpinLock#forceUnlockAsync): delete, publish nothing.
-- KEYS[1] lock name
-- Reply: 1 when a lock was deleted, else 0.
if (redis.call('del', KEYS[1]) == 1) then
    return 1
end
return 0
