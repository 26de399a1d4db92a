-- FairLock unlock, idempotent per request id (Redisson RedissonFairLock#unlockInnerAsync;
-- redisson-spec.md 4.7). Only the waiter at the head of the queue is notified.
-- KEYS[1] lock name
-- KEYS[2] wait queue
-- KEYS[3] waiter deadlines
-- KEYS[4] channel base "redisson_lock__channel:{name}" (a waiter listens on base:<owner>)
-- KEYS[5] unlock latch "redisson_unlock_latch:{name}:<request id>"
-- ARGV[1] unlock message ("0")
-- ARGV[2] lease to re-arm when the hold count stays above 0, milliseconds
-- ARGV[3] owner field
-- ARGV[4] now, epoch milliseconds
-- ARGV[5] publish command
-- ARGV[6] latch TTL, milliseconds
-- The one-hop grant (syncprims; optional, with all of the following):
-- KEYS[6] grant registry "syncprims_lock_waiters:{name}:fair" (fair_acquire.lua)
-- KEYS[7] grant marker "syncprims_lock_granted:{name}"
-- KEYS[8] direct grant list prefix "syncprims_lock_handoff:{name}:"
-- ARGV[7] grant channel prefix "syncprims_lock_grant:{name}:" (+ client id)
-- ARGV[8] "" (an unlock), or the registration of a grant to give back (its waiter had gone):
--         then the owner's hold is released only while the marker still names that grant
-- When the head waiter is registered, it is handed the free lock instead of notified, as
-- lock_unlock_one.lua hands it to an RLock's waiter: its client's liveness is checked (the
-- grant published on the client's grant channel reached a subscriber; or, for a direct
-- "b|" registration, PUBSUB NUMSUB of that channel and the LPUSH on the waiter's list), and
-- then this script makes the head's acquisition as fair_acquire.lua would (out of the queue,
-- the deadlines behind it one slot earlier, its hold with the registered lease) and sets the
-- marker. A head whose client is not heard is notified as before.
-- Reply: nil when the owner does not hold the lock; 0 when a reentrant hold was released;
--        1 when the lock was released; 2 when the lock did not exist (the head waiter is
--        notified anyway; Redisson answers 1 there, syncprims raises: see FairLock).
-- @include fair_purge
-- @include grant_deliver
local val = redis.call('get', KEYS[5])
if val ~= false then
    return tonumber(val)
end
local grants = KEYS[6]
if grants and ARGV[8] ~= '' then
    if redis.call('get', KEYS[7]) ~= ARGV[8] then
        return nil  -- claimed by its waiter meanwhile, or long gone: nothing to give back
    end
    redis.call('del', KEYS[7])
end
purge(KEYS[2], KEYS[3], tonumber(ARGV[4]), grants)
local function grant(head)
    local entry = redis.call('hget', grants, head)
    if not entry then
        return false
    end
    local slot, member, kind, lease, wait, field, client =
        string.match(entry, '^(%d+) (([gb])|(%d+)|([^|.]+)[^|]*|(([^:]+):.+))$')
    if not member or field ~= head then
        return false
    end
    local list = KEYS[8] .. wait .. '|' .. field
    if not deliver(kind, member, ARGV[7] .. client, list, lease, ARGV[5]) then
        return false
    end
    redis.call('lpop', KEYS[2])
    redis.call('zrem', KEYS[3], head)
    local waiters = redis.call('zrange', KEYS[3], 0, -1)
    for i = 1, #waiters do
        redis.call('zincrby', KEYS[3], -tonumber(slot), waiters[i])
    end
    redis.call('hdel', grants, head)
    redis.call('hset', KEYS[1], head, 1)
    redis.call('pexpire', KEYS[1], lease)
    redis.call('set', KEYS[7], member, 'px', lease)
    return true
end
local function notify_head()
    local head = redis.call('lindex', KEYS[2], 0)
    if head ~= false and not (grants and grant(head)) then
        redis.call(ARGV[5], KEYS[4] .. ':' .. head, ARGV[1])
    end
end
if redis.call('exists', KEYS[1]) == 0 then
    notify_head()
    redis.call('set', KEYS[5], 2, 'px', ARGV[6])
    return 2
end
if redis.call('hexists', KEYS[1], ARGV[3]) == 0 then
    return nil
end
local counter = redis.call('hincrby', KEYS[1], ARGV[3], -1)
if counter > 0 then
    redis.call('pexpire', KEYS[1], ARGV[2])
    redis.call('set', KEYS[5], 0, 'px', ARGV[6])
    return 0
end
redis.call('del', KEYS[1])
if grants then
    redis.call('del', KEYS[7])  -- a grant's marker ends with its hold (set again if granted)
end
redis.call('set', KEYS[5], 1, 'px', ARGV[6])
notify_head()
return 1
