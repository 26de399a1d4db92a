-- FairLock acquire (Redisson RedissonFairLock#tryLockInnerAsync; redisson-spec.md 4.4, 4.5).
-- KEYS[1] lock name (hash: owner field -> hold count)
-- KEYS[2] wait queue "redisson_lock_queue:{name}" (list of owner fields, head first)
-- KEYS[3] waiter deadlines "redisson_lock_timeout:{name}" (zset: owner field -> epoch ms)
-- ARGV[1] lease, milliseconds
-- ARGV[2] owner field
-- ARGV[3] wait slot, milliseconds (how much later each waiter's deadline is)
-- ARGV[4] now, client wall clock, epoch milliseconds
-- ARGV[5] "1": enqueue when not acquired (waiting form); "0": single attempt
-- Reply: nil when acquired (or re-entered); else how long (ms) to wait before retrying:
--        the holder's TTL, or for a new waiter behind others the time to its predecessor's
--        deadline; 0 when the lock is free but another waiter is first in line.
-- @include fair_purge
local now = tonumber(ARGV[4])
purge(KEYS[2], KEYS[3], now)
if (redis.call('exists', KEYS[1]) == 0)
        and ((redis.call('exists', KEYS[2]) == 0) or (redis.call('lindex', KEYS[2], 0) == ARGV[2])) then
    redis.call('lpop', KEYS[2])
    redis.call('zrem', KEYS[3], ARGV[2])
    local waiters = redis.call('zrange', KEYS[3], 0, -1)
    for i = 1, #waiters do
        redis.call('zincrby', KEYS[3], -tonumber(ARGV[3]), waiters[i])
    end
    redis.call('hset', KEYS[1], ARGV[2], 1)
    redis.call('pexpire', KEYS[1], ARGV[1])
    return nil
end
if redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
    redis.call('hincrby', KEYS[1], ARGV[2], 1)
    redis.call('pexpire', KEYS[1], ARGV[1])
    return nil
end
if ARGV[5] ~= '1' or redis.call('zscore', KEYS[3], ARGV[2]) ~= false then
    -- a single attempt, or already queued: tell how long the holder may keep it
    return math.max(0, redis.call('pttl', KEYS[1]))
end
local ttl
local last = redis.call('lindex', KEYS[2], -1)
local last_deadline = false
if last ~= false and last ~= ARGV[2] then
    last_deadline = redis.call('zscore', KEYS[3], last)
end
if last_deadline ~= false then
    ttl = tonumber(last_deadline) - now
else
    ttl = redis.call('pttl', KEYS[1])
end
local deadline = ttl + tonumber(ARGV[3]) + now
if redis.call('zadd', KEYS[3], deadline, ARGV[2]) == 1 then
    redis.call('rpush', KEYS[2], ARGV[2])
end
return math.max(0, ttl)
