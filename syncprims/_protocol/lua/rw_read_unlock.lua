-- ReadWriteLock, read side unlock, idempotent per request id (Redisson
-- RedissonReadLock#unlockInnerAsync; spec 5.3). When a reader leaves, the lock's TTL becomes
-- the longest live read lease: readers of a crashed client no longer keep it alive.
-- KEYS[1] lock name
-- KEYS[2] channel "redisson_rwlock:{name}"
-- KEYS[3] this owner's lease-key prefix "<{name}>:<owner field>:rwlock_timeout"
-- KEYS[4] the name's key prefix "{name}" (or the name itself when it has a hash tag)
-- KEYS[5] unlock latch "redisson_unlock_latch:{name}:<request id>"
-- ARGV[1] message ("0": wakes one waiter per client)
-- ARGV[2] reader field
-- ARGV[3] publish command
-- ARGV[4] latch TTL, milliseconds
-- Reply: nil when this owner holds no read lock (or the lock does not exist); 0 when the
--        lock is still held (by this owner or others); 1 when it was released.
local val = redis.call('get', KEYS[5])
if val ~= false then
    return tonumber(val)
end
local mode = redis.call('hget', KEYS[1], 'mode')
if mode == false then
    redis.call(ARGV[3], KEYS[2], ARGV[1])
    return nil  -- no latch (Redisson sets it to 1: a retry then answered "released")
end
if redis.call('hexists', KEYS[1], ARGV[2]) == 0 then
    return nil
end
local counter = redis.call('hincrby', KEYS[1], ARGV[2], -1)
if counter == 0 then
    redis.call('hdel', KEYS[1], ARGV[2])
end
redis.call('del', KEYS[3] .. ':' .. (counter + 1))
if redis.call('hlen', KEYS[1]) > 1 then
    local max_remain = -3
    local fields = redis.call('hkeys', KEYS[1])
    for _, field in ipairs(fields) do
        local holds = tonumber(redis.call('hget', KEYS[1], field))
        if type(holds) == 'number' then
            for i = holds, 1, -1 do
                local remain = redis.call('pttl', KEYS[4] .. ':' .. field .. ':rwlock_timeout:' .. i)
                max_remain = math.max(remain, max_remain)
            end
        end
    end
    if max_remain > 0 then
        redis.call('pexpire', KEYS[1], max_remain)
        redis.call('set', KEYS[5], 0, 'px', ARGV[4])
        return 0
    end
    if mode == 'write' then
        redis.call('set', KEYS[5], 0, 'px', ARGV[4])
        return 0
    end
end
redis.call('del', KEYS[1])
redis.call(ARGV[3], KEYS[2], ARGV[1])
redis.call('set', KEYS[5], 1, 'px', ARGV[4])
return 1
