-- RLock unlock with one wake-up per release (syncprims; Redisson's layout and message).
-- lock_unlock.lua; in addition, when the lock is released and a syncprims client waits
-- (lock_acquire_one.lua registered it), the oldest live one is named on the herald channel
-- (when another one waits too) right before the "0" on Redisson's channel: both messages
-- come from this script, so every subscriber reads them one after the other, and syncprims
-- clients other than the named one let that "0" pass. Redisson's waiters read the "0" as
-- always.
-- KEYS[1] lock name
-- KEYS[2] unlock channel "redisson_lock__channel:{name}"
-- KEYS[3] unlock latch "redisson_unlock_latch:{name}:<request id>"
-- KEYS[4] waiting clients "syncprims_lock_waiters:{name}"
-- KEYS[5] herald channel "syncprims_lock_herald:{name}"
-- KEYS[6] reservation "syncprims_lock_next:{name}": the named client gets the free lock
--         before other syncprims callers for ARGV[6] ms
-- ARGV[1] unlock message ("0")
-- ARGV[2] lease to re-arm when the hold count stays above 0, milliseconds
-- ARGV[3] owner field
-- ARGV[4] publish command ("PUBLISH" or "SPUBLISH")
-- ARGV[5] latch TTL, milliseconds
-- ARGV[6] reservation TTL, milliseconds
-- KEYS[7] grant marker "syncprims_lock_granted:{name}" (see lock_acquire_one.lua)
-- ARGV[7] grant channel prefix "syncprims_lock_grant:{name}:" (+ client id)
-- ARGV[8] "" (an unlock), or the registration of a grant to give back (its waiter had gone):
--         then the owner's hold is released only while the marker still names that grant
-- KEYS[8] direct grant list prefix "syncprims_lock_handoff:{name}:": a waiter's list is this
--         + "<wait id>|<owner field>" (a key in the lock's slot, from the registration)
-- One-hop grant: a waiting registration "g|<lease>|<wait id>|<owner field>" is handed the
-- lock directly: the grant (the registration) is published on its client's grant channel,
-- and only when that reaches a subscriber (the client's subscriber connection is alive) is
-- the owner's hold written, with its lease, and the marker set; no "0" then (the lock is
-- not free). A direct registration "b|<lease>|<wait id>.<n>|<owner field>" (a blocked
-- thread of the blocking face, popping its own list) is handed the lock the same way, but
-- its client's liveness is read with PUBSUB NUMSUB (SHARDNUMSUB) of its grant channel and the
-- grant is pushed on the waiter's list (LPUSH, first before any wake-up token), not published.
-- Otherwise the next registration is tried (3 at most); a client's registration
-- (not an owner's) gets the reservation and the herald as before; then the "0" follows.
-- Reply: nil when the owner does not hold the lock, 0 when a reentrant hold was released
--        (still held), 1 when the lock was released (key deleted, message published).
--        A retry of the same request returns the first execution's reply.
-- @include grant_deliver
local val = redis.call('get', KEYS[3])
if val ~= false then
    return tonumber(val)
end
if ARGV[8] ~= '' then
    if redis.call('get', KEYS[7]) ~= ARGV[8] then
        return nil  -- claimed by its waiter meanwhile, or long gone: nothing to give back
    end
    redis.call('del', KEYS[7])
end
if (redis.call('hexists', KEYS[1], ARGV[3]) == 0) then
    return nil
end
local counter = redis.call('hincrby', KEYS[1], ARGV[3], -1)
if (counter > 0) then
    redis.call('pexpire', KEYS[1], ARGV[2])
    redis.call('set', KEYS[3], 0, 'px', ARGV[5])
    return 0
end
redis.call('del', KEYS[1])
redis.call('del', KEYS[7])  -- a grant's marker ends with its hold (set again below if granted)
if redis.call('exists', KEYS[4]) == 1 then
    local now = redis.call('time')
    local ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
    redis.call('zremrangebyscore', KEYS[4], '-inf', ms)
    for _ = 1, 3 do
        local head = redis.call('zrange', KEYS[4], 0, 0)[1]
        if not head then
            break
        end
        redis.call('zrem', KEYS[4], head)
        local kind, lease, wait, field, client =
            string.match(head, '^([gb])|(%d+)|([^|.]+)[^|]*|(([^:]+):.+)$')
        if not lease then
            -- a client's registration: reserve the lock for it, name it on the herald
            redis.call('set', KEYS[6], head, 'px', ARGV[6])
            if redis.call('exists', KEYS[4]) == 1 then
                -- others wait too: name the one the "0" is for (with none, the "0" alone
                -- wakes the named client, and the reservation turns away anyone else)
                redis.call(ARGV[4], KEYS[5], head)
            end
            break
        end
        local list = KEYS[8] .. wait .. '|' .. field
        if deliver(kind, head, ARGV[7] .. client, list, lease, ARGV[4]) then
            redis.call('hset', KEYS[1], field, 1)
            redis.call('pexpire', KEYS[1], lease)
            redis.call('set', KEYS[7], head, 'px', lease)
            redis.call('set', KEYS[3], 1, 'px', ARGV[5])
            return 1
        end
    end
end
redis.call(ARGV[4], KEYS[2], ARGV[1])
redis.call('set', KEYS[3], 1, 'px', ARGV[5])
return 1
