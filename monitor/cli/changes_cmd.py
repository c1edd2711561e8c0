"""`icetail changes` and `icetail plan`: one range, read once, no state.

What needs only the arguments is checked here, before the read path (pyiceberg, pyarrow, Spark)
is imported: a bad bound or flag is answered in milliseconds (changes_read.py does the rest).
"""

from __future__ import annotations

import argparse
import datetime
from typing import TYPE_CHECKING

from icetail.kernel.errors import ConfigError
from icetail.kernel.settings import parse_instant, verify_mode_for_read
from icetail.monitor.cli.output_checks import check_output_writable
from icetail.monitor.engine.range_bounds import RangeBounds

if TYPE_CHECKING:
    from pyiceberg.table import Table


def _bounds(args: argparse.Namespace) -> RangeBounds:
    """The range the flags select: by snapshot id, tag or commit time (one per end), on --branch's history."""
    for end in ("from", "to"):
        given = [
            f"--{end}-{kind}" for kind in ("snapshot", "tag", "timestamp") if getattr(args, f"{end}_{kind}") is not None
        ]
        if len(given) > 1:
            raise ConfigError(f"{' and '.join(given)} both bound the {end}-end of the range; give one of them")
    return RangeBounds(
        from_snapshot_id_exclusive=args.from_snapshot,
        to_snapshot_id_inclusive=args.to_snapshot,
        from_timestamp_inclusive=_instant(args.from_timestamp, "--from-timestamp"),
        to_timestamp_inclusive=_instant(args.to_timestamp, "--to-timestamp"),
        from_tag=args.from_tag,
        to_tag=args.to_tag,
        branch=args.branch,
    )


def _instant(raw: str | None, flag: str) -> datetime.datetime | None:
    return parse_instant(raw, flag) if raw is not None else None


def cmd_changes(args: argparse.Namespace) -> int:
    """Everything that needs no data is checked before Spark starts; an empty range never starts it."""
    bounds = _bounds(args)
    check_output_writable(args.output)
    verify_mode_for_read(args.verify, args.row_filter, "--verify")
    if args.net and args.keep_carry_over:
        raise ConfigError("net changes always cancel carry-over rows; drop --keep-carry-over (carry_over_removal)")
    table = _table(args)
    from icetail.monitor.cli.changes_read import write_changes

    return write_changes(args, bounds, table)


def cmd_plan(args: argparse.Namespace) -> int:
    bounds = _bounds(args)
    table = _table(args)
    from icetail.monitor.cli.changes_read import print_plan

    return print_plan(args, bounds, table)


def _table(args: argparse.Namespace) -> Table:
    """The table, loaded before the read path is: an unknown catalog or table costs pyiceberg only."""
    from icetail.monitor.engine.catalog import load_table, open_catalog

    return load_table(open_catalog(args.catalog), args.table)
