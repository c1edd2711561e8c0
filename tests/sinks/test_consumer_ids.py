"""What a consumer id may be, and that nothing built from one leaves its folder (issue 22.1).

The defect: consumer `..` opened a parquet sink whose `_tmp/..` was the sink folder itself, and
the stale-file cleanup at open removed every committed chunk of the other consumers. Hostile ids
are refused with one line wherever an id enters (the pipeline's configuration, `open_sink`, each
sink), before anything is created or removed; paths are joined only through `path_inside`.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from icetail.kernel.errors import ConfigError
from icetail.kernel.names import check_consumer_id, key_inside, path_inside
from icetail.monitor.engine.config import PipelineConfig
from icetail.sinks.files.jsonl import JsonlFileSink
from icetail.sinks.files.object_store import ObjectParquetSink
from icetail.sinks.files.parquet import ParquetDirSink
from icetail.sinks.iceberg.changelog import IcebergTableSink
from icetail.sinks.registry import open_sink
from tests.sinks import change_rows, key
from tests.support.processes import child_env, icetail_lines, run_icetail

HOSTILE_IDS = [
    "..",
    ".",
    "../other",
    "a/b",
    "/etc",
    "_tmp",  # begins with `_`: readers skip such files, the chunks would be invisible
    ".hidden",
    "-flag",
    "",
    "a b",
    "a,b",  # the Iceberg sink keeps chunk ids comma-separated
    "a\0b",
    "naïve",
    "x" * 129,
]
GOOD_IDS = ["c", "orders-cdc", "demo.ns.orders", "A_1.b-2", "9", "x" * 128, "a..b"]


@pytest.mark.parametrize("consumer", HOSTILE_IDS)
def test_hostile_consumer_ids_are_refused_with_one_line(consumer: str) -> None:
    with pytest.raises(ConfigError, match="is not valid: a consumer id is 1 to 128 letters") as caught:
        check_consumer_id(consumer)
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize("consumer", GOOD_IDS)
def test_plain_consumer_ids_are_kept_as_they_are(consumer: str) -> None:
    assert check_consumer_id(consumer) == consumer
    assert key(0, consumer=consumer).name.startswith(consumer + "-")  # names keep the id unchanged


def test_a_dot_dot_consumer_cannot_remove_another_consumers_chunks(tmp_path: Path) -> None:
    """The reported data loss, replayed: it is refused and every committed file stays."""
    theirs = ParquetDirSink(tmp_path, consumer="orders-cdc")
    committed = [theirs.write(key(i, consumer="orders-cdc"), change_rows([i])) for i in range(3)]
    theirs.close()
    for hostile in ("..", ".", "../..", "_tmp/.."):
        with pytest.raises(ConfigError, match="consumer id"):
            ParquetDirSink(tmp_path, consumer=hostile)
        with pytest.raises(ConfigError, match="consumer id"):
            open_sink(f"parquet://{tmp_path}", consumer=hostile)
    assert sorted(p.name for p in tmp_path.glob("*.parquet")) == sorted(committed)


def test_every_sink_refuses_a_hostile_id_before_touching_anything(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="consumer id"):
        JsonlFileSink(tmp_path / "out.jsonl", consumer="../x")
    with pytest.raises(ConfigError, match="consumer id"):
        ObjectParquetSink("s3", "bucket/prefix", consumer="..")  # refused before any request
    with pytest.raises(ConfigError, match="consumer id"):
        IcebergTableSink("nocatalog", "ns.t", consumer="a,b")  # refused before the catalog loads
    assert list(tmp_path.iterdir()) == []


def test_a_default_consumer_id_that_is_not_valid_says_to_name_one() -> None:
    with pytest.raises(ConfigError, match=r"default consumer id 'demo.ns.my orders' .* name one with --consumer"):
        PipelineConfig(catalog="demo", table="ns.my orders", state_url="sqlite:///s.db", sink_url="-")
    config = PipelineConfig(
        catalog="demo", table="ns.my orders", state_url="sqlite:///s.db", sink_url="-", consumer="orders"
    )
    assert config.consumer_id == "orders"


@pytest.mark.parametrize("name", ["..", ".", "", "a/b", "../a", "/abs", "a\0b"])
def test_paths_and_keys_built_from_names_stay_inside(tmp_path: Path, name: str) -> None:
    with pytest.raises(ConfigError):
        path_inside(tmp_path, name)
    with pytest.raises(ConfigError):
        key_inside("bucket/prefix", name)


def test_plain_names_join_inside(tmp_path: Path) -> None:
    assert path_inside(tmp_path / "x" / ".." / "y", "c.parquet") == tmp_path / "y" / "c.parquet"
    assert key_inside("bucket/prefix/", "c.parquet") == "bucket/prefix/c.parquet"


def test_run_with_a_hostile_consumer_exits_2_at_once(tmp_path: Path) -> None:
    sink = tmp_path / "sink"
    sink.mkdir()
    (sink / "other-chunk.parquet").write_bytes(b"another consumer's committed chunk")
    args = ["run", "--catalog", "c", "--table", "ns.t", "--state", f"sqlite:///{tmp_path}/s.db"]
    result = run_icetail([*args, "--sink", f"parquet://{sink}", "--consumer", ".."], child_env(), timeout=60)
    assert result.returncode == 2, result.stderr
    lines = icetail_lines(result.stderr)
    assert lines == [
        "icetail: error: consumer id '..' is not valid: a consumer id is 1 to 128 letters, digits, '.', '_' or '-', "
        "beginning with a letter or digit"
    ]
    assert [p.name for p in sink.iterdir()] == ["other-chunk.parquet"]  # nothing created, nothing removed
    assert not (tmp_path / "s.db").exists()
