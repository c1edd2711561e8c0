"""Which pyiceberg/pyarrow failures of the Iceberg sink are worth a retry and which reject the chunk."""

from __future__ import annotations

import pyarrow as pa
from pyiceberg.exceptions import (
    CommitFailedException,
    CommitStateUnknownException,
    ServerError,
    ServiceUnavailableError,
    TooManyRequestsError,
    ValidationError,
    WaitingForLockException,
)

# a retry can heal these: the sink raises SinkError
TRANSIENT_ERRORS: tuple[type[BaseException], ...] = (
    OSError,
    CommitFailedException,
    CommitStateUnknownException,
    ServerError,
    ServiceUnavailableError,
    TooManyRequestsError,
    WaitingForLockException,
)
try:  # the SQL catalog's database errors (locked, unreachable)
    from sqlalchemy.exc import OperationalError

    TRANSIENT_ERRORS += (OperationalError,)
except ImportError:  # pragma: no cover - pyiceberg without the sql extra
    pass
# the rows do not fit the table, again on every retry: the sink raises SinkRejectedError
try:
    from pyiceberg.io.pyarrow import UnsupportedPyArrowTypeException

    REJECTED_ERRORS: tuple[type[BaseException], ...] = (
        ValueError,
        TypeError,
        ValidationError,
        pa.ArrowException,
        UnsupportedPyArrowTypeException,
    )
except ImportError:  # pragma: no cover
    REJECTED_ERRORS = (ValueError, TypeError, ValidationError, pa.ArrowException)
