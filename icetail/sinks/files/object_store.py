"""Parquet files in object storage (`parquet+s3://BUCKET/PREFIX`), exactly once without rename.

Object stores have no rename, but a PUT is atomic: an object is visible whole or not at all.
So each chunk goes to a deterministic key and is committed by a second, small object:

* `PREFIX/<key.name>.parquet` - the chunk's rows. Written by the Spark task that read the chunk
  (or by the driver for snapshots reconciled as a whole). A replayed chunk (same key, same rows)
  is written to the same key again.
* `PREFIX/_committed/<key.name>.json` - the commit record, written by the driver after the data
  object exists, right before the chunk's offset is committed to the checkpoint store.

A data object without a commit record is a leftover of a run that stopped between the two
writes: its chunk is replayed under the same key (overwriting it with the same rows) and then
committed. Readers take only the objects that have a commit record (`committed_objects`).
On open, this consumer's leftovers older than `leftover_min_age_s` are deleted: younger ones may
belong to a run that is still committing, and are replayed anyway.

Credentials come from the standard chains of pyarrow's filesystems (AWS_* variables, the AWS
config files, web identity / IRSA, instance metadata; Google application default credentials;
Azure's account variables); AWS_ENDPOINT_URL_S3 or AWS_ENDPOINT_URL points S3 at a compatible
store. Nothing secret is held by the sink or its stager: each process resolves its own.
"""

from __future__ import annotations

import json
import os
import re
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import pyarrow as pa
import pyarrow.parquet as pq
from pyarrow import fs

from icetail.kernel.errors import (
    ConfigError,
    IcetailError,
    SinkError,
    SinkRejectedError,
    StorageAccessError,
    error_text,
)
from icetail.kernel.names import check_consumer_id, key_inside
from icetail.kernel.storage_errors import StorageErrorKind, storage_error_kind
from icetail.sinks.base import ChunkKey
from icetail.sinks.urls import OBJECT_STORES

SCHEMES = OBJECT_STORES
COMMITTED_DIR = "_committed"
SUFFIX = ".parquet"
RECORD_SUFFIX = ".json"
DEFAULT_LEFTOVER_MIN_AGE_S = 3600.0


def object_filesystem(scheme: str) -> fs.FileSystem:
    """pyarrow's filesystem for `scheme`, with credentials from the environment's standard chain."""
    if scheme == "s3":
        options: dict[str, Any] = {}
        endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
        if endpoint:
            parts = urlsplit(endpoint if "://" in endpoint else f"https://{endpoint}")
            options["endpoint_override"] = parts.netloc + parts.path.rstrip("/")
            options["scheme"] = parts.scheme
        region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
        if region:
            options["region"] = region
        return fs.S3FileSystem(**options)
    if scheme == "gs":
        return fs.GcsFileSystem()
    if scheme == "abfs":
        account = os.environ.get("AZURE_STORAGE_ACCOUNT_NAME")
        if not account:
            raise ConfigError("parquet+abfs:// sinks need AZURE_STORAGE_ACCOUNT_NAME (and a key or identity)")
        key = os.environ.get("AZURE_STORAGE_ACCOUNT_KEY")
        return fs.AzureFileSystem(account_name=account, account_key=key) if key else fs.AzureFileSystem(account)
    raise ConfigError(f"object storage scheme {scheme!r} is not one of {', '.join(SCHEMES)}")


def _raise_for(exc: OSError, action: str, where: str) -> IcetailError:
    kind = storage_error_kind(exc, where)
    if kind is StorageErrorKind.DENIED:
        return StorageAccessError(f"{action} {where}: access denied ({error_text(exc)}); check the credentials")
    return SinkError(f"{action} {where} failed: {error_text(exc)}")


