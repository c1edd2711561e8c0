"""One exception root for icetail, split into terminal and transient kinds.

A service loop retries transient errors (a catalog that timed out) and stops on terminal
ones (an expired cursor snapshot): the kind is part of the type, not of the message.
Exceptions keep their constructor arguments so they survive pickling from Spark executors.
"""

from __future__ import annotations

from typing import Any


class IcetailError(Exception):
    """Root of every error icetail raises on purpose."""

    exit_code = 1

    def __init__(self, message: str, *args: Any) -> None:
        super().__init__(message, *args)
        self.message = message

    def __str__(self) -> str:
        return self.message

    def __reduce__(self) -> tuple[Any, ...]:
        return (self.__class__, self.args)


class TerminalError(IcetailError):
    """Retrying cannot help: the input, the configuration or the table must change first."""

    exit_code = 2


class TransientError(IcetailError):
    """May succeed when retried: a timeout, a lock held by another process, a flaky store."""

    exit_code = 1


class ConfigError(TerminalError):
    """A bad argument, URL or configuration value."""


class CatalogNotFoundError(TerminalError):
    """The named pyiceberg catalog is not configured."""


class TableNotFoundError(TerminalError):
    """The table does not exist in the catalog."""


class SnapshotNotFoundError(TerminalError):
    """A snapshot id is not (or no longer) in the table metadata, e.g. expired."""


class NotAncestorError(TerminalError):
    """The from-snapshot is not an ancestor of the to-snapshot (rollback or wrong branch)."""


class DataFileError(TerminalError):
    """A data or delete file is missing or unreadable."""


class MetadataError(TerminalError):
    """Table metadata or a manifest is corrupt or uses an unsupported feature."""


class StateError(TerminalError):
    """The checkpoint store is unusable as it is (newer schema, bad contents)."""


class StateBusyError(TransientError):
    """Another run holds the consumer's lease."""


class SinkError(TransientError):
    """A sink write failed; the chunk was not committed and will be retried."""


class StateUnavailableError(TransientError):
    """The checkpoint store cannot be reached or is locked right now; nothing was changed."""


class StateConflictError(TransientError):
    """A compare-and-swap was refused: the stored state is not what the caller expected.

    Transient because the cure is to reload the checkpoint and carry on from what is stored
    (another run finished the batch, the cursor was reset, a chunk commit was replayed).
    """


class ConsumerNotFoundError(TerminalError):
    """The checkpoint store has no consumer with that id (ensure_consumer was never called)."""


class SinkRejectedError(TerminalError):
    """The sink refuses the rows for good (incompatible schema, closed output, changed chunk)."""


class CatalogUnavailableError(TransientError):
    """The catalog (its database or REST service) cannot be reached right now."""


class StorageAccessError(TerminalError):
    """Object storage refused access to an object (permissions, unknown or bad credentials)."""


class StorageUnavailableError(TransientError):
    """Object storage throttled, timed out or could not be reached; retried with backoff."""
