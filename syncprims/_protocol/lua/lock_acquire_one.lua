-- RLock acquire with one wake-up per release (syncprims; the lock's layout is Redisson's).
-- lock_acquire.lua, plus the registry of waiting syncprims clients: a client that has to
-- wait registers (oldest first), so that a release (lock_unlock_one.lua) can name one of
-- them to wake instead of every subscribed client waking a waiter.
-- A release that named a client also reserves the free lock for it for a moment (KEYS[3],
-- set by lock_unlock_one.lua): other syncprims callers do not barge in meanwhile, so the
-- woken client's attempt is not wasted (Redisson clients do not know the reservation).
-- KEYS[1] lock name (hash: owner field -> hold count)
-- KEYS[2] waiting clients "syncprims_lock_waiters:{name}" (zset: client id -> expiry, server
--         time in ms; registered with NX, so the oldest registration comes first)
-- KEYS[3] reservation "syncprims_lock_next:{name}" (the named client id, a short TTL)
-- ARGV[1] lease, milliseconds
-- ARGV[2] owner field "<client uuid>:<owner id>"
-- ARGV[3] client id
-- ARGV[4] "1": this attempt waits if it fails (register), "0": a single attempt
-- ARGV[5] "1": other threads/tasks of this client still wait for this lock (stay registered)
-- ARGV[6] registration lifetime, ms
-- ARGV[7] the longest the caller may sleep before its next attempt, ms
-- Reply: nil when acquired; else how long to wait in ms (the holder's TTL, or what is left
--        of another client's reservation; at most ARGV[7]; ARGV[7] when there is no TTL).
local free = redis.call('exists', KEYS[1]) == 0
local reserved = false
if free then
    local next = redis.call('get', KEYS[3])
    if next == ARGV[3] then
        redis.call('del', KEYS[3])
    elseif next then
        reserved = true
    end
end
if (free and not reserved) or (not free and redis.call('hexists', KEYS[1], ARGV[2]) == 1) then
    redis.call('hincrby', KEYS[1], ARGV[2], 1)
    redis.call('pexpire', KEYS[1], ARGV[1])
    if ARGV[5] == '0' then
        redis.call('zrem', KEYS[2], ARGV[3])
    end
    return nil
end
if ARGV[4] == '1' then
    local now = redis.call('time')
    local ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
    redis.call('zadd', KEYS[2], 'NX', ms + tonumber(ARGV[6]), ARGV[3])
    redis.call('pexpire', KEYS[2], ARGV[6])
end
local ttl = redis.call('pttl', KEYS[1])
if reserved then
    ttl = redis.call('pttl', KEYS[3])
end
if ttl < 0 then
    return tonumber(ARGV[7])
end
return math.min(ttl, tonumber(ARGV[7]))
