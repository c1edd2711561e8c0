"""The data source's options and offsets (pure; both Spark lines), and its import on Spark 3.5."""

from __future__ import annotations

import subprocess
import sys

import pytest

from icetail.kernel.errors import ConfigError
from icetail.monitor.engine.spark_source.offsets import StreamOffset, initial_offset, next_offset
from icetail.monitor.engine.spark_source.options import parse_batch_options, parse_stream_options
from icetail.monitor.engine.spark_version import pyspark_major
from icetail.monitor.engine.verify import VerifyMode
from tests.support.small_table import SmallTable

BASE = {"catalog": "c", "table": "ns.t"}


def test_batch_options_are_parsed_case_insensitively() -> None:
    parsed = parse_batch_options(
        {**BASE, "From-Snapshot": "5", "to-snapshot": "9", "identifier-columns": "a, b", "catalog.uri": "sqlite://"}
    )
    assert (parsed.from_snapshot_id_exclusive, parsed.to_snapshot_id_inclusive) == (5, 9)
    assert parsed.source.identifier_columns == ("a", "b")
    assert parsed.source.catalog_properties == (("uri", "sqlite://"),)
    assert not parsed.net and parse_batch_options({**BASE, "NET": "True"}).net
    assert parsed.source.verify == VerifyMode.WARN  # the default, as --verify's
    assert parse_batch_options({**BASE, "Verify": " STRICT "}).source.verify == VerifyMode.STRICT
    assert parse_stream_options({**BASE, "verify": "off"}).source.verify == VerifyMode.OFF


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"table": "ns.t"}, "option 'catalog' is required"),
        ({**BASE, "starting": "earliest"}, "unknown option 'starting' for spark.read.format('icetail')"),
        ({**BASE, "to-snapshot": "x"}, "option 'to-snapshot' must be a snapshot id (an integer), got 'x'"),
        ({**BASE, "identifier-columns": " , "}, "option 'identifier-columns' must name columns"),
        ({**BASE, "net": "yes"}, "option 'net' must be true or false, got 'yes'"),
        ({**BASE, "verify": "loud"}, "option 'verify' 'loud' is not one of off, warn, strict"),
    ],
)
def test_bad_batch_options(options: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=None) as raised:
        parse_batch_options(options)
    assert message in str(raised.value)


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"starting": "full"}, "option 'starting' 'full' is not one of: earliest, latest, snapshot:ID, timestamp:"),
        ({"starting": "snapshot:x"}, "option 'starting' 'snapshot:x' is not one of"),
        ({"max-snapshots-per-trigger": "0"}, "option 'max-snapshots-per-trigger' must be an integer >= 1, got '0'"),
        ({"from-snapshot": "1"}, "unknown option 'from-snapshot' for spark.readStream.format('icetail')"),
        ({"verify": ""}, "option 'verify' '' is not one of off, warn, strict"),
    ],
)
def test_bad_stream_options(extra: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError) as raised:
        parse_stream_options({**BASE, **extra})
    assert message in str(raised.value)


def test_offsets_walk_the_history_with_a_limit(small_table: SmallTable) -> None:
    metadata = small_table.load().metadata
    ids = small_table.snapshot_ids
    start = initial_offset(metadata, parse_stream_options(BASE).starting)
    assert start == StreamOffset(None, None, 0)
    first = next_offset(metadata, start, max_snapshots=1)
    assert (first.snapshot_id, first.next_ordinal) == (ids[0], 1)
    rest = next_offset(metadata, first)
    assert (rest.snapshot_id, rest.next_ordinal) == (ids[-1], len(ids))
    assert next_offset(metadata, rest) == rest  # nothing new: the same offset
    assert next_offset(metadata, first, until_snapshot_id_inclusive=ids[1]).snapshot_id == ids[1]
    assert StreamOffset.from_json(rest.to_json()) == rest
    with pytest.raises(ConfigError, match="not an icetail offset"):
        StreamOffset.from_json({"offset": 3})


def test_offsets_of_every_format_version_are_read_and_newer_ones_refused() -> None:
    offset = StreamOffset(42, 1_700_000_000_000, 7)
    assert offset.to_json() == {"snapshot_id": 42, "timestamp_ms": 1_700_000_000_000, "next_ordinal": 7, "version": 2}
    # version 1: what the data source wrote before offsets carried a version
    assert StreamOffset.from_json({"snapshot_id": 42, "timestamp_ms": 1_700_000_000_000, "next_ordinal": 7}) == offset
    assert StreamOffset.from_json(offset.to_json()) == offset
    assert StreamOffset.from_json({"snapshot_id": None, "timestamp_ms": None, "next_ordinal": 0}) == StreamOffset(
        None, None, 0
    )
    with pytest.raises(ConfigError, match=r"format version 4, but this icetail reads offset format versions 1, 2, 3;"):
        StreamOffset.from_json({**offset.to_json(), "version": 4})


def test_import_on_spark35_says_spark4_is_needed_in_one_line() -> None:
    """On pyspark 3.5 a script's `import icetail.spark` ends in the one line the README promises (issue 48: it
    was a traceback ending in that line), naming pyspark 4 and how to get it; caught, it is an ImportError."""
    result = subprocess.run([sys.executable, "-c", "import icetail.spark"], capture_output=True, text=True)
    if pyspark_major() >= 4:
        assert result.returncode == 0, result.stderr
        return
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("icetail: error: icetail.spark (the 'icetail' Spark data source) needs Spark >= 4.0")
    assert "pip install 'pyspark>=4,<5'" in lines[0] and "make demo" in lines[0]
    assert "icetail changes" in lines[0] and "icetail.read_changes" in lines[0]

    caught = "try:\n    import icetail.spark\nexcept ImportError as e:\n    print(type(e).__name__)\n1 / 0\n"
    other = subprocess.run([sys.executable, "-c", caught], capture_output=True, text=True)
    assert other.stdout == "SparkVersionError\n"
    assert other.stderr.startswith("Traceback") and "ZeroDivisionError" in other.stderr  # other errors as before
