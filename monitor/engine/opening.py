"""A consumer's opening checks: what a run must agree with before it delivers anything.

A consumer follows one table on one branch into one sink, all recorded in its checkpoint; a run
that names another is refused with the command that would move it. A mirror (KeyedSink) learns
its key and checks its target before the first batch. Each check reads what it is given; the
pipeline decides when (`Pipeline.open`: under the lease, the sink recorded once it opened).
"""

from __future__ import annotations

import shlex
from collections.abc import Callable

from pyiceberg.table import Table

from icetail.kernel.errors import BranchDroppedError, ConfigError
from icetail.monitor.engine.config import PipelineConfig
from icetail.monitor.engine.hints import reset_command
from icetail.monitor.engine.mirror_key import keyed_by_row_id, mirror_key
from icetail.reader.changes.read_setup import change_arrow_schema
from icetail.sinks.base import Sink
from icetail.sinks.keyed.contract import KeyedSink
from icetail.state.checkpoint import Checkpoint


def check_follows_table(config: PipelineConfig, checkpoint: Checkpoint) -> None:
    """A consumer follows the table it was created for; another table needs another consumer."""
    if (checkpoint.catalog, checkpoint.table) != (config.catalog, config.table):
        raise ConfigError(
            f"consumer {config.consumer_id!r} follows {checkpoint.catalog}.{checkpoint.table}, not "
            f"{config.catalog}.{config.table}; pick another --consumer"
        )


def check_branch(config: PipelineConfig, checkpoint: Checkpoint | None) -> None:
    """A consumer follows one branch: the one it was created with (main before schema 4).

    Its cursor is a snapshot of that branch's history; continuing it on another branch would
    deliver that branch's changes as if they followed the cursor.
    """
    consumer, branch = config.consumer_id, config.branch
    recorded = checkpoint.branch if checkpoint is not None else branch
    if recorded != branch:
        move = reset_command(config.state_url, consumer, "--branch", shlex.quote(branch))
        raise ConfigError(
            f"consumer {consumer!r} follows branch {recorded!r}, not {branch!r}; a consumer "
            f"follows one branch: run with --branch {shlex.quote(recorded)}, name another --consumer for branch "
            f"{branch!r}, or move this one with {move} (and --to earliest|latest|... to move the "
            "cursor too)"
        )


def recorded_sink(checkpoint: Checkpoint | None) -> str | None:
    """The sink the consumer's checkpoint names, if any."""
    return checkpoint.sink if checkpoint is not None else None


def check_sink(config: PipelineConfig, recorded: str | None, sink: str) -> None:
    """A consumer delivers to one sink: the first run records it once it opened, a later run
    must name the same (`sink`: the identity as recorded, see `Pipeline.sink_identity`).

    Otherwise a changed --sink would quietly continue from the cursor, so the new sink would
    miss everything before it and the old one everything after. A consumer from before
    schema version 2 has no sink recorded; its next run records its sink (under the lease).
    A sink that fails to open is never recorded.
    """
    consumer = config.consumer_id
    if recorded is not None and recorded != sink:
        move = reset_command(config.state_url, consumer, "--sink", shlex.quote(sink), "--to", "...")
        raise ConfigError(
            f"consumer {consumer!r} delivers to {recorded}, not {sink}; a consumer keeps one sink: "
            f"run with --sink {shlex.quote(recorded)}, name another --consumer for the new sink, or move this "
            f"one with {move} (--to earliest|latest|snapshot:ID|...)"
        )


def bind_keyed_sink(config: PipelineConfig, sink: Sink, load_table: Callable[[], Table]) -> tuple[str, ...] | None:
    """A mirror learns its key and checks its target before any batch; batches pair by that key.

    The key, or None for a sink that is not a mirror (KeyedSink); the table is loaded for a mirror only.
    """
    if not isinstance(sink, KeyedSink):
        return None
    if getattr(sink, "history", False) and not config.carry_over_removal:
        raise ConfigError(
            "a history sink keeps a version per change: with --keep-carry-over the rows a rewrite "
            "carries over unchanged (a compaction, an UPDATE that changes nothing) would become versions; "
            "drop --keep-carry-over"
        )
    table = load_table()
    key = mirror_key(table, None, config.identifier_columns)
    schema = change_arrow_schema(table, None, with_row_lineage=keyed_by_row_id(key))
    sink.bind(key, schema)
    return key


def branch_dropped(config: PipelineConfig, checkpoint: Checkpoint | None) -> BranchDroppedError:
    """The followed branch is gone under an existing consumer (dropped, or published and removed)."""
    cursor = checkpoint.cursor.snapshot_id if checkpoint is not None else None
    at = f"snapshot {cursor}" if cursor is not None else "before the first snapshot"
    branch, consumer = config.branch, config.consumer_id
    return BranchDroppedError(
        f"consumer {consumer!r}: branch {branch!r} of table {config.table} no longer exists (dropped, or "
        f"published and removed); the consumer delivered up to {at}: recreate the branch, or follow another with "
        f"{reset_command(config.state_url, consumer, '--branch', 'main', '--to', '...')} "
        "(--to latest|snapshot:ID|...) and run with --branch main"
    )
