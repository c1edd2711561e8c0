"""One exception root for icetail, split into terminal and transient kinds.

A service loop retries transient errors (a catalog that timed out) and stops on terminal
ones (an expired cursor snapshot): the kind is part of the type, not of the message.
Exceptions keep their constructor arguments so they survive pickling from Spark executors.
"""

from __future__ import annotations

import errno
import re
from typing import Any

from icetail.kernel.secrets import redact_text

DISK_FULL_HINT = "(a disk is full: free space there; run again to resume a batch in flight, serve retries on its own)"
_DISK_FULL = re.compile(
    r"No space left on device|\[errno 28\]|Disk quota exceeded|database or disk is full|SQLITE_FULL", re.IGNORECASE
)


def error_text(exc: BaseException) -> str:
    """`Type: first line of the message` (the type alone when there is none), for one-line error messages.

    A full disk (ENOSPC, SQLite's SQLITE_FULL) gets the fix appended: the bare OS text names neither
    the cause a person acts on nor that a rerun after freeing space is all it takes (chaos harness,
    issue 26: a full filesystem under the sink or the checkpoint store).
    """
    lines = str(exc).strip().splitlines()
    text = f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__
    return f"{text} {DISK_FULL_HINT}" if is_disk_full(exc) else text


def is_disk_full(exc: BaseException) -> bool:
    """ENOSPC or EDQUOT, or its text as pyarrow, Spark tasks and SQLite pass it on (no errno attached)."""
    full = isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT)
    return full or bool(_DISK_FULL.search(str(exc)))


def message_line(exc: BaseException) -> str:
    """The first line of the message alone (the type's name when there is none)."""
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__


class IcetailError(Exception):
    """Root of every error icetail raises on purpose.

    `exit_code` is the CLI's exit status for it; `stage` is where a failed service cycle broke
    (catalog, plan, read, sink or state: the `stage` label of `icetail_failures_total`), so both
    follow from the class, and a new error class says its own. The message is redacted
    (`redact_text`) when the error is made, so no output path can show a password it carries.
    """

    exit_code = 1
    stage = "read"

    def __init_subclass__(cls, *, stage: str | None = None, **kwargs: Any) -> None:
        """`class SinkError(TransientError, stage="sink")`: a subclass names its stage where it is declared."""
        super().__init_subclass__(**kwargs)
        if stage is not None:
            cls.stage = stage

    def __init__(self, message: str, *args: Any) -> None:
        # passwords that reached the message (a URL, a driver's error text) never leave in it
        message = redact_text(message)
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


class ConfigError(TerminalError, stage="plan"):
    """A bad argument, URL or configuration value."""


class CatalogNotFoundError(TerminalError, stage="catalog"):
    """The named pyiceberg catalog is not configured."""


class TableNotFoundError(TerminalError, stage="catalog"):
    """The table does not exist in the catalog."""


class SnapshotNotFoundError(TerminalError, stage="plan"):
    """A snapshot id is not (or no longer) in the table metadata, e.g. expired."""


class NotAncestorError(TerminalError, stage="plan"):
    """The from-snapshot is not an ancestor of the to-snapshot (rollback or wrong branch)."""


class DataFileError(TerminalError):
    """A data or delete file is missing or unreadable."""


class MetadataError(TerminalError, stage="plan"):
    """Table metadata or a manifest is corrupt or uses an unsupported feature."""


class StateError(TerminalError, stage="state"):
    """The checkpoint store is unusable as it is (newer schema, bad contents)."""


class StateBusyError(TransientError, stage="state"):
    """Another run holds the consumer's lease."""


class LeaseExpiredError(TransientError, stage="state"):
    """A write under a lease that expired on the store's clock: refused; the next cycle renews the lease.

    Not a StateBusyError: nobody else holds the consumer (serve must not take it for a hand-over)."""


class LocalDiskFullError(TransientError):
    """The local disk under icetail's handoff files or Spark's local directory is full.

    Transient: nothing was committed past what was delivered, and the same batch resumes where
    it stopped once space returns (a service keeps retrying it rather than giving up).
    """


class SparkSessionLostError(TransientError):
    """The Spark JVM under the run exited (killed by the out-of-memory killer, say): the session is
    gone; a new process resumes the batch, nothing past the delivered chunks being committed."""


class SinkError(TransientError, stage="sink"):
    """A sink write failed; the chunk was not committed and will be retried."""


class StateUnavailableError(TransientError, stage="state"):
    """The checkpoint store cannot be reached or is locked right now; nothing was changed."""


class StateConflictError(TransientError, stage="state"):
    """A compare-and-swap was refused: the stored state is not what the caller expected.

    Transient because the cure is to reload the checkpoint and carry on from what is stored
    (another run finished the batch, the cursor was reset, a chunk commit was replayed).
    """


class ConsumerNotFoundError(TerminalError, stage="state"):
    """The checkpoint store has no consumer with that id (ensure_consumer was never called)."""


class SinkRejectedError(TerminalError, stage="sink"):
    """The sink refuses the rows for good (incompatible schema, closed output, changed chunk)."""


class CatalogUnavailableError(TransientError, stage="catalog"):
    """The catalog (its database or REST service) cannot be reached right now."""


class StorageAccessError(TerminalError):
    """Object storage refused access to an object (permissions, unknown or bad credentials)."""


class StorageUnavailableError(TransientError):
    """Object storage throttled, timed out or could not be reached; retried with backoff."""


class RefNotFoundError(TerminalError, stage="plan"):
    """A branch or tag name the table does not have (or a tag where a branch is needed, or back)."""


class BranchDroppedError(TerminalError, stage="plan"):
    """The branch a consumer follows no longer exists in the table (dropped, or published and removed)."""


class SetupError(TerminalError):
    """The setup names something that is not there or not allowed: a database, role or schema that does
    not exist, a failed authentication, a missing privilege. Retrying cannot help, so `serve` stops the
    consumer at once, as for a ConfigError, instead of retrying it cycle after cycle."""


class SinkSetupError(SetupError, stage="sink"):
    """A SetupError of the sink's database."""


class StateSetupError(SetupError, stage="state"):
    """A SetupError of the checkpoint store's database."""
