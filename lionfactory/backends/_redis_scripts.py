"""The Lua scripts of `RedisExchange`: each exchange operation is one round trip.

Redis runs a script atomically, so a send checks both owners and appends
(to every inbox, for a broadcast) with nothing in between, and a receive
reads the pending and the new entries (and, when consuming, acknowledges and
deletes them) as one step. Stream entries carry two fields: ``id`` (the
message id, which `ack` matches) and ``m`` (the message as JSON).
"""

__all__ = ["ACK", "PEEK", "RECEIVE", "SEND"]

# KEYS: owners set. ARGV: inbox prefix, sender, recipient ("" = broadcast),
# message id, message JSON. Returns 0, or 1/2 for an unknown sender/recipient.
SEND = """
local owners, prefix, sender, recipient = KEYS[1], ARGV[1], ARGV[2], ARGV[3]
if not redis.call('ZSCORE', owners, sender) then return 1 end
local targets
if recipient ~= '' then
  if not redis.call('ZSCORE', owners, recipient) then return 2 end
  targets = {recipient}
else
  targets = redis.call('ZRANGE', owners, 0, -1)
end
for _, target in ipairs(targets) do
  if target ~= sender then
    redis.call('XADD', prefix .. target, '*', 'id', ARGV[4], 'm', ARGV[5])
  end
end
return 0
"""

# KEYS: inbox. ARGV: group, consumer, "1" to consume. Returns the owner's
# pending entries, then the new ones, as [stream id, message JSON] pairs.
RECEIVE = """
local inbox, group, consumer, consume = KEYS[1], ARGV[1], ARGV[2], ARGV[3]
local out, ids = {}, {}
for _, start in ipairs({'0', '>'}) do
  local res = redis.call('XREADGROUP', 'GROUP', group, consumer, 'STREAMS', inbox, start)
  if res and res[1] then
    for _, entry in ipairs(res[1][2]) do
      local fields = entry[2]
      if fields then
        for i = 1, #fields, 2 do
          if fields[i] == 'm' then table.insert(out, {entry[1], fields[i + 1]}) end
        end
      end
      table.insert(ids, entry[1])
    end
  end
end
if consume == '1' then
  for i = 1, #ids, 500 do
    local chunk = {unpack(ids, i, math.min(i + 499, #ids))}
    redis.call('XACK', inbox, group, unpack(chunk))
    redis.call('XDEL', inbox, unpack(chunk))
  end
end
return out
"""

# KEYS: inbox. ARGV: group, consumer, then the message ids to acknowledge.
ACK = """
local inbox, group, consumer = KEYS[1], ARGV[1], ARGV[2]
local wanted = {}
for i = 3, #ARGV do wanted[ARGV[i]] = true end
local res = redis.call('XREADGROUP', 'GROUP', group, consumer, 'STREAMS', inbox, '0')
local n = 0
if res and res[1] then
  for _, entry in ipairs(res[1][2]) do
    local fields = entry[2]
    local drop = not fields
    if fields then
      for i = 1, #fields, 2 do
        if fields[i] == 'id' and wanted[fields[i + 1]] then drop = true end
      end
    end
    if drop then
      redis.call('XACK', inbox, group, entry[1])
      redis.call('XDEL', inbox, entry[1])
      n = n + 1
    end
  end
end
return n
"""

# KEYS: inbox. ARGV: group, consumer. Returns [last stream id, pending and new
# message JSONs...] without delivering anything.
PEEK = """
local inbox, group, consumer = KEYS[1], ARGV[1], ARGV[2]
local last = '0-0'
local top = redis.call('XREVRANGE', inbox, '+', '-', 'COUNT', 1)
if top[1] then last = top[1][1] end
local delivered = '0-0'
for _, info in ipairs(redis.call('XINFO', 'GROUPS', inbox)) do
  local name, seen
  for i = 1, #info, 2 do
    if info[i] == 'name' then name = info[i + 1] end
    if info[i] == 'last-delivered-id' then seen = info[i + 1] end
  end
  if name == group then delivered = seen end
end
local out = {last}
local pending = redis.call('XPENDING', inbox, group, '-', '+', 1000000, consumer)
for _, p in ipairs(pending) do
  local entry = redis.call('XRANGE', inbox, p[1], p[1])
  if entry[1] then
    local fields = entry[1][2]
    for i = 1, #fields, 2 do
      if fields[i] == 'm' then table.insert(out, fields[i + 1]) end
    end
  end
end
for _, entry in ipairs(redis.call('XRANGE', inbox, '(' .. delivered, '+')) do
  local fields = entry[2]
  for i = 1, #fields, 2 do
    if fields[i] == 'm' then table.insert(out, fields[i + 1]) end
  end
end
return out
"""
