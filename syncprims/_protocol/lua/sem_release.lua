-- Semaphore release (Redisson RedissonSemaphore#releaseAsync; spec 9.2). Creates the key
-- when missing; its TTL is kept.
-- KEYS[1] semaphore name
-- KEYS[2] channel "redisson_sc:{name}"
-- ARGV[1] permits to give back (>= 1)
-- ARGV[2] publish command
-- Reply: the new number of available permits (also published).
local value = redis.call('incrby', KEYS[1], ARGV[1])
redis.call(ARGV[2], KEYS[2], value)
return value
