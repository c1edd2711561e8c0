"""The checkpoint store's one SQL implementation, and `open_store(url)`.

`SqlCheckpointStore` keeps the contract of state/contract.py (`CheckpointStore`: the four rules
of exactly-once delivery) over a Backend (state/backend.py: sqlite_store, postgres_store
differ only in connecting, starting transactions, locking a row and reading the clock; all of
the store's SQL runs unchanged on both, written with `?` placeholders). Its body is one room
per role, each a class it inherits:

- sql_core.py: lifecycle, migration, one transaction per call, the consumer and batch rows;
- sql_reads.py: load, history, list_consumers;
- sql_consumers.py: creating a consumer, its sink and branch;
- sql_leases.py: taking, renewing and giving up the lease;
- sql_batches.py: begin, commit, finish and abandon a batch, reset the cursor (rules 1 to 3);
- sql_stopped.py: the consumers `serve` stopped, and why;
- fencing.py: the lease checks every write makes (rule 4);
- sql_rows.py: the column lists and the decoders of fetched rows.
"""

from __future__ import annotations

from icetail.kernel.errors import ConfigError
from icetail.kernel.settings import HISTORY_LIMIT
from icetail.state.backend import Backend
from icetail.state.contract import CheckpointStore
from icetail.state.sql_batches import SqlBatchWrites
from icetail.state.sql_consumers import SqlConsumerWrites
from icetail.state.sql_leases import SqlLeaseWrites
from icetail.state.sql_stopped import SqlStoppedRecords
from icetail.state.urls import PostgresLocation, SqliteLocation, parse_store_url

__all__ = ["CheckpointStore", "SqlCheckpointStore", "open_store"]


class SqlCheckpointStore(SqlConsumerWrites, SqlLeaseWrites, SqlBatchWrites, SqlStoppedRecords, CheckpointStore):
    """CheckpointStore over a Backend; one object may be shared by threads (calls serialize)."""


def open_store(url: str, *, history_limit: int = HISTORY_LIMIT, create: bool = True) -> SqlCheckpointStore:
    """Open (creating and migrating as needed) the store a URL names.

    `sqlite:///relative.db`, `sqlite:////absolute.db` or `postgresql://...[?schema=name]`;
    ConfigError for anything else, StateUnavailableError if the database cannot be reached.
    With `create=False` (status, reset) nothing is created: ConfigError unless the database
    exists and already holds icetail's tables; an older icetail schema is still migrated.
    """
    location = parse_store_url(url)
    backend: Backend
    if isinstance(location, SqliteLocation):
        from icetail.state.sqlite_store import SqliteBackend

        backend = SqliteBackend(location, create=create)
    elif isinstance(location, PostgresLocation):
        from icetail.state.postgres_store import PostgresBackend

        backend = PostgresBackend(location, create=create)
    else:  # pragma: no cover - parse_store_url returns only these
        raise ConfigError(f"unsupported checkpoint store URL {url!r}")
    return SqlCheckpointStore(backend, history_limit=history_limit, create=create)
