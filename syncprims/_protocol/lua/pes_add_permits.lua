-- PermitExpirableSemaphore: add (or, negative, remove) available permits (Redisson
-- addPermits; spec 10.4). Same KEYS, ARGV and message as Redisson's script; unlike it, the
-- counter keeps its TTL (KEEPTTL), as Semaphore.add_permits does, and the reply is the new
-- count (Redisson: none).
-- KEYS[1] semaphore name
-- KEYS[2] channel "redisson_sc:{name}"
-- ARGV[1] permits to add (may be negative)
-- ARGV[2] publish command
-- Reply: the new number of available permits (ARGV[1] is published when positive).
local value = redis.call('get', KEYS[1])
local new = tonumber(value or '0') + tonumber(ARGV[1])
if value == false then
    redis.call('set', KEYS[1], new)
else
    redis.call('set', KEYS[1], new, 'keepttl')
end
if tonumber(ARGV[1]) > 0 then
    redis.call(ARGV[2], KEYS[2], ARGV[1])
end
return new
