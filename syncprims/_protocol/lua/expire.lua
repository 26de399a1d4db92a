-- RExpirable expire on every key of an object (Redisson RedissonExpirable#expireAsync).
-- KEYS[*] the object's keys
-- ARGV[1] "pexpire" or "pexpireat"
-- ARGV[2] milliseconds (a TTL for pexpire, an epoch time for pexpireat)
-- Reply: 1 if any key got the expiry, else 0.
local result = 0
for i = 1, #KEYS do
    if redis.call(ARGV[1], KEYS[i], ARGV[2]) == 1 then
        result = 1
    end
end
return result
