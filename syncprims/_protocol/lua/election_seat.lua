-- LeaderElection (syncprims): start a leadership once its lock is held, or proclaim a new
-- value in it. The leader's record lives in the lock's own hash, beside the holder's field,
-- so that it is renewed with the hold and goes with it (a release, an expiry, a delete).
-- KEYS[1] the election's lock "syncprims_election:{name}" (a FairLock hash: the holder's
--         field -> 1, and the record: 'term', 'value', 'since')
-- KEYS[2] the term counter "syncprims_election_term:{name}" (an integer, no TTL)
-- KEYS[3] the observers' channel "syncprims_election_channel:{name}"
-- ARGV[1] the holder's owner field
-- ARGV[2] the value others see
-- ARGV[3] publish command ("PUBLISH" or "SPUBLISH")
-- ARGV[4] "1": a new leadership (a new term, max(counter + 1, the server's TIME in
--         microseconds), as fenced_acquire_durable.lua); "0": proclaim (the same term)
-- Reply: the term; nil when ARGV[1] does not hold the lock (or, proclaiming, has no record).
if redis.call('hexists', KEYS[1], ARGV[1]) == 0 then
    return nil
end
local term
if ARGV[4] == '1' then
    local now = redis.call('time')
    local floor = tonumber(now[1]) * 1000000 + tonumber(now[2])
    term = tonumber(redis.call('get', KEYS[2]) or '0') + 1
    if term < floor then
        term = floor
    end
    redis.call('set', KEYS[2], string.format('%d', term))
    redis.call('hset', KEYS[1], 'term', string.format('%d', term),
        'since', string.format('%d', floor), 'value', ARGV[2])
else
    term = redis.call('hget', KEYS[1], 'term')
    if not term then
        return nil
    end
    term = tonumber(term)
    redis.call('hset', KEYS[1], 'value', ARGV[2])
end
redis.call(ARGV[3], KEYS[3], ARGV[4])
return term
