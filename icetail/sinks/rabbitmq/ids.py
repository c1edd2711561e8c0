"""Producer names and publishing ids: what makes a replayed chunk land on the stream once.

RabbitMQ de-duplicates per producer name: it keeps the highest publishing id stored under a name
and drops (while confirming) any message of that name whose id is not higher. So the ids under
one name must rise strictly in the order the pipeline delivers, and be the same on a replay.

Within one split of one batch they do: its chunks come in the order of their `row_start_inclusive`
(a row offset, or for a snapshot reconciled in partitions the output's index; either rises from
chunk to chunk), and a chunk's records in order. Across splits and batches no fixed 64-bit
packing fits every batch (a batch may hold a million splits, a file billions of rows, a consumer
run for years), so each (batch, split) gets a name of its own:
`icetail:<consumer>:<batch id>:<split index>`. A batch id is unique to one batch of one consumer
(it holds a random part, and stays the same when the batch is resumed), so a reset cursor or a
consumer dropped and made again never writes under a name whose stored id would swallow its
messages.

The id of a chunk's record `i` is `(row_start_inclusive << 28 | i) + 1`: 35 bits for the chunk's
start (34 billion), 28 for the records of one chunk (268 million), 0 never used.
"""

from __future__ import annotations

import hashlib

from icetail.kernel.errors import SinkRejectedError
from icetail.sinks.base import ChunkKey

RECORD_BITS = 28
START_BITS = 35
MAX_RECORDS = 1 << RECORD_BITS
MAX_ROW_START = (1 << START_BITS) - 1
MAX_NAME_BYTES = 255  # the stream protocol's limit on a producer reference


def producer_name(key: ChunkKey) -> str:
    """The producer reference the chunk `key` is published under (module docstring)."""
    name = f"icetail:{key.consumer}:{key.batch_id}:{key.split_index}"
    if len(name.encode()) <= MAX_NAME_BYTES:
        return name
    digest = hashlib.sha256(f"{key.consumer}:{key.batch_id}".encode()).hexdigest()[:40]
    return f"icetail:{digest}:{key.split_index}"  # a batch id grown past the limit: still one name per split


def first_publishing_id(key: ChunkKey, records: int) -> int:
    """The id of the chunk's first record; record `i` has this plus `i`. SinkRejectedError when out of range."""
    if key.row_start_inclusive > MAX_ROW_START:
        raise SinkRejectedError(
            f"RabbitMQ stream sink: chunk {key.name} starts at row {key.row_start_inclusive}, past the "
            f"{MAX_ROW_START} a publishing id can carry; deliver this table with a smaller --chunk-rows"
        )
    if records > MAX_RECORDS:
        raise SinkRejectedError(
            f"RabbitMQ stream sink: chunk {key.name} holds {records} changes, more than the {MAX_RECORDS} "
            "one chunk may publish; rerun with --chunk-rows below that"
        )
    return (key.row_start_inclusive << RECORD_BITS) + 1


def last_publishing_id(key: ChunkKey, records: int) -> int:
    return first_publishing_id(key, records) + records - 1
