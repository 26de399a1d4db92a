-- PermitExpirableSemaphore release of one permit (Redisson tryRelease; spec 10.3).
-- KEYS[1] semaphore name
-- KEYS[2] leases "{name}:timeout"
-- KEYS[3] channel "redisson_sc:{name}"
-- ARGV[1] the permit id (16 raw bytes)
-- ARGV[2] now, epoch ms
-- ARGV[3] publish command
-- Reply: 1 when released; 0 when the id is unknown, already released, or its lease had
--        expired (the permit goes back to the pool then, as Redisson does).
local expiry = redis.call('zscore', KEYS[2], ARGV[1])
if redis.call('zrem', KEYS[2], ARGV[1]) == 0 then
    return 0
end
local value = redis.call('incrby', KEYS[1], 1)
redis.call(ARGV[3], KEYS[3], value)
if tonumber(expiry) <= tonumber(ARGV[2]) then
    return 0
end
return 1
