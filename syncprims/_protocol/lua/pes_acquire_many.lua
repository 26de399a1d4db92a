-- PermitExpirableSemaphore acquire of several permits at once, all or none (Redisson 3.24+
-- RedissonPermitExpirableSemaphore#tryAcquireAsync(List ids, long timeoutDate); spec 10.2).
-- Same KEYS, ARGV and effects as Redisson's script; the reply is an integer (Redisson:
-- 'OK', ':' .. the earliest expiry, or nil).
-- KEYS[1] semaphore name (string: available permits)
-- KEYS[2] leases "{name}:timeout" (zset: raw 16-byte permit id -> expiry epoch ms)
-- KEYS[3] channel "redisson_sc:{name}"
-- ARGV[1] how many permits (= the number of ids, ARGV[6] on)
-- ARGV[2] expiry, epoch ms (or ARGV[4] for permits that never expire)
-- ARGV[3] now, epoch ms
-- ARGV[4] the "never expires" score, 922337203685477
-- ARGV[5] publish command
-- ARGV[i] for i >= 6: the new permits' ids (16 raw bytes each)
-- Reply: 1 when every permit was acquired; else (nothing changes but the reclaim of expired
--        leases) the epoch ms at which the earliest lease expires, or 0 when no lease will
--        expire by itself.
-- @include pes_reclaim
-- @include pes_clock
ARGV[2], ARGV[3] = at(ARGV[2]), at(ARGV[3])
reclaim(KEYS[1], KEYS[2], KEYS[3], tonumber(ARGV[3]), tonumber(ARGV[1]), ARGV[5])
local value = redis.call('get', KEYS[1])
if value ~= false and tonumber(value) >= tonumber(ARGV[1]) then
    redis.call('decrby', KEYS[1], ARGV[1])
    for i = 6, #ARGV, 1 do
        redis.call('zadd', KEYS[2], ARGV[2], ARGV[i])
    end
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
