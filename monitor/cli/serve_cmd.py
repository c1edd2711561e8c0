"""`icetail serve`: the long-running form (same arguments as `run`, or --config)."""

from __future__ import annotations

import argparse
import logging

from icetail.monitor.cli.run_cmd import add_pipeline_arguments, check_state_folder, resolved_places
from icetail.monitor.service.config import build_service_config
from icetail.monitor.service.logs import configure_logging
from icetail.monitor.service.scheduler import Service

log = logging.getLogger("icetail.serve")


def cmd_serve(args: argparse.Namespace) -> int:
    config = build_service_config(args)
    for pipeline in config.pipelines:
        check_state_folder(pipeline)
    configure_logging(config.log_level)
    for pipeline in config.pipelines:  # the resolved places: a relative sqlite:/// path is easy to misplace
        log.info("consumer places", extra={"consumer": pipeline.consumer_id, **resolved_places(pipeline)})
    return Service(config).run()


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    serve = subparsers.add_parser("serve", help="follow tables forever: scheduler, metrics, health endpoints")
    add_pipeline_arguments(serve)
    serve.add_argument("--interval", default=None, help="poll period, e.g. 5s, 500ms, 1m (default 5s)")
    serve.add_argument(
        "--metrics-host", default=None, help="default 0.0.0.0, every interface; 127.0.0.1: this machine only"
    )
    serve.add_argument("--metrics-port", type=int, default=None, help="default 9464; /metrics /healthz /readyz")
    serve.add_argument(
        "--max-failures",
        type=int,
        default=None,
        help="consecutive failures of a consumer before it stops: the process exits with one table, "
        "the others keep delivering with several (5)",
    )
    serve.add_argument("--shutdown-timeout", default=None, help="bound on a graceful stop (30s)")
    serve.add_argument("--log-level", default=None, help="DEBUG, INFO (default), WARNING, ERROR or CRITICAL")
    serve.set_defaults(func=cmd_serve)
