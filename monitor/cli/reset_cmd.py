"""`icetail reset`: move a consumer's cursor, branch or sink (refused while a run holds it)."""

from __future__ import annotations

import argparse
import sys

from icetail.kernel.errors import ConfigError
from icetail.kernel.processes import lease_holder_is_dead
from icetail.kernel.secrets import redact_text
from icetail.monitor.engine.start_mode import parse_start
from icetail.sinks.urls import normalize_sink_url


def cmd_reset(args: argparse.Namespace) -> int:
    if args.to is None and args.sink is None and args.branch is None:
        raise ConfigError("reset needs --to POSITION, --sink URL, --branch NAME, or several of them")
    mode = None if args.to is None else parse_start(args.to, flag="--to")
    if mode is not None and mode.reads_full_snapshot:
        raise ConfigError("--to full is not a position; use earliest, latest, snapshot:ID or timestamp:T")
    sink = None if args.sink is None else normalize_sink_url(args.sink)
    # the store and the catalog are loaded once the arguments are checked
    from icetail.monitor.cli.status_cmd import cursor_text, existing_store, iso, not_in_store
    from icetail.monitor.engine.catalog import load_table, open_catalog
    from icetail.monitor.engine.startup import initial_cursor
    from icetail.monitor.planning.refs import table_on_branch

    with existing_store(args.state) as store:
        checkpoint = store.load(args.consumer)
        if checkpoint is None:
            raise not_in_store(args.consumer, args.state)
        lease = checkpoint.lease
        if lease is not None and checkpoint.lease_is_live() and lease_holder_is_dead(lease.owner):
            # a run killed on this host (SIGKILL, OOM): as `run` does, take over at once instead of
            # refusing for the rest of the TTL (chaos harness, issue 26: `reset --sink` after a SIGKILL)
            store.release_lease(args.consumer, lease.owner)
        cursor = None
        branch = args.branch or checkpoint.branch
        if mode is not None or args.branch is not None:
            # --to resolves on the history of the branch followed from now on, which must exist
            table = table_on_branch(load_table(open_catalog(checkpoint.catalog), checkpoint.table), branch)
        if mode is not None:
            cursor = initial_cursor(table.metadata, mode, checkpoint.table)
            if checkpoint.inflight is not None:
                store.abandon_batch(args.consumer, checkpoint.inflight.batch.batch_id)
            store.reset_cursor(args.consumer, cursor)
        if args.branch is not None and args.branch != checkpoint.branch:
            store.change_branch(args.consumer, args.branch)
        if sink is not None:
            store.change_sink(args.consumer, sink)
    if cursor is not None:
        where = cursor_text(cursor.snapshot_id, iso(cursor.timestamp_ms))
        print(f"consumer {args.consumer}: cursor reset to {where}", file=sys.stderr)
    if args.branch is not None:
        print(f"consumer {args.consumer}: follows branch {args.branch} from its cursor on", file=sys.stderr)
    if sink is not None:
        print(f"consumer {args.consumer}: delivers to {redact_text(sink)} from its cursor on", file=sys.stderr)
    return 0
