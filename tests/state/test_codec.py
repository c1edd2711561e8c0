"""Split encoding for the write-ahead record: every format version decodes, unknown versions are refused."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from icetail.kernel.errors import StateError
from icetail.state.codec import (
    SPLIT_FORMAT_VERSION,
    SUPPORTED_SPLIT_FORMAT_VERSIONS,
    VERSION_KEY,
    decode_split,
    encode_split,
)
from tests.support.checkpoints import make_split


def test_round_trip_with_delete_files() -> None:
    split = make_split(3, 42, with_deletes=True)
    text = encode_split(split)
    assert decode_split(text, expected_split_id=split.split_id) == split
    assert encode_split(decode_split(text, expected_split_id=split.split_id)) == text  # stable text


@pytest.mark.parametrize("text", ["not json", "{}", '{"task": 1}'])
def test_damaged_text_is_a_state_error(text: str) -> None:
    with pytest.raises(StateError, match="damaged"):
        decode_split(text, expected_split_id="abc")


def test_text_of_another_split_is_refused() -> None:
    with pytest.raises(StateError, match="decodes to split id"):
        decode_split(encode_split(make_split(1)), expected_split_id=make_split(2).split_id)


# Written by icetail before split texts carried a version (format 1), for make_split(3, 42, with_deletes=True).
V1_TEXT = (
    '{"estimated_bytes":0,"estimated_rows":500,"row_group_end":2,"row_group_start":1,'
    '"split_id":"8155ac40db7f7f4b3245c89a","task":{"commit":{"operation":"append","ordinal":0,"parent_id":null,'
    '"sequence_number":42,"snapshot_id":42,"timestamp_ms":1700000000042},"data_file":{"data_sequence_number":1,'
    '"file_format":"parquet","file_size_in_bytes":65536,"partition":"(day=2026-01-01)",'
    '"path":"s3://bucket/t/data/f-3.parquet","record_count":1000,"spec_id":0,"split_offsets":[4,32768]},'
    '"deletes_after":[{"content":"deletion_vector","content_offset":4,"content_size_in_bytes":40,'
    '"data_sequence_number":2,"equality_field_ids":[],"file_format":"puffin","file_size_in_bytes":512,'
    '"partition":"(day=2026-01-01)","path":"s3://bucket/t/data/del-3.puffin","record_count":3,'
    '"referenced_data_file":"s3://bucket/t/data/f-3.parquet","spec_id":0}],"deletes_before":[],"kind":"modified"}}'
)


def test_every_supported_version_decodes_to_the_same_split() -> None:
    split = make_split(3, 42, with_deletes=True)
    current = encode_split(split)
    assert json.loads(current)[VERSION_KEY] == SPLIT_FORMAT_VERSION == 3
    assert SUPPORTED_SPLIT_FORMAT_VERSIONS == (1, 2, 3)
    v2_text = json.dumps({**json.loads(V1_TEXT), VERSION_KEY: 2})  # what icetail wrote before schema ids
    for text in (V1_TEXT, v2_text, current):
        assert decode_split(text, expected_split_id=split.split_id) == split
    # a version-1 text is re-encoded as the current version: the version key and the (unknown) schema id differ
    v1 = json.loads(V1_TEXT)
    v1["task"]["commit"]["schema_id"] = None
    assert json.loads(encode_split(decode_split(V1_TEXT, expected_split_id=split.split_id))) == {
        **v1,
        VERSION_KEY: SPLIT_FORMAT_VERSION,
    }


def test_version_3_keeps_the_commit_schema_id() -> None:
    split = make_split(3, 42)
    split = replace(split, task=replace(split.task, commit=replace(split.task.commit, schema_id=7)))
    text = encode_split(split)
    assert json.loads(text)["task"]["commit"]["schema_id"] == 7
    decoded = decode_split(text, expected_split_id=split.split_id)
    assert decoded == split and decoded.task.commit.schema_id == 7
    assert decoded.split_id == make_split(3, 42).split_id  # the schema id is no part of the split's identity


def test_a_version_3_text_without_a_schema_id_is_damaged() -> None:
    split = make_split(3, 42)
    raw = json.loads(encode_split(split))
    del raw["task"]["commit"]["schema_id"]
    with pytest.raises(StateError, match="damaged"):
        decode_split(json.dumps(raw), expected_split_id=split.split_id)


@pytest.mark.parametrize("version", [4, 0, "2", None])
def test_an_unknown_version_is_refused_naming_the_supported_ones(version: object) -> None:
    split = make_split(1)
    raw = {**json.loads(encode_split(split)), VERSION_KEY: version}
    with pytest.raises(StateError) as info:
        decode_split(json.dumps(raw), expected_split_id=split.split_id)
    message = str(info.value)
    assert f"format version {version!r}" in message
    assert "split format versions 1, 2, 3;" in message and "release that started it" in message
