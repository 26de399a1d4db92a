-- PermitExpirableSemaphore release of several permits, all or none (Redisson
-- RedissonPermitExpirableSemaphore#tryReleaseAsync(List); spec 10.3). Same KEYS (note
-- their order), ARGV, effects and reply as Redisson's script.
-- KEYS[1] semaphore name
-- KEYS[2] channel "redisson_sc:{name}"
-- KEYS[3] leases "{name}:timeout"
-- ARGV[1] how many ids (ARGV[4] on)
-- ARGV[2] now, epoch ms
-- ARGV[3] publish command
-- ARGV[i] for i >= 4: the permit ids (16 raw bytes each, no duplicates)
-- KEYS[4], ARGV[4] (ours, optional) a release latch "redisson_unlock_latch:{name}:<request
--        id>" and its TTL in ms (the ids then start at ARGV[5]), set when the permits were
--        released: a retry of the same release returns the same count. A release that
--        released nothing writes nothing.
-- Reply: the number of permits released: 0 (nothing changes) when any id is unknown,
--        already released or expired; else every id is released, expired leases are
--        reclaimed, and the number released is published.
-- @include pes_reclaim
-- @include pes_clock
local first_id = 4
if KEYS[4] then
    local first = redis.call('get', KEYS[4])
    if first ~= false then
        return tonumber(first)
    end
    first_id = 5
end
local function done(result)
    if KEYS[4] and result > 0 then
        redis.call('set', KEYS[4], result, 'px', ARGV[4])
    end
    return result
end
ARGV[2] = at(ARGV[2])
for i = first_id, #ARGV, 1 do
    local expiry = redis.call('zscore', KEYS[3], ARGV[i])
    if expiry == false or tonumber(expiry) <= tonumber(ARGV[2]) then
        return done(0)
    end
end
reclaim(KEYS[1], KEYS[3], KEYS[2], tonumber(ARGV[2]), nil, ARGV[3])
local ids = {}
for i = first_id, #ARGV, 1 do
    table.insert(ids, ARGV[i])
end
local removed = redis.call('zrem', KEYS[3], unpack(ids))
redis.call('incrby', KEYS[1], removed)
redis.call(ARGV[3], KEYS[2], removed)
return done(removed)
