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


# KEYS: stream, marks. ARGV: consumer, batch id, generation, create (1/0), maxlen ('' none),
# fields per entry, then per entry: position (SPLIT:ROW:RECORD), field, value, field, value, ...
# Returns {appended, skipped, first id, last id}.
APPEND = """#!lua
local stream, marks = KEYS[1], KEYS[2]
local consumer, batch, generation = ARGV[1], ARGV[2], tonumber(ARGV[3])
local create, maxlen, nfields = ARGV[4], ARGV[5], tonumber(ARGV[6])
local kind = redis.call('TYPE', stream)['ok']
if kind == 'none' and create ~= '1' then
  return redis.error_reply('ICETAIL-MISSING the stream does not exist')
end
if kind ~= 'none' and kind ~= 'stream' then
  return redis.error_reply('ICETAIL-WRONGTYPE ' .. kind)
end
local function position(text)
  local split, row, record = string.match(text, '^(%d+):(%d+):(%d+)$')
  return {tonumber(split), tonumber(row), tonumber(record)}
end
local function at_or_before(a, b)
  for i = 1, 3 do
    if a[i] ~= b[i] then return a[i] < b[i] end
  end
  return true
end
local last = nil
local mark = redis.call('HGET', marks, consumer)
if mark then
  local mark_generation, mark_batch, mark_position = string.match(mark, '^(%d+) (%S+) (%S+)$')
  if mark_batch == batch then
    last = position(mark_position)
  elseif tonumber(mark_generation) >= generation then
    return redis.error_reply('ICETAIL-BEHIND ' .. mark_batch)
  end
end
local appended, skipped, first, newest, moved = 0, 0, '', '', nil
local stride = 1 + 2 * nfields
for i = 7, #ARGV, stride do
  local here = position(ARGV[i])
  if last ~= nil and at_or_before(here, last) then
    skipped = skipped + 1
  else
    local command = {'XADD', stream}
    if maxlen ~= '' then
      command[#command + 1] = 'MAXLEN'
      command[#command + 1] = '~'
      command[#command + 1] = maxlen
    end
    command[#command + 1] = '*'
    for k = i + 1, i + 2 * nfields do
      command[#command + 1] = ARGV[k]
    end
    local added = redis.pcall(unpack(command))
    if type(added) == 'table' and added['err'] then
      if moved ~= nil then redis.call('HSET', marks, consumer, ARGV[3] .. ' ' .. batch .. ' ' .. moved) end
      return added
    end
    newest = added
    if first == '' then first = newest end
    appended = appended + 1
    last = here
    moved = ARGV[i]
  end
end
if moved ~= nil then
  redis.call('HSET', marks, consumer, ARGV[3] .. ' ' .. batch .. ' ' .. moved)
end
return {appended, skipped, first, newest}
"""
