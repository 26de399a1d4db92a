-- ReadWriteLock, write side acquire (Redisson RedissonWriteLock#tryLockInnerAsync; spec 5.4).
-- A reader cannot upgrade: mode "read" blocks the writer, even the owner of every read hold.
-- KEYS[1] lock name
-- ARGV[1] lease, milliseconds
-- ARGV[2] writer field "<client uuid>:<owner id>:write"
-- Reply: nil when acquired (a reentrant write hold adds the lease to the TTL, as Redisson);
--        else the lock's TTL in ms.
local mode = redis.call('hget', KEYS[1], 'mode')
if mode == false then
    redis.call('hset', KEYS[1], 'mode', 'write')
    redis.call('hset', KEYS[1], ARGV[2], 1)
    redis.call('pexpire', KEYS[1], ARGV[1])
    return nil
end
if mode == 'write' and redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
    redis.call('hincrby', KEYS[1], ARGV[2], 1)
    local remain = redis.call('pttl', KEYS[1])
    redis.call('pexpire', KEYS[1], remain + tonumber(ARGV[1]))
    return nil
end
return redis.call('pttl', KEYS[1])
