"""The worked examples that end each subcommand's `--help` (argparse epilogs, printed as written)."""

from __future__ import annotations

import argparse

EXAMPLES: dict[str, str] = {
    "changes": """\
examples:
  # every change on main so far, as JSON lines on stdout (the default; --output names a file)
  icetail changes --catalog prod --table db.orders

  # the changes after snapshot 123 up to tag v2, to parquet, DELETE/INSERT pairs as updates
  icetail changes --catalog prod --table db.orders --from-snapshot 123 --to-tag v2 \\
      --identifier-columns order_id --output changes.parquet

  # one day's net effect per row, two data columns only
  icetail changes --catalog prod --table db.orders --net --identifier-columns order_id \\
      --from-timestamp 2026-01-01T00:00:00 --to-timestamp 2026-01-01T23:59:59 \\
      --columns order_id,amount --output day.jsonl
""",
    "plan": """\
examples:
  # what a read of the whole history would do: snapshots, tasks, files, splits
  icetail plan --catalog prod --table db.orders

  # the same for one tag range on a branch, as JSON
  icetail plan --catalog prod --table db.orders --branch audit --from-tag staged --json
""",
    "run": """\
examples:
  # deliver everything not yet delivered to a parquet folder, then exit
  icetail run --catalog prod --table db.orders --state sqlite:///state.db \
      --sink parquet:///data/orders-changes

  # a new consumer that skips the history (starts at the current snapshot), one batch per run,
  # into an Iceberg table, DELETE/INSERT pairs as updates
  icetail run --catalog prod --table db.orders --state sqlite:///state.db --start latest --once \\
      --identifier-columns order_id --sink iceberg://prod/db.orders_changes

  # the same settings from a file (ICETAIL_* variables and flags override it)
  icetail run --config icetail.yaml
""",
    "serve": """\
examples:
  # follow one table forever, polling every second; metrics on :9464/metrics
  icetail serve --catalog prod --table db.orders --state sqlite:///state.db \\
      --sink parquet:///data/orders-changes --interval 1s

  # several tables from a file, logs at debug level (JSON lines when stderr is not a terminal)
  icetail serve --config icetail.yaml --log-level DEBUG
""",
    "status": """\
examples:
  # one line per consumer: cursor, lag, batch in flight
  icetail status --state sqlite:///state.db

  # one consumer, machine-readable
  icetail status --state postgresql://icetail@db/icetail --consumer prod.db.orders --json
""",
    "reset": """\
examples:
  # deliver again from the table's first snapshot
  icetail reset --state sqlite:///state.db --consumer prod.db.orders --to earliest

  # move the cursor to snapshot 123 (the next run delivers what follows it), into a new sink
  icetail reset --state sqlite:///state.db --consumer prod.db.orders --to snapshot:123 \\
      --sink parquet:///data/orders-v2

  # follow the audit branch from its head on
  icetail reset --state sqlite:///state.db --consumer prod.db.orders --branch audit --to latest
""",
    "demo": """\
examples:
  # a local warehouse in ./.icetail-demo, followed and printed (about a minute)
  icetail demo

  # somewhere else, e.g. to keep the working directory clean
  icetail demo --dir /tmp/icetail-demo
""",
}


def add_examples(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """End each subcommand's help with its examples, printed as written (the option help is still wrapped)."""
    for name, parser in subparsers.choices.items():
        if name not in EXAMPLES:  # tests/unit/cli/test_cli_help.py fails for a command without examples
            continue
        parser.epilog = EXAMPLES[name]
        parser.formatter_class = argparse.RawDescriptionHelpFormatter