class ObjectParquetSink:
    """Writes each chunk to `<prefix>/<key.name>.parquet` plus a commit record; idempotent per key."""

    exactly_once: bool = True

    def __init__(
        self,
        scheme: str,
        location: str,
        *,
        consumer: str,
        leftover_min_age_s: float = DEFAULT_LEFTOVER_MIN_AGE_S,
    ) -> None:
        self.scheme = scheme
        self.location = location.strip("/")  # BUCKET/PREFIX
        self.consumer = check_consumer_id(consumer)  # part of every object name
        self.url = f"parquet+{scheme}://{self.location}"
        self._closed = False
        bucket = self.location.split("/", 1)[0]
        if not bucket:
            raise ConfigError(f"sink URL {self.url!r} names no bucket")
        self._fs = object_filesystem(scheme)
        try:
            info = self._fs.get_file_info(bucket)
        except OSError as exc:
            raise _raise_for(exc, "parquet sink: checking bucket", f"{scheme}://{bucket}") from exc
        if info.type == fs.FileType.NotFound:
            raise ConfigError(f"parquet sink {self.url!r}: bucket {bucket!r} does not exist; create it first")
        self.leftovers_removed = self._remove_leftovers(leftover_min_age_s)

    # -- the Sink and StagingSink protocols ------------------------------------------------
    def write(self, key: ChunkKey, rows: pa.Table) -> str:
        """Write the chunk's object, then its commit record; return the object's name (the token)."""
        self._check(key)
        ObjectParquetStager(self.scheme, self.location).stage(key, rows)
        return self._commit(key, rows.num_rows)

    def stager(self, schema: pa.Schema | None = None) -> ObjectParquetStager:
        return ObjectParquetStager(self.scheme, self.location)

    def commit_staged(self, key: ChunkKey, staged: str) -> str:
        """Write the commit record of a chunk a Spark task wrote (after checking the object is there)."""
        self._check(key)
        expected = self._object(key)
        if staged != expected:
            raise SinkRejectedError(f"parquet sink: staged object {staged} is not chunk {key.name}")
        try:
            info = self._fs.get_file_info(expected)
        except OSError as exc:
            raise _raise_for(exc, "parquet sink: checking", self._uri(expected)) from exc
        if info.type != fs.FileType.File:  # removed under us: the chunk is replayed and staged again
            raise SinkError(f"parquet sink: staged object {self._uri(expected)} is gone; the chunk is retried")
        return self._commit(key, None)

    def close(self) -> None:
        self._closed = True

    # -- layout ---------------------------------------------------------------------------
    def _object(self, key: ChunkKey) -> str:
        return key_inside(self.location, key.name + SUFFIX)

    def _record(self, key: ChunkKey) -> str:
        return key_inside(f"{self.location}/{COMMITTED_DIR}", key.name + RECORD_SUFFIX)

    def _uri(self, path: str) -> str:
        return f"{self.scheme}://{path}"

    def _check(self, key: ChunkKey) -> None:
        if self._closed:
            raise SinkRejectedError(f"parquet sink {self.url!r} is closed")
        if key.consumer != self.consumer:
            raise ConfigError(f"parquet sink opened for consumer {self.consumer!r} got a chunk of {key.consumer!r}")

    def _commit(self, key: ChunkKey, rows: int | None) -> str:
        record = {"chunk": key.name, "object": key.name + SUFFIX, "consumer": key.consumer, "rows": rows}
        path = self._record(key)
        try:
            with self._fs.open_output_stream(path) as out:
                out.write(json.dumps(record, sort_keys=True).encode())
        except OSError as exc:
            raise _raise_for(exc, "parquet sink: committing", self._uri(path)) from exc
        return key.name + SUFFIX

    def _remove_leftovers(self, min_age_s: float) -> int:
        """Delete this consumer's data objects that have no commit record and are older than `min_age_s`."""
        mine = re.compile(rf"^{re.escape(self.consumer)}-b\d{{6}}-[0-9a-f]{{8}}-.*{re.escape(SUFFIX)}$")
        try:
            objects = {
                os.path.basename(i.path): i
                for i in self._fs.get_file_info(fs.FileSelector(self.location, allow_not_found=True))
                if i.type == fs.FileType.File and mine.match(os.path.basename(i.path))
            }
            if not objects:
                return 0
            committed = {
                os.path.basename(i.path).removesuffix(RECORD_SUFFIX) + SUFFIX
                for i in self._fs.get_file_info(
                    fs.FileSelector(f"{self.location}/{COMMITTED_DIR}", allow_not_found=True)
                )
            }
            now = time.time()
            removed = 0
            for name, info in objects.items():
                age = now - info.mtime.timestamp() if info.mtime is not None else 0.0
                if name not in committed and age >= min_age_s:
                    self._fs.delete_file(info.path)
                    removed += 1
            return removed
        except OSError as exc:
            raise _raise_for(exc, "parquet sink: listing", self._uri(self.location)) from exc


@dataclass(frozen=True)
class ObjectParquetStager:
    """Runs in Spark tasks: writes a chunk's object at its final key (no commit record yet).

    Holds no credentials: each executor resolves them from its own environment (the AWS chain).
    """

    scheme: str
    location: str

    def stage(self, key: ChunkKey, rows: pa.Table) -> str:
        path = key_inside(self.location, key.name + SUFFIX)
        try:
            pq.write_table(rows, path, filesystem=object_filesystem(self.scheme))
        except OSError as exc:
            raise _raise_for(exc, "parquet sink: writing", f"{self.scheme}://{path}") from exc
        except pa.ArrowException as exc:
            raise SinkRejectedError(f"parquet sink: chunk {key.name} cannot be written: {error_text(exc)}") from exc
        return path


def committed_objects(url: str) -> list[str]:
    """The data objects of committed chunks under a `parquet+SCHEME://BUCKET/PREFIX` sink, in delivery order.

    Paths are `BUCKET/PREFIX/<chunk>.parquet`, for `pyarrow.dataset.dataset(paths, filesystem=...)`.
    """
    scheme, sep, rest = url.partition("://")
    if not sep or not scheme.startswith("parquet+"):
        raise ConfigError(f"{url!r} is not a parquet+SCHEME://BUCKET/PREFIX sink URL")
    location = rest.strip("/")
    filesystem = object_filesystem(scheme.removeprefix("parquet+"))
    records = filesystem.get_file_info(fs.FileSelector(f"{location}/{COMMITTED_DIR}", allow_not_found=True))
    names = sorted(
        os.path.basename(i.path).removesuffix(RECORD_SUFFIX)
        for i in records
        if i.type == fs.FileType.File and i.path.endswith(RECORD_SUFFIX)
    )
    return [f"{location}/{name}{SUFFIX}" for name in names]
