-- ReadWriteLock with writer preference, read side acquire (syncprims; not in Redisson).
-- rw_read_acquire.lua, except that a new reader waits while a writer waits: a live entry
-- in the writers' set (KEYS[3], written by rw_write_acquire_wp.lua) holds back readers that
-- hold no read lock yet. Reentrant reads, and reads by the write holder, are not held back.
-- KEYS[1] lock name (hash: "mode" -> read|write, reader fields, writer field)
-- KEYS[2] this owner's lease-key prefix "<{name}>:<owner field>:rwlock_timeout"
-- KEYS[3] waiting writers "syncprims_rwlock_writers:{name}" (zset: writer field -> expiry,
--         server time in ms)
-- ARGV[1] lease, milliseconds
-- ARGV[2] reader field "<client uuid>:<owner id>"
-- ARGV[3] writer field "<client uuid>:<owner id>:write" (a writer may also read)
-- Reply: nil when acquired; else how long to wait in ms (the lock's TTL, or until the
--        waiting writer's entry expires).
local mode = redis.call('hget', KEYS[1], 'mode')
if mode ~= 'write' and redis.call('hexists', KEYS[1], ARGV[2]) == 0 then
    local now = redis.call('time')
    local ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
    redis.call('zremrangebyscore', KEYS[3], '-inf', ms)
    local first = redis.call('zrange', KEYS[3], 0, 0, 'WITHSCORES')
    if first[1] then
        local wait = tonumber(first[2]) - ms
        local ttl = redis.call('pttl', KEYS[1])
        if ttl > 0 then
            wait = math.min(wait, ttl)
        end
        return math.max(wait, 1)
    end
end
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
