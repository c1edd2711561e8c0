"""`icetail serve`: the long-running form (same arguments as `run`, or --config)."""

from __future__ import annotations

import argparse
import logging

from icetail.kernel.secrets import redact_text
from icetail.monitor.cli.run_cmd import check_state_folder, resolved_places
from icetail.monitor.service.config import build_service_config
from icetail.monitor.service.logs import configure_logging

log = logging.getLogger("icetail.serve")


def cmd_serve(args: argparse.Namespace) -> int:
    config = build_service_config(args)
    for pipeline in config.templates:  # a pattern's too: its tables are found once serving
        check_state_folder(pipeline)
    configure_logging(config.log_level)
    for pipeline in config.pipelines:  # the resolved places: a relative sqlite:/// path is easy to misplace
        log.info("consumer places", extra={"consumer": pipeline.consumer_id, **resolved_places(pipeline)})
    for pattern in config.patterns:
        where = {"namespace": pattern.namespace, "include": pattern.include, "exclude": list(pattern.exclude)}
        log.info("tables followed by pattern", extra={**where, "sink": redact_text(pattern.sink_template)})
    # the scheduler and the pipelines (pyiceberg, pyarrow, Spark) load once the configuration is checked
    from icetail.monitor.service.scheduler import Service

    return Service(config).run()


