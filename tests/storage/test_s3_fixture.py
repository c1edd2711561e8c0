"""The S3 fixture itself: a real server on loopback, and a catalog whose files all live in it."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
from pyarrow import fs

from tests.support.s3 import MotoServer, S3Catalog


def test_moto_server_is_a_real_process_on_loopback(moto: MotoServer) -> None:
    assert moto.process.poll() is None
    assert moto.endpoint.startswith("http://127.0.0.1:")


def test_catalog_writes_metadata_and_data_to_the_bucket_only(s3_catalog: S3Catalog, moto: MotoServer) -> None:
    catalog = s3_catalog.catalog()
    catalog.create_namespace("ns")
    table = catalog.create_table("ns.t", schema=pa.schema([("id", pa.int64())]))
    table.append(pa.table({"id": [1, 2, 3]}))

    keys = [info.path for info in moto.fs().get_file_info(fs.FileSelector(s3_catalog.bucket, recursive=True))]
    assert any(k.endswith(".metadata.json") for k in keys), keys
    assert any("/data/" in k and k.endswith(".parquet") for k in keys), keys
    local = [p.name for p in Path(s3_catalog.root).rglob("*") if p.suffix in (".json", ".parquet", ".avro")]
    assert local == []
    assert s3_catalog.load("ns.t").scan().to_arrow().column("id").to_pylist() == [1, 2, 3]
