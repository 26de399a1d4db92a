-- ReadWriteLock, read side acquire (Redisson RedissonReadLock#tryLockInnerAsync; spec 5.2).
-- KEYS[1] lock name (hash: "mode" -> read|write, reader fields, writer field)
-- KEYS[2] this owner's lease-key prefix "<{name}>:<owner field>:rwlock_timeout"
--         (one string key per read hold: prefix:1, prefix:2, ...)
-- ARGV[1] lease, milliseconds
-- ARGV[2] reader field "<client uuid>:<owner id>"
-- ARGV[3] writer field "<client uuid>:<owner id>:write" (a writer may also read)
-- Reply: nil when acquired; else the lock's TTL in ms (a writer holds it).
local mode = redis.call('hget', KEYS[1], 'mode')
if mode == false then
    redis.call('hset', KEYS[1], 'mode', 'read')
    redis.call('hset', KEYS[1], ARGV[2], 1)
    redis.call('set', KEYS[2] .. ':1', 1)
    redis.call('pexpire', KEYS[2] .. ':1', ARGV[1])
    redis.call('pexpire', KEYS[1], ARGV[1])
    return nil
end
if (mode == 'read') or (mode == 'write' and redis.call('hexists', KEYS[1], ARGV[3]) == 1) then
    local n = redis.call('hincrby', KEYS[1], ARGV[2], 1)
    local key = KEYS[2] .. ':' .. n
    redis.call('set', key, 1)
    redis.call('pexpire', key, ARGV[1])
    local remain = redis.call('pttl', KEYS[1])
    redis.call('pexpire', KEYS[1], math.max(remain, tonumber(ARGV[1])))
    return nil
end
return redis.call('pttl', KEYS[1])
