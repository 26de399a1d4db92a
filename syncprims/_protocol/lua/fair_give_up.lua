-- FairLock: a waiter gives up (Redisson RedissonFairLock#acquireFailedAsync; spec 4.6).
-- Idempotent: a second run finds nothing to remove.
-- KEYS[1] wait queue
-- KEYS[2] waiter deadlines
-- ARGV[1] owner field
-- ARGV[2] wait slot, milliseconds: the deadlines behind the leaver move this much earlier
-- The one-hop grant (syncprims; optional): KEYS[3] grant registry (fair_acquire.lua), whose
-- entry for the owner goes too; ARGV[3] "" or the wait's registration.
-- Reply: nil; with KEYS[3], 1 when the owner's entry was ARGV[3] (so no release granted it
--        the lock), else 0.
local queue = redis.call('lrange', KEYS[1], 0, -1)
local i = 1
while i <= #queue and queue[i] ~= ARGV[1] do
    i = i + 1
end
i = i + 1
while i <= #queue do
    redis.call('zincrby', KEYS[2], -tonumber(ARGV[2]), queue[i])
    i = i + 1
end
redis.call('zrem', KEYS[2], ARGV[1])
redis.call('lrem', KEYS[1], 0, ARGV[1])
if KEYS[3] then
    local entry = redis.call('hget', KEYS[3], ARGV[1])
    redis.call('hdel', KEYS[3], ARGV[1])
    if entry and ARGV[3] ~= '' and entry == ARGV[2] .. ' ' .. ARGV[3] then
        return 1
    end
    return 0
end
return nil
