-- PermitExpirableSemaphore acquire of one permit (Redisson
-- RedissonPermitExpirableSemaphore#tryAcquireAsync; redisson-spec.md 10.2).
-- KEYS[1] semaphore name (string: available permits)
-- KEYS[2] leases "{name}:timeout" (zset: raw 16-byte permit id -> expiry epoch ms)
-- KEYS[3] channel "redisson_sc:{name}"
-- ARGV[1] the new permit's id (16 raw bytes)
-- ARGV[2] expiry, epoch ms (or ARGV[4] for a permit that never expires)
-- ARGV[3] now, epoch ms
-- ARGV[4] the "never expires" score, 922337203685477
-- ARGV[5] publish command
-- Reply: 1 when acquired; else the epoch ms at which the earliest lease expires, or 0 when
--        no lease will expire by itself.
-- @include pes_reclaim
-- @include pes_clock
ARGV[2], ARGV[3] = at(ARGV[2]), at(ARGV[3])
reclaim(KEYS[1], KEYS[2], KEYS[3], tonumber(ARGV[3]), 1, ARGV[5])
local value = redis.call('get', KEYS[1])
if value ~= false and tonumber(value) >= 1 then
    redis.call('decrby', KEYS[1], 1)
    redis.call('zadd', KEYS[2], ARGV[2], ARGV[1])
    local ttl = redis.call('pttl', KEYS[1])
    if ttl > 0 then
        redis.call('pexpire', KEYS[2], ttl)
    end
    return 1
end
local first = redis.call('zrange', KEYS[2], 0, 0, 'withscores')
if first[2] ~= nil and first[2] ~= ARGV[4] then
    return tonumber(first[2])
end
return 0
