"""What the mirror tests share: a pipeline config into a mirror sink, and the check that a mirror's
target holds exactly the source's rows at the consumer's cursor (PostgreSQL and Iceberg alike)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa

from icetail.monitor.engine.config import PipelineConfig
from icetail.state.store import open_store
from tests.support.pg_mirror import row_set


def mirror_config(catalog: str, tmp_path: Path, sink_url: str, **overrides: Any) -> PipelineConfig:
    """A consumer `mirror` of `catalog`'s ns.t into `sink_url`, state in SQLite, chunks of 7 rows."""
    values: dict[str, Any] = {
        "catalog": catalog,
        "table": "ns.t",
        "state_url": f"sqlite:///{tmp_path / 'state.db'}",
        "sink_url": sink_url,
        "consumer": "mirror",
        "chunk_rows": 7,
    }
    values.update(overrides)
    return PipelineConfig(**values)


def assert_target_equals_source(source: Any, config: PipelineConfig, target: pa.Table, columns: Sequence[str]) -> None:
    """`target` holds exactly `source`'s ns.t rows (a pyiceberg catalog) at the consumer's cursor."""
    with open_store(config.state_url) as store:
        checkpoint = store.load(config.consumer_id)
    assert checkpoint is not None and checkpoint.inflight is None
    cursor = checkpoint.cursor.snapshot_id
    expected_rows = source.load("ns.t").scan(snapshot_id=cursor).to_arrow()
    got, expected = row_set(target, columns), row_set(expected_rows, columns)
    assert got == expected, f"at snapshot {cursor}: target-only {set(got) - set(expected)}, " + (
        f"source-only {set(expected) - set(got)}"
    )


def equal_between_batches(source: Any, ident: str, columns: Sequence[str], state: Any, rows: pa.Table | None) -> bool:
    """Between batches (`state`, a `stores.StateView`), the target's `rows` are exactly `source`'s `ident`
    at the cursor (a column one side lacks reads as nulls); False, nothing checked, mid-batch."""
    if not (state.exists and state.inflight_batch is None and state.cursor is not None):
        return False
    expected = _padded(source.load(ident).scan(snapshot_id=state.cursor).to_arrow(), columns)
    got = row_set(_padded(rows, columns), columns) if rows is not None else []
    assert got == row_set(expected, columns), f"target differs from the source at {state.cursor}"
    return True


def _padded(rows: pa.Table, columns: Sequence[str]) -> pa.Table:
    for name in columns:
        if name not in rows.column_names:
            rows = rows.append_column(name, pa.nulls(rows.num_rows))
    return rows


def mirror_run_command(catalog: str, ident: str, state_url: str, sink_url: str, consumer: str) -> list[str]:
    """`icetail run` into a mirror as the crash tests run it: keyed by id, to the end, small batches."""
    from tests.support.processes import icetail_command

    return [
        *icetail_command(),
        "run",
        "--catalog", catalog,
        "--table", ident,
        "--state", state_url,
        "--sink", sink_url,
        "--consumer", consumer,
        "--identifier-columns", "id",
        "--until-caught-up",
        "--max-snapshots-per-batch", "2",
        "--chunk-rows", "100",
    ]  # fmt: skip


VALIDITY_PAIRS = (("_valid_from_snapshot_id", "_valid_from"), ("_valid_to_snapshot_id", "_valid_to"))


def history_problems(
    versions: pa.Table,
    snapshots: Sequence[int],
    rows_at: Callable[[int], pa.Table],
    columns: Sequence[str],
    key: Sequence[str] = ("id",),
    commit_ms: Mapping[int, int] | None = None,
) -> list[str]:
    """What is wrong with a history table's `versions` (mode=history): for every snapshot S of
    `snapshots` (the ones followed, in lineage order), the versions valid at S
    (`_valid_from_snapshot_id` at or before S, `_valid_to_snapshot_id` NULL or after S) must be
    exactly `rows_at(S)`; a key has one version per snapshot; with `commit_ms` (snapshot -> commit
    time, ms), `_valid_from`/`_valid_to` must be the commit times of those snapshots."""
    position = {s: i for i, s in enumerate(snapshots)}
    rows = versions.to_pylist()
    problems: list[str] = []
    starts = Counter(tuple(r[k] for k in (*key, "_valid_from_snapshot_id")) for r in rows)
    problems += [f"version {k} is there {n} times" for k, n in starts.items() if n > 1]
    unknown = {r["_valid_from_snapshot_id"] for r in rows} - set(position)
    if unknown:
        return [*problems, f"versions start at snapshots not followed: {sorted(unknown)}"]
    for i, snapshot in enumerate(snapshots):
        valid = [
            tuple(r[c] for c in columns)
            for r in rows
            if position[r["_valid_from_snapshot_id"]] <= i
            and (r["_valid_to_snapshot_id"] is None or position[r["_valid_to_snapshot_id"]] > i)
        ]
        expected = row_set(rows_at(snapshot), columns)
        if sorted(valid, key=repr) != expected:
            problems.append(f"at snapshot {i} ({snapshot}): versions {sorted(valid, key=repr)} != source {expected}")
    if commit_ms is not None:
        for r in rows:
            for snapshot_column, time_column in VALIDITY_PAIRS:
                snapshot, stamp = r[snapshot_column], r[time_column]
                want = None if snapshot is None else commit_ms[snapshot]
                got = None if stamp is None else int(stamp.timestamp() * 1000)
                if got != want:
                    problems.append(f"version {r}: {time_column} is {stamp}, its snapshot's commit time {want} ms")
    return problems
