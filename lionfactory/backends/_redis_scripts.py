"""The Lua scripts of `RedisExchange`: each exchange operation is one round trip.

Redis runs a script atomically, so a send checks both owners and appends
(to every inbox, for a broadcast) with nothing in between, and a receive
reads the pending and the new entries (and, when consuming, acknowledges and
deletes them) as one step. Stream entries carry two fields: ``id`` (the
message id, which `ack` matches) and ``m`` (the message as JSON).
"""

__all__ = ["ACK", "COUNT", "DEAD_LETTER", "PEEK", "RECEIVE", "SEND", "UNREGISTER"]

# The ``m`` field of a stream entry's flat field list ('' when it has none),
# put in front of each script that reads messages (a script is one chunk:
# Redis has no shared Lua library that survives a restart).
_PAYLOAD_OF = """
local function payload_of(fields)
  local payload = ''
  for i = 1, #fields, 2 do
    if fields[i] == 'm' then payload = fields[i + 1] end
  end
  return payload
end
"""

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

# KEYS: inbox. ARGV: group, consumer, "1" to consume, limit ("0": no limit).
# Returns the owner's pending entries, then new ones, as [stream id, payload]
# pairs ("" for an entry without a message field), at most `limit` of them:
# a capped receive reads (and delivers) only what it takes, so it costs what
# it takes, not what is queued. Entries deleted while pending are dropped.
RECEIVE = (
    _PAYLOAD_OF
    + """
local inbox, group, consumer, consume = KEYS[1], ARGV[1], ARGV[2], ARGV[3]
local limit = tonumber(ARGV[4])
local out, ids = {}, {}
for _, start in ipairs({'0', '>'}) do
  local args = {'XREADGROUP', 'GROUP', group, consumer}
  local room = limit - #out
  if limit > 0 and room <= 0 then break end
  if limit > 0 then
    table.insert(args, 'COUNT')
    table.insert(args, room)
  end
  table.insert(args, 'STREAMS')
  table.insert(args, inbox)
  table.insert(args, start)
  local res = redis.call(unpack(args))
  if res and res[1] then
    for _, entry in ipairs(res[1][2]) do
      local fields = entry[2]
      if fields then
        table.insert(out, {entry[1], payload_of(fields)})
      else
        redis.call('XACK', inbox, group, entry[1])
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
)

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

# KEYS: inbox. ARGV: group, consumer, limit ("0": no limit). Returns [last
# stream id, then stream id and payload of each pending and new entry...]
# without delivering anything; at most `limit` entries.
PEEK = (
    _PAYLOAD_OF
    + """
local inbox, group, consumer = KEYS[1], ARGV[1], ARGV[2]
local limit = tonumber(ARGV[3])
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
local taken = 0
local function add(entry)
  table.insert(out, entry[1])
  table.insert(out, payload_of(entry[2]))
  taken = taken + 1
end
local cap = limit
if cap <= 0 then cap = 1000000000 end
for _, p in ipairs(redis.call('XPENDING', inbox, group, '-', '+', cap, consumer)) do
  local entry = redis.call('XRANGE', inbox, p[1], p[1])
  if entry[1] then add(entry[1]) end
end
if taken < cap then
  local args = {'XRANGE', inbox, '(' .. delivered, '+'}
  if limit > 0 then
    table.insert(args, 'COUNT')
    table.insert(args, cap - taken)
  end
  for _, entry in ipairs(redis.call(unpack(args))) do add(entry) end
end
return out
"""
)

# KEYS: inbox. Returns how many entries it holds (acknowledged ones are
# deleted, so: the pending and the new), or an error for a missing inbox.
COUNT = """
if redis.call('EXISTS', KEYS[1]) == 0 then return redis.error_reply('NOGROUP no such key') end
return redis.call('XLEN', KEYS[1])
"""

# KEYS: owners set, inbox. ARGV: owner. Takes the inbox away in one step:
# returns its entries (pending ones first: delivery follows stream order, so
# the delivered entries are the oldest) as stream id, payload pairs after
# removing the owner and its stream, or -1 if the owner is not registered.
# One script, so no send lands between the read and the delete: a send after
# it finds no owner and is refused.
UNREGISTER = (
    _PAYLOAD_OF
    + """
if not redis.call('ZSCORE', KEYS[1], ARGV[1]) then return -1 end
local out = {}
for _, entry in ipairs(redis.call('XRANGE', KEYS[2], '-', '+')) do
  table.insert(out, entry[1])
  table.insert(out, payload_of(entry[2]))
end
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('DEL', KEYS[2])
return out
"""
)

# KEYS: inbox, dead-letter stream. ARGV: group, then per entry: stream id,
# payload, reason. Moves malformed entries (written by another program) out
# of the inbox so they block nothing, keeping the newest 10,000 for a look.
DEAD_LETTER = """
local inbox, dead, group = KEYS[1], KEYS[2], ARGV[1]
for i = 2, #ARGV, 3 do
  redis.call('XADD', dead, 'MAXLEN', '~', 10000, '*', 'entry', ARGV[i], 'm', ARGV[i + 1],
             'reason', ARGV[i + 2])
  if redis.call('EXISTS', inbox) == 1 then
    redis.call('XACK', inbox, group, ARGV[i])
    redis.call('XDEL', inbox, ARGV[i])
  end
end
return 0
"""
