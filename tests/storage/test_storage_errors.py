"""Storage failures, classified: missing and refused objects are terminal with one line naming the
object; throttling, timeouts and unreachable storage are transient.

Real failures from moto_server on loopback where it can produce them: a data file deleted behind
Iceberg's back, a bucket that does not exist, storage that refuses the connection (a closed
port), and access denied (a second moto_server with credential checks on, which refuses keys
it does not know). Throttling and server errors cannot be provoked from moto: the mapping is
checked on exceptions of the types and with the texts pyarrow and the cloud SDKs raise.
"""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.io import load_file_io
from pyiceberg.table import Table

from icetail.kernel.errors import (
    DataFileError,
    MetadataError,
    StorageAccessError,
    StorageUnavailableError,
    TerminalError,
    TransientError,
)
from icetail.kernel.storage_errors import StorageErrorKind, storage_error, storage_error_kind
from icetail.monitor.cli.main import main as cli_main
from icetail.monitor.engine.api import read_changes
from icetail.monitor.engine.catalog import load_table
from tests.support.s3 import SECRET_ACCESS_KEY, MotoServer, S3Catalog, moto_server

IDENT = "ns.t"


def _table(cat: S3Catalog) -> Table:
    catalog = cat.catalog()
    catalog.create_namespace("ns")
    table = catalog.create_table(IDENT, schema=pa.schema([("id", pa.int64())]))
    table.append(pa.table({"id": [1, 2, 3]}))
    table.append(pa.table({"id": [4]}))
    return catalog.load_table(IDENT)


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _elsewhere(cat: S3Catalog, endpoint: str) -> SqlCatalog:
    """The same catalog entries, with the warehouse read through another endpoint."""
    return SqlCatalog(cat.name, **{**cat.properties(), "s3.endpoint": endpoint})


def test_deleted_data_file_is_terminal_and_named(s3_catalog: S3Catalog, moto: MotoServer, spark: Any) -> None:
    table = _table(s3_catalog)
    path = next(iter(table.scan().plan_files())).file.file_path
    moto.fs().delete_file(path.removeprefix("s3://"))
    with pytest.raises(DataFileError) as caught:
        read_changes(table, spark=spark)
    message = str(caught.value)
    assert path in message and "\n" not in message and SECRET_ACCESS_KEY not in message


def test_missing_bucket_is_terminal_and_named(s3_catalog: S3Catalog, moto: MotoServer) -> None:
    table = _table(s3_catalog)
    moto.fs(allow_bucket_deletion=True).delete_dir(s3_catalog.bucket)  # its objects and the bucket
    with pytest.raises(MetadataError) as caught:
        load_table(s3_catalog.catalog(), IDENT)
    assert s3_catalog.bucket in str(caught.value) and "\n" not in str(caught.value)
    assert table.metadata_location  # the table existed before its bucket went


def test_unreachable_storage_is_transient(s3_catalog: S3Catalog, spark: Any) -> None:
    table = _table(s3_catalog)
    endpoint = f"http://127.0.0.1:{_closed_port()}"
    with pytest.raises(StorageUnavailableError) as at_load:
        load_table(_elsewhere(s3_catalog, endpoint), IDENT)
    assert isinstance(at_load.value, TransientError) and IDENT in str(at_load.value)
    # the table loaded, then storage went away: planning reads the manifest list and fails transiently
    io = load_file_io({**table.io.properties, "s3.endpoint": endpoint})
    cut_off = Table(table._identifier, table.metadata, table.metadata_location, io, table.catalog)
    with pytest.raises(StorageUnavailableError) as at_plan:
        read_changes(cut_off, spark=spark)
    snapshot = table.metadata.snapshots[0]
    assert snapshot.manifest_list in str(at_plan.value) and "\n" not in str(at_plan.value)
    assert SECRET_ACCESS_KEY not in str(at_plan.value)


