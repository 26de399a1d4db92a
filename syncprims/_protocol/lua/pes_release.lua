-- PermitExpirableSemaphore release of one permit (Redisson tryRelease; spec 10.3).
-- KEYS[1] semaphore name
-- KEYS[2] leases "{name}:timeout"
-- KEYS[3] channel "redisson_sc:{name}"
-- ARGV[1] the permit id (16 raw bytes)
-- ARGV[2] now, epoch ms
-- ARGV[3] publish command
-- KEYS[4], ARGV[4] (ours, optional) a release latch "redisson_unlock_latch:{name}:<request
--        id>" and its TTL in ms, set when the permit was released: a retry of the same
--        release then returns 1 too (a release whose reply was lost is re-sent; without it
--        the retry said 0). A release that found nothing writes nothing.
-- Reply: 1 when released; 0 when the id is unknown, already released, or its lease had
--        expired (the permit goes back to the pool then, as Redisson does).
-- @include pes_clock
if KEYS[4] then
    local first = redis.call('get', KEYS[4])
    if first ~= false then
        return tonumber(first)
    end
end
ARGV[2] = at(ARGV[2])
local result = 1
local expiry = redis.call('zscore', KEYS[2], ARGV[1])
if redis.call('zrem', KEYS[2], ARGV[1]) == 0 then
    result = 0
else
    local value = redis.call('incrby', KEYS[1], 1)
    redis.call(ARGV[3], KEYS[3], value)
    if tonumber(expiry) <= tonumber(ARGV[2]) then
        result = 0
    end
end
if KEYS[4] and result == 1 then
    redis.call('set', KEYS[4], 1, 'px', ARGV[4])
end
return result
