-- LeaderElection (syncprims): who leads now, read at once with how long it may last.
-- KEYS[1] the election's lock "syncprims_election:{name}" (see election_seat.lua)
-- Reply: {term, value, since (server microseconds), the lock's PTTL in ms}; the first three
--        nil when nobody leads (the PTTL then -2, or that of a hold whose term is not set yet).
local record = redis.call('hmget', KEYS[1], 'term', 'value', 'since')
return {record[1], record[2], record[3], redis.call('pttl', KEYS[1])}