def test_access_denied_is_terminal_and_named(s3_catalog: S3Catalog, tmp_path: Path, capsys: Any) -> None:
    _table(s3_catalog)
    with moto_server(tmp_path, {"INITIAL_NO_AUTH_ACTION_COUNT": "0"}) as checking:
        with pytest.raises(StorageAccessError) as caught:
            load_table(_elsewhere(s3_catalog, checking.endpoint), IDENT)
    message = str(caught.value)
    assert isinstance(caught.value, TerminalError)
    assert "access denied" in message and "metadata.json" in message and s3_catalog.bucket in message
    assert "\n" not in message and SECRET_ACCESS_KEY not in message


def test_cli_exit_codes_follow_the_kind(s3_catalog: S3Catalog, monkeypatch: pytest.MonkeyPatch, capsys: Any) -> None:
    _table(s3_catalog)
    monkeypatch.setenv("PYICEBERG_CATALOG__S3CAT__S3__ENDPOINT", f"http://127.0.0.1:{_closed_port()}")
    assert cli_main(["plan", "--catalog", "s3cat", "--table", IDENT]) == 1  # transient: retry later
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "storage unavailable" in err[0], err


# pyarrow (AWS SDK for C++, google-cloud-cpp, Azure SDK) and fsspec texts, as they are raised
@pytest.mark.parametrize(
    ("exc", "kind"),
    [
        (FileNotFoundError(2, "Path does not exist 'b/k.parquet'"), StorageErrorKind.MISSING),
        (
            OSError("AWS Error NO_SUCH_BUCKET during GetObject operation: The specified bucket does not exist"),
            StorageErrorKind.MISSING,
        ),
        (OSError("google::cloud::Status(NOT_FOUND: No such object: b/k.parquet)"), StorageErrorKind.MISSING),
        (OSError("AWS Error ACCESS_DENIED during HeadObject operation: No response body."), StorageErrorKind.DENIED),
        (OSError("AWS Error UNKNOWN (HTTP status 403) during HeadObject operation"), StorageErrorKind.DENIED),
        (OSError("AWS Error INVALID_ACCESS_KEY_ID during GetObject operation"), StorageErrorKind.DENIED),
        (
            OSError("google::cloud::Status(PERMISSION_DENIED: caller does not have storage.objects.get)"),
            StorageErrorKind.DENIED,
        ),
        (
            OSError("GetProperties failed: 403 This request is not authorized: AuthorizationPermissionMismatch"),
            StorageErrorKind.DENIED,
        ),
        (PermissionError("Forbidden"), StorageErrorKind.DENIED),
        (
            OSError("AWS Error SLOW_DOWN during GetObject operation: Please reduce your request rate."),
            StorageErrorKind.TRANSIENT,
        ),
        (
            OSError("AWS Error UNKNOWN (HTTP status 503) during GetObject operation: Service Unavailable"),
            StorageErrorKind.TRANSIENT,
        ),
        (
            OSError("AWS Error NETWORK_CONNECTION during GetObject operation: curlCode: 28, Timeout was reached"),
            StorageErrorKind.TRANSIENT,
        ),
        (OSError("google::cloud::Status(UNAVAILABLE: Retry policy exhausted)"), StorageErrorKind.TRANSIENT),
        (OSError("google::cloud::Status(DEADLINE_EXCEEDED: ...)"), StorageErrorKind.TRANSIENT),
        (OSError("503 The server is busy. ErrorCode: ServerBusy"), StorageErrorKind.TRANSIENT),
        (TimeoutError("read timed out"), StorageErrorKind.TRANSIENT),
        (ConnectionResetError(104, "Connection reset by peer"), StorageErrorKind.TRANSIENT),
        (OSError("Parquet magic bytes not found in footer"), StorageErrorKind.OTHER),
    ],
)
def test_kind_of_storage_errors(exc: BaseException, kind: StorageErrorKind) -> None:
    assert storage_error_kind(exc) is kind


def test_the_object_name_does_not_decide_the_kind() -> None:
    path = "s3://b/timeout/AccessDenied-503.parquet"
    exc = FileNotFoundError(2, f"Path does not exist '{path.removeprefix('s3://')}'")
    assert storage_error_kind(exc, path) is StorageErrorKind.MISSING
    error = storage_error(exc, "data file", path, hint="restore it")
    assert isinstance(error, DataFileError) and str(error) == f"data file {path} is missing; restore it"
