-- Included by the permit-expirable semaphore's scripts (ours: server time,
-- get_permit_expirable_semaphore(name, server_time=True)). Defines at(arg): an ARGV time
-- written 'T<ms>' is the server's clock plus <ms> milliseconds, as epoch ms text; any other
-- is returned as sent (Redisson's epoch ms from the client's clock).
local function at(arg)
    if string.byte(arg, 1) ~= 84 then -- not 'T'
        return arg
    end
    local now = redis.call('time')
    return string.format('%d', tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
        + tonumber(string.sub(arg, 2)))
end
