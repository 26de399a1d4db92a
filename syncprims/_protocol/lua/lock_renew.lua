-- Watchdog renewal of a batch of locks of one node (Redisson LockRenewalScheduler /
-- LockTask, 3.44+; redisson-spec.md 3.1).
-- KEYS[i] lock names
-- ARGV[1] lease, milliseconds
-- ARGV[i + 1] the owner field whose hold keeps KEYS[i] alive
-- Reply: an array with one integer per key: 1 renewed, 0 the owner no longer holds it.
local result = {}
for i = 1, #KEYS do
    if redis.call('hexists', KEYS[i], ARGV[i + 1]) == 1 then
        redis.call('pexpire', KEYS[i], ARGV[1])
        result[i] = 1
    else
        result[i] = 0
    end
end
return result
