-- Semaphore: give permits back only if the semaphore exists (Redisson 4.0+
-- RedissonSemaphore#releaseIfExistsAsync; spec 9.2). Same KEYS, ARGV, effects and reply as
-- Redisson's script; nothing is created when the key is missing. Its TTL is kept.
-- KEYS[1] semaphore name
-- KEYS[2] channel "redisson_sc:{name}"
-- ARGV[1] permits to give back (>= 1)
-- ARGV[2] publish command
-- Reply: 1 when given back (the new count is published); 0 when the key does not exist.
if redis.call('exists', KEYS[1]) == 0 then
    return 0
end
local value = redis.call('incrby', KEYS[1], ARGV[1])
redis.call(ARGV[2], KEYS[2], value)
return 1
