"""JSON text of a ChangeSplit for the write-ahead batch record.

One split is one row of text, so a batch of thousands of splits is stored and resumed without a
single huge document. Decoding failures mean the store's contents are damaged: StateError.
"""

from __future__ import annotations

import json

from icetail.state.errors import StateError
from icetail.state.model import ChangeSplit, split_from_json_dict, to_json_dict


def encode_split(split: ChangeSplit) -> str:
    """Compact, key-sorted JSON: the same split always encodes to the same text."""
    return json.dumps(to_json_dict(split), sort_keys=True, separators=(",", ":"))


def decode_split(text: str, *, expected_split_id: str) -> ChangeSplit:
    """Inverse of `encode_split`; refuses text that is not the split it was stored as."""
    try:
        split = split_from_json_dict(json.loads(text))
    except (ValueError, KeyError, TypeError) as exc:
        raise StateError(
            f"stored split {expected_split_id} cannot be decoded ({exc}); the checkpoint store is damaged"
        ) from exc
    if split.split_id != expected_split_id:
        raise StateError(
            f"stored split {expected_split_id} decodes to split id {split.split_id}; the checkpoint store is damaged"
        )
    return split
