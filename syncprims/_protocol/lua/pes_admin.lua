-- PermitExpirableSemaphore: counts, capacity and leases (Redisson availablePermits,
-- acquiredPermits, trySetPermits, setPermits, updateLeaseTime; spec 10.4). Expired leases
-- are reclaimed first.
-- KEYS[1] semaphore name
-- KEYS[2] leases "{name}:timeout"
-- KEYS[3] channel "redisson_sc:{name}"
-- ARGV[1] "available", "acquired", "try_set", "set" or "update"
-- ARGV[2] now, epoch ms
-- ARGV[3] publish command
-- ARGV[4] permits (try_set, set), or the new expiry epoch ms (update)
-- ARGV[5] the permit id (update)
-- Reply: available / acquired: a count; try_set: 1 when set, else 0; set: 1;
--        update: 1 when the permit exists, else 0.
-- @include pes_reclaim
-- @include pes_clock
ARGV[2] = at(ARGV[2])
if ARGV[1] == 'update' then
    ARGV[4] = at(ARGV[4])
end
local op = ARGV[1]
reclaim(KEYS[1], KEYS[2], KEYS[3], tonumber(ARGV[2]), nil, ARGV[3])
if op == 'available' then
    return tonumber(redis.call('get', KEYS[1]) or '0')
end
if op == 'acquired' then
    return redis.call('zcount', KEYS[2], '-inf', '+inf')
end
if op == 'try_set' then
    if redis.call('exists', KEYS[1]) == 1 then
        return 0
    end
    redis.call('set', KEYS[1], ARGV[4])
    redis.call(ARGV[3], KEYS[3], ARGV[4])
    return 1
end
if op == 'set' then
    local available = redis.call('get', KEYS[1])
    if available == false then
        redis.call('set', KEYS[1], ARGV[4])
    else
        local total = tonumber(available) + redis.call('zcount', KEYS[2], '-inf', '+inf')
        if total ~= tonumber(ARGV[4]) then
            redis.call('incrby', KEYS[1], tonumber(ARGV[4]) - total)
        end
    end
    redis.call(ARGV[3], KEYS[3], ARGV[4])
    return 1
end
if redis.call('zscore', KEYS[2], ARGV[5]) == false then
    return 0
end
redis.call('zadd', KEYS[2], ARGV[4], ARGV[5])
return 1
