-- PermitExpirableSemaphore total permits, available + leased (Redisson getPermits; spec
-- 10.4). Expired leases are reclaimed first. Same KEYS, ARGV, effects and reply as
-- Redisson's script.
-- KEYS[1] semaphore name
-- KEYS[2] leases "{name}:timeout"
-- KEYS[3] channel "redisson_sc:{name}"
-- ARGV[1] now, epoch ms
-- ARGV[2] publish command
-- Reply: available + leased permits; 0 when the semaphore's counter does not exist.
-- @include pes_reclaim
-- @include pes_clock
ARGV[1] = at(ARGV[1])
reclaim(KEYS[1], KEYS[2], KEYS[3], tonumber(ARGV[1]), nil, ARGV[2])
local available = redis.call('get', KEYS[1])
if available == false then
    return 0
end
return tonumber(available) + redis.call('zcount', KEYS[2], 0, '+inf')
