-- Whether holds are still there (ours: the watchdog's check after a server lost data,
-- syncprims._protocol.serverinfo). Reads only.
-- KEYS[i] lock names
-- ARGV[i] the owner field of KEYS[i]'s hold
-- Reply: an array with one integer per key: 1 held, 0 gone.
local result = {}
for i = 1, #KEYS do
    result[i] = redis.call('hexists', KEYS[i], ARGV[i])
end
return result
