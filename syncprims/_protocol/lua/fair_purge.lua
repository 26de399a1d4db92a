-- Included by every fair-lock script (redisson-spec.md 4.3): drop stale waiters from the
-- head of the queue. A waiter is stale when its deadline (score) is <= now.
-- Defines purge(queue key, timeout zset key, now ms, grant registry key or nil); touches
-- nothing else (a dropped waiter's one-hop grant registration goes too, when given).
local function purge(queue, timeouts, now, grants)
    while true do
        local head = redis.call('lindex', queue, 0)
        if head == false then
            return
        end
        local score = redis.call('zscore', timeouts, head)
        if score == false or tonumber(score) > now then
            return
        end
        redis.call('zrem', timeouts, head)
        redis.call('lpop', queue)
        if grants then
            redis.call('hdel', grants, head)
        end
    end
end
