-- RExpirable clearExpire on every key of an object (Redisson RedissonExpirable#clearExpireAsync).
-- KEYS[*] the object's keys
-- Reply: 1 if any key lost its expiry, else 0.
local result = 0
for i = 1, #KEYS do
    if redis.call('persist', KEYS[i]) == 1 then
        result = 1
    end
end
return result
