-- FencedLock acquire with durable tokens (ours; get_fenced_lock(name, durable_tokens=True)):
-- as fenced_acquire, but a token is never lower than the server's clock in microseconds
-- since the epoch, so tokens stay strictly higher than every earlier one across an empty
-- restart, the eviction of the counter and a failover that lost its last writes (as long as
-- the server's clock does not step back further than the time between the loss and the
-- next acquisition). The counter keeps Redisson's layout: a Redisson client's INCR goes on
-- from the floor.
-- KEYS[1] lock name (hash: owner field -> hold count)
-- KEYS[2] token "redisson_lock_token:{name}" (integer, no TTL)
-- ARGV[1] lease, milliseconds
-- ARGV[2] owner field
-- Reply: {0, token} when acquired; {1, the holder's TTL in ms (-1: none)} when not.
if (redis.call('exists', KEYS[1]) == 0) or (redis.call('hexists', KEYS[1], ARGV[2]) == 1) then
    local now = redis.call('time')
    local floor = tonumber(now[1]) * 1000000 + tonumber(now[2])
    local token = tonumber(redis.call('get', KEYS[2]) or '0') + 1
    if token < floor then
        token = floor
    end
    redis.call('set', KEYS[2], string.format('%d', token))
    redis.call('hincrby', KEYS[1], ARGV[2], 1)
    redis.call('pexpire', KEYS[1], ARGV[1])
    return {0, token}
end
return {1, redis.call('pttl', KEYS[1])}
