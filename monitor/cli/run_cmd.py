"""`icetail run`: follow a table into a sink from the command line, exactly once, until caught up."""

from __future__ import annotations

import argparse
import sys

from icetail.kernel.errors import ConfigError
from icetail.kernel.secrets import redact_text
from icetail.monitor.engine.config import PipelineConfig
from icetail.monitor.service.config import run_config
from icetail.state.urls import SqliteLocation, check_sqlite_folder, parse_store_url, store_place


def cmd_run(args: argparse.Namespace) -> int:
    if args.once and args.until_caught_up:
        raise ConfigError("--once and --until-caught-up exclude each other")
    config = run_config(args)
    check_state_folder(config)
    # the pipeline (pyiceberg, pyarrow, Spark) is loaded once every argument is checked
    from icetail.monitor.cli.progress import Progress, describe
    from icetail.monitor.engine.pipeline import Pipeline

    progress = Progress(None, label="delivering")
    try:
        with Pipeline(config, on_chunk=progress) as pipeline:
            outcomes = pipeline.run(once=args.once)
    finally:
        progress.close()
    print(places_line(config), file=sys.stderr)
    for outcome in outcomes:
        print(describe(outcome), file=sys.stderr)
    if not outcomes:
        print(f"consumer {config.consumer_id}: caught up, nothing to deliver", file=sys.stderr)
    return 0


def places_line(config: PipelineConfig) -> str:
    """Where the consumer's state and rows went, resolved: `sqlite:///x.db` is relative to the working
    directory (SQLAlchemy's convention), a sink path is made absolute."""
    places = resolved_places(config)
    return f"consumer {config.consumer_id}: state {places['state']}, sink {places['sink']}"


def check_state_folder(config: PipelineConfig) -> None:
    """A SQLite store's folder must exist (state/urls.py): refused before Spark or a sink starts."""
    location = parse_store_url(config.state_url)
    if isinstance(location, SqliteLocation):
        check_sqlite_folder(location)


def resolved_places(config: PipelineConfig) -> dict[str, str]:
    # no password of a URL is shown (a PostgreSQL state or sink)
    return {"state": store_place(config.state_url), "sink": redact_text(config.sink_target.normalized())}
