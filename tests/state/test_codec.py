"""Split encoding for the write-ahead record."""

from __future__ import annotations

import pytest

from icetail.state.codec import decode_split, encode_split
from icetail.state.errors import StateError
from tests.state.conftest import make_split


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
