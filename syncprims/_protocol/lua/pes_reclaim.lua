-- Included by the permit-expirable semaphore's scripts (redisson-spec.md 10.1): give the
-- permits of expired leases back. Defines reclaim(name, timeout zset, channel, now ms,
-- limit or nil, publish command) -> number of permits reclaimed.
local function reclaim(name, timeouts, channel, now, limit, publish)
    local expired
    if limit then
        expired = redis.call('zrangebyscore', timeouts, 0, now, 'limit', 0, limit)
    else
        expired = redis.call('zrangebyscore', timeouts, 0, now)
    end
    if #expired > 0 then
        redis.call('zrem', timeouts, unpack(expired))
        local value = redis.call('incrby', name, #expired)
        if value > 0 then
            redis.call(publish, channel, value)
        end
    end
    return #expired
end
