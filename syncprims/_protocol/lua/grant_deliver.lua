-- Included by the scripts that hand a released lock to a registered waiter (the one-hop
-- grant: lock_unlock_one.lua, fair_unlock.lua). Defines
-- deliver(kind, member, channel, list, lease, publish): true when the grant ``member``
-- reached the waiter's client, which is then alive:
-- * kind "g" (a message): PUBLISH (``publish``: PUBLISH or SPUBLISH) of the member on the
--   client's grant channel ``channel`` reached a subscriber;
-- * kind "b" (direct, the blocking face): ``channel`` has a subscriber (PUBSUB NUMSUB, or
--   SHARDNUMSUB in a cluster: a push, unlike a publish, does not say whether anyone reads
--   it), and the member was LPUSHed on the waiter's ``list`` (its lifetime: ``lease`` ms).
-- Every call is a pcall: an ACL without the grant channels or lists costs the waiter its
-- turn (false), never an error after the lock was deleted, nor a hold nobody takes.
local function deliver(kind, member, channel, list, lease, publish)
    if kind == 'g' then
        local heard = redis.pcall(publish, channel, member)
        return type(heard) == 'number' and heard > 0
    end
    local subscribers
    if publish == 'SPUBLISH' then
        subscribers = redis.pcall('pubsub', 'shardnumsub', channel)
    else
        subscribers = redis.pcall('pubsub', 'numsub', channel)
    end
    if type(subscribers) ~= 'table' or (tonumber(subscribers[2]) or 0) == 0 then
        return false
    end
    if type(redis.pcall('lpush', list, member)) ~= 'number' then
        return false
    end
    redis.call('pexpire', list, lease)
    return true
end
