"""Errors from object storage (S3, GCS, ADLS, local disk) classified as terminal or transient.

pyarrow's filesystems raise `OSError` for nearly everything, with the cloud SDK's error name in
the message (`AWS Error ACCESS_DENIED`, `AWS Error SLOW_DOWN`, `google::cloud::Status(UNAVAILABLE`,
`ServerBusy`); fsspec's raise `PermissionError`, `FileNotFoundError` or botocore errors whose
text carries the code. The kind decides what a service does: a missing object or a refused one
needs a person (terminal, one line naming the object); throttling, timeouts and refused
connections pass (transient, retried with backoff by `serve`).
"""

from __future__ import annotations

import re
from enum import Enum

from icetail.kernel.errors import (
    DataFileError,
    IcetailError,
    StorageAccessError,
    StorageUnavailableError,
    TerminalError,
    error_text,
)


class StorageErrorKind(Enum):
    MISSING = "missing"  # no such object or bucket: terminal
    DENIED = "denied"  # permissions or credentials: terminal
    TRANSIENT = "transient"  # throttled, timed out, unreachable: retried
    OTHER = "other"  # anything else (a corrupt file): terminal


_DENIED = re.compile(
    r"ACCESS_DENIED|AccessDenied|Access Denied|PERMISSION_DENIED|AuthorizationPermissionMismatch|"
    r"AuthorizationFailure|AuthenticationFailed|INVALID_ACCESS_KEY_ID|InvalidAccessKeyId|"
    r"SIGNATURE_DOES_NOT_MATCH|SignatureDoesNotMatch|UNAUTHENTICATED|Forbidden|HTTP status 40[13]\b",
    re.IGNORECASE,
)
_TRANSIENT = re.compile(
    r"SLOW_DOWN|SlowDown|THROTTL|TooManyRequests|Too Many Requests|RESOURCE_EXHAUSTED|SERVICE_UNAVAILABLE|"
    r"ServiceUnavailable|ServerBusy|INTERNAL_FAILURE|InternalError|REQUEST_TIMEOUT|RequestTimeout|"
    r"OperationTimedOut|DEADLINE_EXCEEDED|\bUNAVAILABLE\b|NETWORK_CONNECTION|curlCode|Curl error|"
    r"timed out|timeout|Connection refused|Connection reset|Could not connect|EXPIRED_TOKEN|ExpiredToken|"
    r"HTTP status (429|500|502|503|504)\b",
    re.IGNORECASE,
)
_MISSING = re.compile(
    r"NO_SUCH_KEY|NoSuchKey|NO_SUCH_BUCKET|NoSuchBucket|BlobNotFound|ContainerNotFound|PathNotFound|"
    r"\bNOT_FOUND\b|Path does not exist|HTTP status 404\b",
    re.IGNORECASE,
)


def storage_error_kind(exc: BaseException, path: str = "") -> StorageErrorKind:
    """What kind of failure `exc` is; `path` is cut out of the text first (a key may contain anything).

    An expired token counts as transient: vended credentials are fetched anew when the table is
    loaded again, which a retry does.
    """
    text = f"{type(exc).__name__}: {exc}"
    for name in {path, path.split("://", 1)[-1]} - {""}:
        text = text.replace(name, "<object>")
    if isinstance(exc, PermissionError) or _DENIED.search(text):
        return StorageErrorKind.DENIED
    if isinstance(exc, TimeoutError | ConnectionError) or _TRANSIENT.search(text):
        return StorageErrorKind.TRANSIENT
    if isinstance(exc, FileNotFoundError) or _MISSING.search(text):
        return StorageErrorKind.MISSING
    return StorageErrorKind.OTHER


def storage_error(
    exc: BaseException, what: str, path: str, *, missing: type[TerminalError] = DataFileError, hint: str = ""
) -> IcetailError:
    """One line naming `what` (`data file`, `manifest`, ...) and `path`, of the right kind.

    `hint` replaces the default advice for a missing object.
    """
    detail = error_text(exc)
    kind = storage_error_kind(exc, path)
    if kind is StorageErrorKind.DENIED:
        return StorageAccessError(
            f"{what} {path}: access denied ({detail}); check the credentials and their permissions on it"
        )
    if kind is StorageErrorKind.TRANSIENT:
        return StorageUnavailableError(f"{what} {path}: storage unavailable ({detail}); will be retried")
    if kind is StorageErrorKind.MISSING:
        return missing(f"{what} {path} is missing{'; ' + hint if hint else f' ({detail})'}")
    return missing(f"{what} {path} cannot be read ({detail})")
