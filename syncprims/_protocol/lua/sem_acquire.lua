-- Semaphore acquire (Redisson RedissonSemaphore#tryAcquireAsync; redisson-spec.md 9.2).
-- KEYS[1] semaphore name (string: available permits)
-- ARGV[1] permits to take (>= 1)
-- Reply: 1 when taken, 0 when not enough permits are available (nothing changes).
local value = redis.call('get', KEYS[1])
if value ~= false and tonumber(value) >= tonumber(ARGV[1]) then
    redis.call('decrby', KEYS[1], ARGV[1])
    return 1
end
return 0
