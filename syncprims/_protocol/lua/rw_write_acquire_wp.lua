-- ReadWriteLock with writer preference, write side acquire (syncprims; not in Redisson).
-- rw_write_acquire.lua; in addition a writer that has to wait registers (or refreshes) its
-- entry in the waiting writers' set, which holds back new readers of syncprims clients with
-- writer preference (rw_read_acquire_wp.lua), and removes it once it holds the lock.
-- KEYS[1] lock name
-- KEYS[2] waiting writers "syncprims_rwlock_writers:{name}" (zset: writer field -> expiry,
--         server time in ms)
-- ARGV[1] lease, milliseconds
-- ARGV[2] writer field "<client uuid>:<owner id>:write"
-- ARGV[3] how long the entry lives unless refreshed, milliseconds
-- ARGV[4] the longest the writer may wait before its next attempt (the refresh), ms
-- Reply: nil when acquired; else how long to wait in ms (the lock's TTL, at most ARGV[4]).
local mode = redis.call('hget', KEYS[1], 'mode')
if mode == false then
    redis.call('hset', KEYS[1], 'mode', 'write')
    redis.call('hset', KEYS[1], ARGV[2], 1)
    redis.call('pexpire', KEYS[1], ARGV[1])
    redis.call('zrem', KEYS[2], ARGV[2])
    return nil
end
if mode == 'write' and redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
    redis.call('hincrby', KEYS[1], ARGV[2], 1)
    local remain = redis.call('pttl', KEYS[1])
    redis.call('pexpire', KEYS[1], remain + tonumber(ARGV[1]))
    return nil
end
local now = redis.call('time')
local ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
redis.call('zremrangebyscore', KEYS[2], '-inf', ms)
redis.call('zadd', KEYS[2], ms + tonumber(ARGV[3]), ARGV[2])
redis.call('pexpire', KEYS[2], ARGV[3])
local ttl = redis.call('pttl', KEYS[1])
if ttl > 0 then
    return math.min(ttl, tonumber(ARGV[4]))
end
return tonumber(ARGV[4])
