-- Watchdog renewal of read holds (Redisson ReadLockTask, 4.4+; redisson-spec.md 3.1): only
-- this client's readers are renewed, so readers of a crashed client expire. The lock's own
-- TTL is only ever extended here (ours): another reader's longer lease keeps its time.
-- KEYS[2i-1] a lock name; KEYS[2i] that name's key prefix ("{name}", or the tagged name)
-- ARGV[1] lease, milliseconds
-- ARGV[i + 1] the reader field renewed for the i-th lock
-- Reply: an array with one integer per lock: 1 renewed, 0 the reader holds nothing there.
local result = {}
for i = 1, #KEYS / 2 do
    local name = KEYS[2 * i - 1]
    local field = ARGV[i + 1]
    local holds = tonumber(redis.call('hget', name, field))
    if holds ~= nil and holds > 0 then
        for k = holds, 1, -1 do
            redis.call('pexpire', KEYS[2 * i] .. ':' .. field .. ':rwlock_timeout:' .. k, ARGV[1])
        end
        -- Never shortened (Redisson's sets it): another reader's longer explicit lease lives
        -- in this TTL too, and a renewal cut it to the watchdog's.
        if redis.call('pttl', name) < tonumber(ARGV[1]) then
            redis.call('pexpire', name, ARGV[1])
        end
        result[i] = 1
    else
        result[i] = 0
    end
end
return result
