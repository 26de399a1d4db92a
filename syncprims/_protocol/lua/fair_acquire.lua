-- FairLock acquire (Redisson RedissonFairLock#tryLockInnerAsync; redisson-spec.md 4.4, 4.5).
-- KEYS[1] lock name (hash: owner field -> hold count)
-- KEYS[2] wait queue "redisson_lock_queue:{name}" (list of owner fields, head first)
-- KEYS[3] waiter deadlines "redisson_lock_timeout:{name}" (zset: owner field -> epoch ms)
-- ARGV[1] lease, milliseconds
-- ARGV[2] owner field
-- ARGV[3] wait slot, milliseconds (how much later each waiter's deadline is)
-- ARGV[4] now, client wall clock, epoch milliseconds
-- ARGV[5] "1": enqueue when not acquired (waiting form); "0": single attempt
-- The one-hop grant (syncprims; optional, with all of the following; fair_unlock.lua):
-- KEYS[4] grant registry "syncprims_lock_waiters:{name}:fair" (hash: owner field ->
--         "<wait slot ms> <registration>"), KEYS[5] grant marker "syncprims_lock_granted:{name}"
-- ARGV[6] "" or this wait's registration "g|<lease ms>|<wait id>|<owner field>" (or "b|...",
--         a direct one: see lock_unlock_one.lua); ARGV[7] the registration to make when
--         ARGV[6] is not (or no longer) registered; ARGV[8] "1": register (the client's grant
--         channel is subscribed), "0": do not; ARGV[9] the registry's lifetime, ms.
--         A queued owner without a registration has none in the registry (a stale one of an
--         earlier wait of the same owner would be granted a hold nobody takes).
-- ARGV[10] (optional, ARGV[6..9] then given, "" when unused) an error code: the lock is
--         non-reentrant (Redisson 4.4 RedissonNonReentrantFairLock): an owner that holds it
--         already gets that error reply instead of another hold
-- Reply: nil when acquired (or re-entered); -3 when a release granted the lock to ARGV[6]
--        and this attempt claimed it; else how long (ms) to wait before retrying:
--        the holder's TTL, or for a new waiter behind others the time to its predecessor's
--        deadline; 0 when the lock is free but another waiter is first in line. With ARGV[6]
--        set, that wait as {ms, 1 when ARGV[7] was registered now, else 0}.
-- @include fair_purge
local now = tonumber(ARGV[4])
local grants = KEYS[4]
local member = ARGV[6] or ''
purge(KEYS[2], KEYS[3], now, grants)
if member ~= '' and redis.call('get', KEYS[5]) == member then
    redis.call('del', KEYS[5])
    if redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
        return -3
    end
end
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
    if grants then
        redis.call('hdel', grants, ARGV[2])
    end
    return nil
end
if redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
    if ARGV[10] then
        return redis.error_reply(ARGV[10])
    end
    redis.call('hincrby', KEYS[1], ARGV[2], 1)
    redis.call('pexpire', KEYS[1], ARGV[1])
    return nil
end
-- the one-hop grant's registration of a waiting owner (queued by now, or queued below)
local function register()
    if not grants or ARGV[5] ~= '1' then
        return 0
    end
    if member == '' or ARGV[8] ~= '1' then
        redis.call('hdel', grants, ARGV[2])
        return 0
    end
    local fresh = 0
    if redis.call('hget', grants, ARGV[2]) ~= ARGV[3] .. ' ' .. member then
        member = ARGV[7]
        fresh = 1
        redis.call('hset', grants, ARGV[2], ARGV[3] .. ' ' .. member)
    end
    redis.call('pexpire', grants, ARGV[9])
    return fresh
end
local function reply(ttl, fresh)
    if ARGV[6] ~= nil and ARGV[6] ~= '' then
        return {ttl, fresh}
    end
    return ttl
end
if ARGV[5] ~= '1' or redis.call('zscore', KEYS[3], ARGV[2]) ~= false then
    -- a single attempt, or already queued: tell how long the holder may keep it
    return reply(math.max(0, redis.call('pttl', KEYS[1])), register())
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
return reply(math.max(0, ttl), register())
