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
-- KEYS[4] grant marker "syncprims_lock_granted:{name}": the registration a release granted
--         the lock to (lock_unlock_one.lua), while that hold lasts
-- ARGV[1] lease, milliseconds
-- ARGV[2] owner field "<client uuid>:<owner id>"
-- ARGV[3] client id
-- ARGV[4] "1": this attempt waits if it fails (register), "0": a single attempt
-- ARGV[5] "1": other threads/tasks of this client still wait for this lock (stay registered)
-- ARGV[6] registration lifetime, ms
-- ARGV[7] the longest the caller may sleep before its next attempt, ms
-- ARGV[8] "" (the client registers, ARGV[3]), or this wait's registration for a one-hop
--         grant, "g|<lease ms>|<wait id>|<owner field>": a release may then hand the lock
--         over by writing this owner's hold itself (lock_unlock_one.lua)
-- ARGV[9] with ARGV[8]: the registration to make when ARGV[8] is not (or no longer)
--         registered; a popped registration is never registered again
-- ARGV[10] (optional) an error code: the lock is non-reentrant (Redisson 4.4
--         RedissonNonReentrantLock): an owner that holds it already gets that error reply,
--         and nothing is written
-- Reply: nil when acquired; -3 when a release granted the lock to ARGV[8] and this attempt
--        claimed it (the hold is there already, counted once); else how long to wait in ms
--        (the holder's TTL, or what is left of another client's reservation; at most
--        ARGV[7]; ARGV[7] when there is no TTL); with ARGV[8], that wait as
--        {ms, 1 when ARGV[9] was registered now, else 0}.
local member = ARGV[3]
local fresh = 0
if ARGV[8] ~= '' then
    member = ARGV[8]
    if redis.call('get', KEYS[4]) == member then
        redis.call('del', KEYS[4])
        if redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
            return -3
        end
    end
end
local free = redis.call('exists', KEYS[1]) == 0
if ARGV[10] and not free and redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
    return redis.error_reply(ARGV[10])
end
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
    if ARGV[5] == '0' or member ~= ARGV[3] then
        redis.call('zrem', KEYS[2], member)
    end
    return nil
end
if ARGV[4] == '1' then
    local now = redis.call('time')
    local ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
    if member ~= ARGV[3] and not redis.call('zscore', KEYS[2], member) then
        member = ARGV[9]
        fresh = 1
    end
    redis.call('zadd', KEYS[2], 'NX', ms + tonumber(ARGV[6]), member)
    redis.call('pexpire', KEYS[2], ARGV[6])
end
local ttl = redis.call('pttl', KEYS[1])
if reserved then
    ttl = redis.call('pttl', KEYS[3])
end
if ttl < 0 then
    ttl = tonumber(ARGV[7])
end
ttl = math.min(ttl, tonumber(ARGV[7]))
if ARGV[8] ~= '' then
    return {ttl, fresh}
end
return ttl
