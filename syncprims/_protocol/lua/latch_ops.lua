-- CountDownLatch (Redisson RedissonCountDownLatch; redisson-spec.md 11).
-- KEYS[1] latch name (string: the count)
-- ARGV[1] "try_set", "count_down" or "delete"
-- ARGV[2] the count (try_set)
-- ARGV[3] publish command
-- ARGV[4] channel "redisson_countdownlatch__channel__{name}" (an argument, not a key: for a
--         name with a hash tag it lies in another cluster slot, see CountDownLatch)
-- Reply: try_set: 1 when set (it did not exist; "1" published: a new count), else 0;
--        count_down: the count left (at 0 the key is deleted and "0" published: open);
--        delete: 1 when deleted ("0" published: waiters are released; Redisson publishes
--        "1" and leaves them waiting), else 0.
local op = ARGV[1]
if op == 'try_set' then
    if redis.call('exists', KEYS[1]) == 1 then
        return 0
    end
    redis.call('set', KEYS[1], ARGV[2])
    redis.call(ARGV[3], ARGV[4], '1')
    return 1
end
if op == 'count_down' then
    local value = redis.call('decr', KEYS[1])
    if value <= 0 then
        redis.call('del', KEYS[1])
    end
    if value == 0 then
        redis.call(ARGV[3], ARGV[4], '0')
    end
    return math.max(value, 0)
end
if redis.call('del', KEYS[1]) == 1 then
    redis.call(ARGV[3], ARGV[4], '0')
    return 1
end
return 0
