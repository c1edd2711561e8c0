"""Versioned JSON text of a ChangeSplit for the write-ahead batch record.

One split is one row of text, so a batch of thousands of splits is stored and resumed without a
single huge document. Each text carries its format version (as Flink's split serializers do),
and every version ever written has a decoder here, so an upgrade of icetail resumes a batch an
older release wrote; a version newer than this code is refused with one clear line. Decoding
failures mean the store's contents are damaged: StateError.

Versions (never edit a shipped one; add the next and its decoder):
1. the fields of `ChangeSplit` as `dataclasses.asdict`, enums as their values; no version key.
2. version 1 plus `"format_version": 2`: the text says which decoder reads it.
3. version 2 plus `task.commit.schema_id`, the schema the commit's snapshot was written with
   (the `_schema_id` column); versions 1 and 2 decode with it None, and the pipeline fills it
   in from the table's metadata.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict
from enum import Enum
from typing import Any

from icetail.kernel.errors import StateError
from icetail.kernel.model import (
    ChangeSplit,
    ChangeTask,
    CommitInfo,
    DataFileRef,
    DeleteContent,
    DeleteFileRef,
    FileChangeKind,
)

VERSION_KEY = "format_version"
SPLIT_FORMAT_VERSION = 3


def encode_split(split: ChangeSplit) -> str:
    """Compact, key-sorted JSON of the current version: the same split always encodes to the same text."""
    fields = json.loads(json.dumps(asdict(split), default=_enum_value))
    return json.dumps({VERSION_KEY: SPLIT_FORMAT_VERSION, **fields}, sort_keys=True, separators=(",", ":"))


def decode_split(text: str, *, expected_split_id: str) -> ChangeSplit:
    """Inverse of `encode_split` for every supported version; refuses text that is not the split it was stored as."""
    try:
        raw = json.loads(text)
        version = raw.pop(VERSION_KEY, 1) if isinstance(raw, dict) else None
    except ValueError as exc:
        raise _damaged(expected_split_id, exc) from exc
    decoder = _DECODERS.get(version) if isinstance(version, int) else None
    if decoder is None:
        supported = ", ".join(str(v) for v in _DECODERS)
        raise StateError(
            f"stored split {expected_split_id} has format version {version!r}, but this icetail reads split "
            f"format versions {supported}; finish the batch in flight with the icetail release that started it"
        )
    try:
        split = decoder(raw)
    except (ValueError, KeyError, TypeError) as exc:
        raise _damaged(expected_split_id, exc) from exc
    if split.split_id != expected_split_id:
        raise StateError(
            f"stored split {expected_split_id} decodes to split id {split.split_id}; the checkpoint store is damaged"
        )
    return split


def _damaged(split_id: str, exc: Exception) -> StateError:
    return StateError(f"stored split {split_id} cannot be decoded ({exc}); the checkpoint store is damaged")


def _enum_value(value: Any) -> Any:
    if isinstance(value, Enum):
        return value.value
    raise TypeError(f"not JSON serializable: {type(value).__name__}")


def _decode_v1(raw: dict[str, Any]) -> ChangeSplit:
    """Version 1: `asdict` of the split, enums as values, tuples as lists."""
    t = raw["task"]
    df = t["data_file"]
    data_file = DataFileRef(
        **{**df, "split_offsets": tuple(df["split_offsets"]) if df["split_offsets"] is not None else None}
    )

    def deletes(items: list[dict[str, Any]]) -> tuple[DeleteFileRef, ...]:
        return tuple(
            DeleteFileRef(
                **{**d, "content": DeleteContent(d["content"]), "equality_field_ids": tuple(d["equality_field_ids"])}
            )
            for d in items
        )

    task = ChangeTask(
        data_file=data_file,
        kind=FileChangeKind(t["kind"]),
        commit=CommitInfo(**t["commit"]),
        deletes_before=deletes(t["deletes_before"]),
        deletes_after=deletes(t["deletes_after"]),
    )
    return ChangeSplit(
        task=task,
        row_group_start=raw["row_group_start"],
        row_group_end=raw["row_group_end"],
        estimated_rows=raw["estimated_rows"],
        estimated_bytes=raw["estimated_bytes"],
        split_id=raw["split_id"],
    )


def _decode_v2(raw: dict[str, Any]) -> ChangeSplit:
    """Version 2: the fields of version 1 (the version key is already taken off)."""
    return _decode_v1(raw)


def _decode_v3(raw: dict[str, Any]) -> ChangeSplit:
    """Version 3: the fields of version 2 with the commit's `schema_id` (read by the same keyword decode)."""
    if "schema_id" not in raw["task"]["commit"]:
        raise KeyError("task.commit.schema_id")
    return _decode_v1(raw)


_DECODERS: dict[int, Callable[[dict[str, Any]], ChangeSplit]] = {1: _decode_v1, 2: _decode_v2, 3: _decode_v3}
SUPPORTED_SPLIT_FORMAT_VERSIONS: tuple[int, ...] = tuple(_DECODERS)
assert SUPPORTED_SPLIT_FORMAT_VERSIONS[-1] == SPLIT_FORMAT_VERSION, "the newest decoder reads what encode_split writes"
