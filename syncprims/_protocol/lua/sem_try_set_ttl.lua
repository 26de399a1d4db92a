-- Semaphore: set the permits and a time to live if the semaphore does not exist yet,
-- atomically (Redisson 3.29+ RedissonSemaphore#trySetPermitsAsync(int, Duration); spec
-- 9.2). Same KEYS, ARGV, effects and reply as Redisson's script.
-- KEYS[1] semaphore name
-- KEYS[2] channel "redisson_sc:{name}"
-- ARGV[1] permits (the initial count)
-- ARGV[2] publish command
-- ARGV[3] time to live, ms (> 0)
-- Reply: 1 when set (the key did not exist; the count is published), else 0.
if redis.call('get', KEYS[1]) ~= false then
    return 0
end
redis.call('set', KEYS[1], ARGV[1], 'px', ARGV[3])
redis.call(ARGV[2], KEYS[2], ARGV[1])
return 1
