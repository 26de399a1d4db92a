-- Semaphore: set, add to or drain the permits (Redisson trySetPermits / addPermits /
-- drainPermits; spec 9.2). Unlike Redisson, add and drain keep the key's TTL (KEEPTTL).
-- KEYS[1] semaphore name
-- KEYS[2] channel "redisson_sc:{name}"
-- ARGV[1] "try_set", "add" or "drain"
-- ARGV[2] permits (try_set: the initial count; add: the change, may be negative; drain: 0)
-- ARGV[3] publish command
-- Reply: try_set: 1 when set (the key did not exist), else 0; add: the new count;
--        drain: the permits that were available (0 when the key was missing).
local op = ARGV[1]
local value = redis.call('get', KEYS[1])
if op == 'try_set' then
    if value ~= false then
        return 0
    end
    redis.call('set', KEYS[1], ARGV[2])
    redis.call(ARGV[3], KEYS[2], ARGV[2])
    return 1
end
if op == 'add' then
    local new = tonumber(value or '0') + tonumber(ARGV[2])
    if value == false then
        redis.call('set', KEYS[1], new)
    else
        redis.call('set', KEYS[1], new, 'keepttl')
    end
    redis.call(ARGV[3], KEYS[2], new)
    return new
end
if value == false then
    return 0
end
redis.call('set', KEYS[1], 0, 'keepttl')
return tonumber(value)
