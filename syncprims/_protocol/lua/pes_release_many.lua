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
-- Reply: the number of permits released: 0 (nothing changes) when any id is unknown,
--        already released or expired; else every id is released, expired leases are
--        reclaimed, and the number released is published.
-- @include pes_reclaim
for i = 4, #ARGV, 1 do
    local expiry = redis.call('zscore', KEYS[3], ARGV[i])
    if expiry == false or tonumber(expiry) <= tonumber(ARGV[2]) then
        return 0
    end
end
reclaim(KEYS[1], KEYS[3], KEYS[2], tonumber(ARGV[2]), nil, ARGV[3])
local ids = {}
for i = 4, #ARGV, 1 do
    table.insert(ids, ARGV[i])
end
local removed = redis.call('zrem', KEYS[3], unpack(ids))
redis.call('incrby', KEYS[1], removed)
redis.call(ARGV[3], KEYS[2], removed)
return removed
