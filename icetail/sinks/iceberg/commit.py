"""One commit of the Iceberg sink, made on the metadata the sink already holds, cheaply and without rebasing.

Why a view: pyiceberg's transaction deep-copies the table's whole metadata every time it reads it
(about ten times per fast append), and that metadata holds every snapshot and snapshot-log entry
of the table's history, so a sink's per-chunk commit cost grew with the history (measured: ~0.45
ms of CPU per snapshot already in the table, ~100 ms per chunk at 200 snapshots). An append reads
only the branch heads, schemas, specs, sort orders, properties and counters, so the transaction
runs on a view of the metadata without the other snapshots, the snapshot log and the metadata log
(kept when the table has pyiceberg prune old metadata files,
`write.metadata.delete-after-commit.enabled`: it prunes by the log of the metadata committed on).
The catalog applies the commit's updates (add the snapshot, move the branch) to the table's full
metadata as it is in the catalog, as for any commit, only while the commit's requirements hold
(the branch head is the one the view shows, the table uuid is the same); otherwise
CommitFailedException and nothing is committed.

Why no rebase: on a conflict pyiceberg would retry by itself, putting the snapshot on top of
whatever the other writer committed. The sink must first look for its chunk among those
snapshots (it may be this consumer's own chunk, committed by an attempt whose outcome was lost),
so the view sets `commit.retry.num-retries` to 0 and the conflict reaches the sink (`committed`).
"""

from __future__ import annotations

from collections.abc import Callable

from pyiceberg.table import Table, TableProperties, Transaction
from pyiceberg.utils.properties import property_as_bool

_NO_RETRIES = {TableProperties.COMMIT_NUM_RETRIES: "0"}


def commit_view(table: Table) -> Table:
    """`table` with the metadata an append reads: branch and tag heads, no logs, no retries."""
    metadata = table.metadata
    heads = {ref.snapshot_id for ref in metadata.refs.values()}
    prunes = property_as_bool(
        metadata.properties,
        TableProperties.METADATA_DELETE_AFTER_COMMIT_ENABLED,
        TableProperties.METADATA_DELETE_AFTER_COMMIT_ENABLED_DEFAULT,
    )
    view = metadata.model_copy(
        update={
            "snapshots": [s for s in metadata.snapshots if s.snapshot_id in heads],
            "snapshot_log": [],
            "metadata_log": metadata.metadata_log if prunes else [],
            "properties": {**metadata.properties, **_NO_RETRIES},
        }
    )
    return Table(table.name(), view, table.metadata_location, table.io, table.catalog, table.config)


def committed(table: Table, stage: Callable[[Transaction], None]) -> Table:
    """Commit what `stage` puts in a transaction on `table`, as one commit; the table after it, full metadata.

    Raises CommitFailedException (nothing committed) when the table moved since `table` was loaded.
    """
    view = commit_view(table)
    with view.transaction() as transaction:
        stage(transaction)
    return view  # pyiceberg replaced its metadata by the catalog's response: the whole table as committed


def commit_retries(table: Table) -> int:
    """How often the sink commits again after a conflict: the table's own `commit.retry.num-retries`."""
    raw = table.properties.get(TableProperties.COMMIT_NUM_RETRIES)
    try:
        return max(0, int(raw)) if raw is not None else TableProperties.COMMIT_NUM_RETRIES_DEFAULT
    except ValueError:
        return TableProperties.COMMIT_NUM_RETRIES_DEFAULT


def outraced(attempts: int, retries: int) -> str:
    """Why a commit was given up: another writer's commits landed first every time (chaos harness,
    issue 26: pyiceberg's own text, `Requirement failed: branch main has changed: expected id ...`,
    named neither the other writer nor what to do)."""
    return (
        f"another writer committed to the table before each of the sink's {attempts} attempts (the table's "
        f"commit.retry.num-retries is {retries}); nothing was committed: run again to resume (serve retries), "
        "or raise commit.retry.num-retries"
    )
