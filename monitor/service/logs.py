"""Structured logs: JSON lines when stderr is not a terminal, a readable line format when it is.

Every formatted line passes `redact_text`: a password in a URL or a driver's message never reaches
the log, whatever logger or `extra=` field carried it.
"""

from __future__ import annotations

import datetime
import json
import logging
import os
import sys
from typing import Any

from icetail.kernel.secrets import redact_text

_RESERVED = set(logging.LogRecord("", 0, "", 0, "", (), None).__dict__) | {"message", "asctime"}


class JsonFormatter(logging.Formatter):
    """One JSON object per event: time, level, logger, message and any `extra=` fields."""

    def format(self, record: logging.LogRecord) -> str:
        event: dict[str, Any] = {
            "ts": datetime.datetime.fromtimestamp(record.created, tz=datetime.timezone.utc).isoformat(),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        event.update({k: v for k, v in record.__dict__.items() if k not in _RESERVED})
        if record.exc_info:
            event["error"] = self.formatException(record.exc_info).splitlines()[-1]
        return redact_text(json.dumps(event, default=str))


class LineFormatter(logging.Formatter):
    """`HH:MM:SS level message key=value ...` for people at a terminal."""

    def format(self, record: logging.LogRecord) -> str:
        extras = " ".join(f"{k}={v}" for k, v in record.__dict__.items() if k not in _RESERVED)
        time = datetime.datetime.fromtimestamp(record.created).strftime("%H:%M:%S")
        line = f"{time} {record.levelname.lower():5} {record.getMessage()}"
        return redact_text(f"{line}  {extras}" if extras else line)


def configure_logging(level: str = "INFO", *, json_lines: bool | None = None) -> None:
    """Log to stderr; JSON lines unless stderr is a terminal (or `json_lines` says otherwise)."""
    use_json = (not sys.stderr.isatty()) if json_lines is None else json_lines
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if use_json else LineFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    for noisy in ("py4j", "apscheduler.executors.default", "apscheduler.scheduler"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    logging.getLogger("apscheduler.scheduler").addFilter(_SkippedTickFilter())


class _SkippedTickFilter(logging.Filter):
    """A tick skipped because the previous batch still runs is by design, not a warning."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "maximum number of running instances reached" not in record.getMessage()


class Py4jRootRecords(logging.Filter):
    """Drops what py4j logs on the root logger when the JVM's connection is lost (`logging.exception`
    with a traceback, which without a handler also prints as "ERROR:root:..."): the error raised next
    says what happened in one line (reader/spark/session_health.py)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.name == "root" and f"{os.sep}py4j{os.sep}" in record.pathname)


def quiet_py4j_root_records() -> None:
    """Install Py4jRootRecords on the root logger once (every command: run, changes, serve)."""
    root = logging.getLogger()
    if not any(isinstance(f, Py4jRootRecords) for f in root.filters):
        root.addFilter(Py4jRootRecords())
