-- ReadWriteLock with writer preference, read side acquire (syncprims; not in Redisson).
-- rw_read_acquire.lua (included at the end, unchanged), except that a new reader waits
-- while a writer waits: a live entry in the writers' set (KEYS[3], written by
-- rw_write_acquire_wp.lua) holds back readers that hold no read lock yet. Reentrant reads,
-- and reads by the write holder, are not held back.
-- KEYS[1] lock name (hash: "mode" -> read|write, reader fields, writer field)
-- KEYS[2] this owner's lease-key prefix "<{name}>:<owner field>:rwlock_timeout"
-- KEYS[3] waiting writers "syncprims_rwlock_writers:{name}" (zset: writer field -> expiry,
--         server time in ms)
-- ARGV[1] lease, milliseconds
-- ARGV[2] reader field "<client uuid>:<owner id>"
-- ARGV[3] writer field "<client uuid>:<owner id>:write" (a writer may also read)
-- Reply: nil when acquired; else how long to wait in ms (the lock's TTL, or until the
--        waiting writer's entry expires).
if redis.call('hget', KEYS[1], 'mode') ~= 'write'
    and redis.call('hexists', KEYS[1], ARGV[2]) == 0 then
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
-- The rest is Redisson's read acquire, unchanged:
-- @include rw_read_acquire
