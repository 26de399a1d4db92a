-- PermitExpirableSemaphore: the lease left of one permit (Redisson getLeaseTime; spec
-- 10.4). Expired leases are reclaimed first. Same KEYS, ARGV, effects and reply as
-- Redisson's script.
-- KEYS[1] semaphore name
-- KEYS[2] leases "{name}:timeout"
-- KEYS[3] channel "redisson_sc:{name}"
-- ARGV[1] the permit id (16 raw bytes)
-- ARGV[2] the "never expires" score, 922337203685477
-- ARGV[3] now, epoch ms
-- ARGV[4] publish command
-- Reply: -1 when the permit never expires; else the ms left (> 0); 0 when the id is
--        unknown, released or expired.
-- @include pes_reclaim
-- @include pes_clock
ARGV[3] = at(ARGV[3])
reclaim(KEYS[1], KEYS[2], KEYS[3], tonumber(ARGV[3]), nil, ARGV[4])
local expiry = redis.call('zscore', KEYS[2], ARGV[1])
if expiry == false then
    return 0
end
if tonumber(expiry) == tonumber(ARGV[2]) then
    return -1
end
return tonumber(expiry) - tonumber(ARGV[3])
