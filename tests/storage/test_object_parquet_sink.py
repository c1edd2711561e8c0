"""`parquet+s3://BUCKET/PREFIX`: exactly once without rename, against moto_server on loopback.

Credentials and endpoint come only from the standard AWS variables (AWS_ACCESS_KEY_ID,
AWS_SECRET_ACCESS_KEY, AWS_REGION, AWS_ENDPOINT_URL_S3), as a user would set them.
In-process tests drive the sink directly; the end-to-end test runs `icetail run` as a child
process, so its Spark workers start with those variables in their environment (the workers of
the test session's Spark were started before any test set them).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds
import pytest
from pyarrow import fs

from icetail.kernel.errors import ConfigError, SinkError, StorageAccessError
from icetail.monitor.engine.api import read_changes
from icetail.sinks.base import ChunkKey
from icetail.sinks.files.object_store import ObjectParquetSink, committed_objects
from icetail.sinks.registry import open_sink
from tests.support.processes import child_env, run_icetail
from tests.support.s3 import SECRET_ACCESS_KEY, MotoServer, S3Catalog, moto_server
from tests.support.tables import build_mixed_table

BATCH = "b000001-0123abcd-c0-o0-n1"


@pytest.fixture
def bucket(moto: MotoServer, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> str:
    for key, value in moto.aws_env().items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    name = f"sink-{abs(hash(request.node.nodeid)) % 10**10:010d}"
    moto.create_bucket(name)
    return name


def _rows(ids: range) -> pa.Table:
    return pa.table({"id": list(ids), "_change_type": ["INSERT"] * len(ids)})


def _key(consumer: str, split: int, start: int = 0) -> ChunkKey:
    return ChunkKey(consumer, BATCH, split, f"s{split}", start)


def _committed(url: str, moto: MotoServer) -> pa.Table:
    paths = committed_objects(url)
    return ds.dataset(paths, filesystem=moto.fs(), format="parquet").to_table() if paths else pa.table({})


def test_chunks_are_committed_by_records_and_replays_do_not_duplicate(bucket: str, moto: MotoServer) -> None:
    url = f"parquet+s3://{bucket}/changes/orders"
    sink = open_sink(url, consumer="c1")
    assert isinstance(sink, ObjectParquetSink) and sink.exactly_once
    assert sink.write(_key("c1", 0), _rows(range(5))) == f"c1-{BATCH}-000000-000000000000.parquet"
    sink.write(_key("c1", 1), _rows(range(5, 9)))
    sink.write(_key("c1", 1), _rows(range(5, 9)))  # a replay after a crash before the offset commit
    # a task staged chunk 2 and the run died before its commit record
    staged = sink.stager().stage(_key("c1", 2), _rows(range(9, 12)))
    assert staged == f"{bucket}/changes/orders/c1-{BATCH}-000002-000000000000.parquet"

    assert committed_objects(url) == [
        f"{bucket}/changes/orders/c1-{BATCH}-000000-000000000000.parquet",
        f"{bucket}/changes/orders/c1-{BATCH}-000001-000000000000.parquet",
    ]
    assert sorted(_committed(url, moto).column("id").to_pylist()) == list(range(9))

    # the replay of chunk 2 writes the same key again, then commits it
    sink.commit_staged(_key("c1", 2), sink.stager().stage(_key("c1", 2), _rows(range(9, 12))))
    assert sorted(_committed(url, moto).column("id").to_pylist()) == list(range(12))
    records = moto.fs().get_file_info(fs.FileSelector(f"{bucket}/changes/orders/_committed"))
    assert len(records) == 3


def test_leftovers_of_this_consumer_are_removed_on_open(bucket: str, moto: MotoServer) -> None:
    url = f"parquet+s3://{bucket}/out"
    mine = ObjectParquetSink("s3", f"{bucket}/out", consumer="c1")
    other = ObjectParquetSink("s3", f"{bucket}/out", consumer="c1-b000001")  # a name that starts like c1's
    mine.write(_key("c1", 0), _rows(range(3)))
    mine.stager().stage(_key("c1", 1), _rows(range(3, 6)))  # never committed
    other.stager().stage(_key("c1-b000001", 0), _rows(range(6, 9)))  # another consumer's, in flight

    young = ObjectParquetSink("s3", f"{bucket}/out", consumer="c1")  # default: only leftovers older than 1 h
    assert young.leftovers_removed == 0
    reopened = ObjectParquetSink("s3", f"{bucket}/out", consumer="c1", leftover_min_age_s=0)
    assert reopened.leftovers_removed == 1
    names = sorted(Path(i.path).name for i in moto.fs().get_file_info(fs.FileSelector(f"{bucket}/out")) if i.is_file)
    assert names == sorted(
        [f"c1-b000001-{BATCH}-000000-000000000000.parquet", f"c1-{BATCH}-000000-000000000000.parquet"]
    )
    assert _committed(url, moto).column("id").to_pylist() == [0, 1, 2]


def test_a_staged_object_that_vanished_is_not_committed(bucket: str, moto: MotoServer) -> None:
    sink = ObjectParquetSink("s3", f"{bucket}/p", consumer="c1")
    staged = sink.stager().stage(_key("c1", 0), _rows(range(3)))
    moto.fs().delete_file(staged)
    with pytest.raises(SinkError, match="is gone"):
        sink.commit_staged(_key("c1", 0), staged)
    assert committed_objects(f"parquet+s3://{bucket}/p") == []


def test_bad_targets_are_one_line_errors(bucket: str, moto: MotoServer, tmp_path: Path, monkeypatch: Any) -> None:
    with pytest.raises(ConfigError, match="bucket 'no-such-bucket' does not exist"):
        open_sink("parquet+s3://no-such-bucket/x", consumer="c1")
    with pytest.raises(ConfigError, match="unknown object store 'ftp'"):
        open_sink("parquet+ftp://b/x", consumer="c1")
    with moto_server(tmp_path, {"INITIAL_NO_AUTH_ACTION_COUNT": "0"}) as checking:
        monkeypatch.setenv("AWS_ENDPOINT_URL_S3", checking.endpoint)
        with pytest.raises(StorageAccessError) as caught:
            open_sink(f"parquet+s3://{bucket}/x", consumer="c1")
    assert "access denied" in str(caught.value) and SECRET_ACCESS_KEY not in str(caught.value)


def test_run_delivers_a_table_on_s3_to_an_s3_sink_exactly(
    s3_catalog: S3Catalog, moto: MotoServer, bucket: str, spark: Any, tmp_path: Path
) -> None:
    table = build_mixed_table(s3_catalog, "ns.mixed")  # type: ignore[arg-type]
    expected = read_changes(table, spark=spark)
    url = f"parquet+s3://{bucket}/cdc/mixed"
    env = {**child_env([s3_catalog], tmp_path / "spark"), **moto.aws_env()}  # type: ignore[list-item]
    args = ["run", "--catalog", "s3cat", "--table", "ns.mixed", "--state", f"sqlite:///{tmp_path}/state.db"]
    result = run_icetail([*args, "--sink", url, "--consumer", "c", "--until-caught-up", "--chunk-rows", "97"], env)
    assert result.returncode == 0, result.stderr
    assert SECRET_ACCESS_KEY not in result.stdout + result.stderr
    paths = committed_objects(url)
    fragments = ds.dataset(paths, filesystem=moto.fs(), format="parquet").get_fragments()
    # chunks written before the schema change lack the added column: unify, as docs/sinks.md says
    schema = pa.unify_schemas([f.physical_schema for f in fragments], promote_options="permissive")
    got = ds.dataset(paths, filesystem=moto.fs(), format="parquet", schema=schema).to_table()
    cols = expected.column_names
    assert Counter(zip(*[got.column(c).to_pylist() for c in cols], strict=True)) == Counter(
        zip(*[expected.column(c).to_pylist() for c in cols], strict=True)
    )
    data_objects = [i for i in moto.fs().get_file_info(fs.FileSelector(f"{bucket}/cdc/mixed")) if i.is_file]
    assert len(data_objects) == len(committed_objects(url)) > 5  # no leftovers after a clean run
