"""The server-side half of the Redis sink's exactly-once: a Lua script that appends a piece of a chunk
and moves the consumer's mark in the same atomic step.

Each consumer has a mark in the hash `marks_key(STREAM)` (field: the consumer id, value:
`GENERATION BATCH_ID SPLIT:ROW:RECORD`), the position of the last entry it appended to the stream.
A position is the entry's place in the consumer's delivery: its batch's generation (the number
that starts the batch id, +1 on every batch and every reset of the consumer), then within the
batch its chunk's split index and row start (chunk keys sort in delivery order, base.ChunkKey),
then its record's index in the chunk. The script, for each entry of the piece in order:

* the mark's batch is this batch and the entry's position is at or before the mark: the entry is
  already in the stream (a replayed chunk, or a part of one a broken connection or a crash cut
  off): skipped;
* otherwise appended with a server-made id (`*`), and the mark moved to it.

A batch other than the mark's is appended only if its generation is higher: a lower or equal one
is refused whole (`ICETAIL-BEHIND`), as it is a consumer re-created under the same id, or a replica
that lost its lease writing a batch the consumer has moved past. Redis runs a script whole,
without another client's command in between; a script declared with a shebang is refused
before it starts when the server is out of memory, and an XADD that fails midway still leaves the
mark at the last entry appended, so the entries and the mark never part.
"""

from __future__ import annotations

MARKS_SUFFIX = ":icetail-marks"


def marks_key(stream: str) -> str:
    """The marks' hash, in the stream's hash slot (a cluster runs a script on one slot's keys only):
    `{STREAM}:icetail-marks`, or `STREAM:icetail-marks` when STREAM has a `{tag}` of its own."""
    opening = stream.find("{")
    has_tag = opening >= 0 and stream.find("}", opening + 1) > opening + 1
    return f"{stream}{MARKS_SUFFIX}" if has_tag else f"{{{stream}}}{MARKS_SUFFIX}"


# KEYS: stream, marks. ARGV: consumer, batch id, generation, create (1/0), maxlen ('' none), split, row,
# the piece's first record (its index in the chunk), its entry count, the count of fields C; then per field
# its name, its form ('1': one value per entry, each followed by \n but the last; '0': one value for
# all) and its text; last the envelopes (one per entry, as a field of form '1'). Entry i of the piece
# is record FIRST + i, at position SPLIT:ROW:FIRST+i; its fields: the C fields, consumer, position
# (BATCH:SPLIT:ROW:RECORD) and envelope. Returns {appended, skipped, first id, last id}.
APPEND = """#!lua
local stream, marks = KEYS[1], KEYS[2]
local consumer, batch, generation = ARGV[1], ARGV[2], tonumber(ARGV[3])
local create, maxlen, split, row = ARGV[4], ARGV[5], ARGV[6], ARGV[7]
local first, count, nfields = tonumber(ARGV[8]), tonumber(ARGV[9]), tonumber(ARGV[10])
local kind = redis.call('TYPE', stream)['ok']
if kind == 'none' and create ~= '1' then
  return redis.error_reply('ICETAIL-MISSING the stream does not exist')
end
if kind ~= 'none' and kind ~= 'stream' then
  return redis.error_reply('ICETAIL-WRONGTYPE ' .. kind)
end
local last = first - 1  -- the piece's records up to this one are in the stream already
local mark = redis.call('HGET', marks, consumer)
if mark then
  local mark_generation, mark_batch, mark_position = string.match(mark, '^(%d+) (%S+) (%S+)$')
  if mark_batch == batch then
    local s, r, record = string.match(mark_position, '^(%d+):(%d+):(%d+)$')
    s, r = tonumber(s), tonumber(r)
    local here_s, here_r = tonumber(split), tonumber(row)
    if here_s < s or (here_s == s and here_r < r) then
      last = first + count - 1
    elseif here_s == s and here_r == r then
      last = math.max(last, math.min(tonumber(record), first + count - 1))
    end
  elseif tonumber(mark_generation) >= generation then
    return redis.error_reply('ICETAIL-BEHIND ' .. mark_batch)
  end
end
if last >= first + count - 1 then
  return {0, count, '', ''}
end
local function values(text, each)
  if each ~= '1' then
    return function() return text end
  end
  local at = 1
  return function()
    local stop = string.find(text, '\\n', at, true)
    local value
    if stop then
      value = string.sub(text, at, stop - 1)
      at = stop + 1
    else
      value = string.sub(text, at)
      at = #text + 2
    end
    return value
  end
end
local command = {'XADD', stream}
if maxlen ~= '' then
  command[3], command[4], command[5] = 'MAXLEN', '~', maxlen
end
command[#command + 1] = '*'
local base = #command
local fields = {}
for k = 1, nfields do
  command[base + 2 * k - 1] = ARGV[8 + 3 * k]
  fields[k] = values(ARGV[10 + 3 * k], ARGV[9 + 3 * k])
end
local envelope = values(ARGV[11 + 3 * nfields], '1')
local tail = base + 2 * nfields
command[tail + 1], command[tail + 2] = 'consumer', consumer
command[tail + 3], command[tail + 5] = 'position', 'envelope'
local place = batch .. ':' .. split .. ':' .. row .. ':'
local appended, oldest, newest, moved = 0, '', '', nil
for record = first, first + count - 1 do
  for k = 1, nfields do
    command[base + 2 * k] = fields[k]()
  end
  command[tail + 6] = envelope()
  if record > last then
    command[tail + 4] = place .. record
    local added = redis.pcall(unpack(command))
    if type(added) == 'table' and added['err'] then
      if moved ~= nil then redis.call('HSET', marks, consumer, ARGV[3] .. ' ' .. batch .. ' ' .. moved) end
      return added
    end
    newest = added
    if oldest == '' then oldest = newest end
    appended = appended + 1
    moved = split .. ':' .. row .. ':' .. record
  end
end
if moved ~= nil then
  redis.call('HSET', marks, consumer, ARGV[3] .. ' ' .. batch .. ' ' .. moved)
end
return {appended, count - appended, oldest, newest}
"""
