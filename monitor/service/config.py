"""`icetail serve` configuration: config file < ICETAIL_* environment < command-line flags.

The config file uses the flag names (dashes or underscores) as keys; a `tables:` list gives
several table/consumer pairs, each inheriting the top-level keys, or namespace patterns whose
tables are found at each poll (table_patterns.py).
"""

from __future__ import annotations

import argparse
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from icetail.kernel.errors import ConfigError, message_line
from icetail.kernel.extras import CONNECT, require
from icetail.kernel.secrets import redacted_repr
from icetail.kernel.settings import DEFAULT_SPARK_IDLE_STOP_SECONDS, ENGINES, FORMATS, VERIFY_MODES
from icetail.monitor.engine.config import PipelineConfig
from icetail.monitor.service.table_patterns import TablePattern, build_pattern, pattern_parts
from icetail.state.urls import parse_store_url

PIPELINE_KEYS = {
    "catalog": "catalog",
    "table": "table",
    "state": "state_url",
    "sink": "sink_url",
    "consumer": "consumer",
    "start": "start",
    "max_snapshots_per_batch": "max_snapshots_per_batch",
    "chunk_rows": "chunk_rows",
    "sink_commit_rows": "sink_commit_rows",
    "sink_commit_interval": "sink_commit_interval_seconds",
    "identifier_columns": "identifier_columns",
    "keep_carry_over": "keep_carry_over",
    "on_missing_cursor": "on_missing_cursor",
    "protect_cursor": "protect_cursor",
    "branch": "branch",
    "net": "net",
    "verify": "verify",
    "with_schema_id": "with_schema_id",
    "with_row_lineage": "with_row_lineage",
    "reconcile_partition_bytes": "reconcile_partition_bytes",
    "format": "output_format",
    "manifest_cache_entries": "manifest_cache_entries",
    "history_retention": "history_retention",
    "lease_ttl": "lease_ttl_seconds",
    "engine": "engine",
    "local_max_bytes": "local_max_bytes",
    "max_rows_per_batch": "max_rows_per_batch",
    "max_bytes_per_batch": "max_bytes_per_batch",
}
SERVICE_KEYS = (
    "interval",
    "metrics_host",
    "metrics_port",
    "max_failures",
    "shutdown_timeout",
    "log_level",
    "concurrent_tables",
    "spark_scheduler_mode",
    "spark_idle_stop",
)
INT_KEYS = {
    "concurrent_tables",
    "history_retention",
    "max_snapshots_per_batch",
    "chunk_rows",
    "sink_commit_rows",
    "metrics_port",
    "max_failures",
    "reconcile_partition_bytes",
    "manifest_cache_entries",
    "local_max_bytes",
    "max_rows_per_batch",
    "max_bytes_per_batch",
}
BOOL_KEYS = {"keep_carry_over", "protect_cursor", "net", "with_schema_id", "with_row_lineage"}
DURATION_KEYS = {"interval", "shutdown_timeout", "sink_commit_interval", "lease_ttl", "spark_idle_stop"}
LIST_KEYS = {"identifier_columns"}
SPARK_SCHEDULER_MODES = ("fair", "fifo")
CHOICE_KEYS = {
    "verify": VERIFY_MODES,
    "format": FORMATS,
    "spark_scheduler_mode": SPARK_SCHEDULER_MODES,
    "engine": ENGINES,
}
# Tables whose cycles may run at once by default: one scheduler thread each, up to this many.
# A thread holds little while it waits (its stack, a Py4J connection while a job runs); a
# running cycle holds its table's chunk in flight, so the bound caps the driver's memory, not idle tables.
MAX_DEFAULT_CONCURRENT_TABLES = 64
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
TRUE_WORDS = ("true", "yes", "on", "1")
FALSE_WORDS = ("false", "no", "off", "0")
DURATION_FORMS = "like 5s, 500ms, 2m or 1h"


@dataclass(frozen=True)
class ServiceConfig:
    pipelines: tuple[PipelineConfig, ...]
    # `tables:` entries naming tables by pattern: their tables are found at each poll (followed.py)
    patterns: tuple[TablePattern, ...] = ()
    interval_seconds: float = 5.0
    metrics_host: str = "0.0.0.0"
    metrics_port: int = 9464
    max_failures: int = 5  # consecutive failures of one consumer before the process exits non-zero
    shutdown_timeout_seconds: float = 30.0
    log_level: str = "INFO"
    # cycles that may run at once (scheduler threads); None: one per table, up to MAX_DEFAULT_CONCURRENT_TABLES
    concurrent_tables: int | None = None
    # Spark's scheduler mode on the session `serve` builds: "fair" (a pool per table) or "fifo";
    # None: FAIR with several tables, Spark's default (FIFO) with one
    spark_scheduler_mode: str | None = None
    # icetail's own Spark session, started by the first batch that needs Spark, is stopped after this
    # long with no batch on it (its JVM's memory back); a later big batch starts it again
    spark_idle_stop_seconds: float = DEFAULT_SPARK_IDLE_STOP_SECONDS

    def __repr__(self) -> str:
        return redacted_repr(self)  # URLs in it may hold a password

    @property
    def scheduler_threads(self) -> int:
        """Scheduler threads: every table's cycle can start when it is due, up to the bound."""
        if self.concurrent_tables is not None:
            return self.concurrent_tables
        if self.patterns:  # tables come as they are created: threads start on demand, up to the bound
            return MAX_DEFAULT_CONCURRENT_TABLES
        return max(1, min(len(self.pipelines), MAX_DEFAULT_CONCURRENT_TABLES))

    @property
    def templates(self) -> tuple[PipelineConfig, ...]:
        """Every entry's settings: the plain entries and each pattern's (its stores, its lease TTL)."""
        return (*self.pipelines, *(p.template for p in self.patterns))


def parse_duration(text: str | float | int) -> float:
    """`5s`, `500ms`, `2m`, `1h` or a number of seconds."""
    if isinstance(text, bool):
        raise ConfigError(f"duration {text!r} is not {DURATION_FORMS}")
    if isinstance(text, int | float):
        return float(text)
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*", str(text))
    if not match:
        raise ConfigError(f"duration {text!r} is not {DURATION_FORMS}")
    value, unit = float(match.group(1)), match.group(2) or "s"
    return value * {"ms": 0.001, "s": 1, "m": 60, "h": 3600}[unit]


def _normalize(raw: Mapping[str, Any], where: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in raw.items():
        name = str(key).replace("-", "_")
        if name not in PIPELINE_KEYS and name not in SERVICE_KEYS and name != "tables":
            allowed = ", ".join(sorted([*PIPELINE_KEYS, *SERVICE_KEYS, "tables"]))
            raise ConfigError(f"{where}: unknown key {key!r}; allowed keys: {allowed}")
        out[name] = value
    return out


def _coerce(name: str, value: Any, where: str) -> Any:
    """`value` of key `name` as its type; ConfigError naming `where` and the accepted values.

    Every layer (file, environment, flag) is coerced on its own, so the message names the
    source that holds the bad value. Nothing is guessed: `ture` is not false, `1.5` is not 1.
    """
    if value is None:
        return None
    if name in INT_KEYS:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, str) and re.fullmatch(r"\s*[+-]?\d+\s*", value):
            return int(value)
        raise ConfigError(f"{where}: {name} must be an integer, got {value!r}")
    if name in BOOL_KEYS:
        if isinstance(value, bool):
            return value
        word = str(value).strip().lower() if isinstance(value, str | int) else None
        if word in TRUE_WORDS or word in FALSE_WORDS:
            return word in TRUE_WORDS
        raise ConfigError(
            f"{where}: {name} must be true or false (also accepted: {'/'.join(TRUE_WORDS[1:])}, "
            f"{'/'.join(FALSE_WORDS[1:])}), got {value!r}"
        )
    if name in DURATION_KEYS:
        try:
            return parse_duration(value)
        except ConfigError as exc:
            raise ConfigError(f"{where}: {name} {exc}") from None
    if name in LIST_KEYS:
        items = value if isinstance(value, list | tuple) else str(value).split(",")
        if not all(isinstance(c, str) for c in items):
            raise ConfigError(f"{where}: {name} must be column names (a list or a,b), got {value!r}")
        columns = tuple(c.strip() for c in items if c.strip())
        if not columns:
            raise ConfigError(f"{where}: {name} needs at least one column name, got {value!r}")
        return columns
    if name == "tables":
        return value
    if name in CHOICE_KEYS:
        if not isinstance(value, str) or value.strip().lower() not in CHOICE_KEYS[name]:
            raise ConfigError(f"{where}: {name} must be one of {', '.join(CHOICE_KEYS[name])}, got {value!r}")
        return value.strip().lower()
    if not isinstance(value, str):
        raise ConfigError(f"{where}: {name} must be a string, got {value!r}; quote it")
    return value


def _coerce_all(values: Mapping[str, Any], where: Callable[[str], str]) -> dict[str, Any]:
    return {k: _coerce(k, v, where(k)) for k, v in values.items()}


def _unreadable(exc: OSError | UnicodeDecodeError) -> str:
    """Why the config file cannot be read, and what to name instead."""
    if isinstance(exc, FileNotFoundError):
        return "does not exist"
    if isinstance(exc, IsADirectoryError):
        return "is a directory; name a YAML file"
    if isinstance(exc, UnicodeDecodeError):
        return f"is not UTF-8 text (byte {exc.start} cannot be decoded); name a YAML file saved as UTF-8"
    return f"cannot be read: {exc.strerror or exc}"


def load_file(path: str | None) -> dict[str, Any]:
    """The config file's keys, normalized and coerced (a `tables:` entry is coerced later)."""
    if not path:
        return {}
    try:
        with open(path, encoding="utf-8") as stream:
            text = stream.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"--config {path} {_unreadable(exc)}") from exc
    import yaml  # only for a config file that exists: flags alone need no YAML parser

    try:
        raw = yaml.safe_load(text) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"--config {path} is not valid YAML: {message_line(exc)}") from exc
    if not isinstance(raw, dict):
        raise ConfigError(f"--config {path} must hold a mapping of keys")
    return _coerce_all(_normalize(raw, path), lambda key: path)


def from_environment(environ: Mapping[str, str]) -> dict[str, Any]:
    """ICETAIL_CATALOG, ICETAIL_TABLE, ICETAIL_STATE, ICETAIL_SINK, ICETAIL_INTERVAL, ..."""
    out: dict[str, Any] = {}
    for name in [*PIPELINE_KEYS, *SERVICE_KEYS]:
        variable = "ICETAIL_" + name.upper()
        value = environ.get(variable)
        if value is not None and value != "":
            out[name] = _coerce(name, value, variable)
    return out


def build_service_config(args: argparse.Namespace, environ: Mapping[str, str] | None = None) -> ServiceConfig:
    """The one loader of `run` and `serve`: config file < ICETAIL_* environment < flags.

    Each value is checked where it comes from, so a bad one is refused naming its source.
    """
    config_path = getattr(args, "config", None)
    environ = os.environ if environ is None else environ
    remote = environ.get("SPARK_REMOTE")
    if remote:  # the session starts later, after the store and the sink: its client is checked now
        require(CONNECT, f"SPARK_REMOTE={remote} (a Spark Connect session)")
    layered = load_file(config_path)
    layered.update(from_environment(environ))
    for name in SERVICE_KEYS:
        value = getattr(args, name, None)
        if value is not None:
            layered[name] = _coerce(name, value, "--" + name.replace("_", "-"))
    tables = layered.pop("tables", None) or [{}]
    if not isinstance(tables, list):
        raise ConfigError("config key 'tables' must be a list of mappings")
    pipelines = []
    top = {k: v for k, v in layered.items() if k in PIPELINE_KEYS}
    patterns = []
    for i, entry in enumerate(tables):
        if not isinstance(entry, dict):
            raise ConfigError(f"tables[{i}] must be a mapping")
        where = f"{config_path}: tables[{i}]" if config_path else f"tables[{i}]"
        pattern_keys, entry = pattern_parts(entry)
        own = {}
        for key, value in _normalize(entry, where).items():
            if key not in PIPELINE_KEYS:
                raise ConfigError(f"{where}: key {key!r} applies to the whole service; move it to the top level")
            own[key] = _coerce(key, value, where)
        merged = {**top, **own}
        base = {PIPELINE_KEYS[k]: v for k, v in merged.items() if k != "keep_carry_over"}
        if "keep_carry_over" in merged:
            base["carry_over_removal"] = not merged["keep_carry_over"]
        if pattern_keys and "table" in own:
            raise ConfigError(f"{where}: an entry names one table or a namespace pattern, not both; drop table")
        if pattern_keys:
            patterns.append(_pattern(args, pattern_keys, merged, base, where))
            continue
        pipeline = config_from_args(args, base)
        # URLs are checked before anything starts (metrics server, Spark, a first cycle), as `run` does
        parse_store_url(pipeline.state_url)
        _ = pipeline.sink_target  # parsed as the configuration was built: refused here if unusable
        pipelines.append(pipeline)
    consumers = [p.consumer_id for p in pipelines]
    if len(set(consumers)) != len(consumers):
        raise ConfigError(f"two tables share a consumer id ({consumers}); give each a distinct consumer")
    keys = [p.key for p in patterns]
    if len(set(keys)) != len(keys):
        raise ConfigError("two tables entries name the same pattern; merge them or give each its own consumer")
    port = layered.get("metrics_port", 9464)
    if not 0 <= port <= 65535:
        raise ConfigError(f"metrics_port must be between 0 and 65535, got {port}")
    max_failures = layered.get("max_failures", 5)
    if max_failures < 1:
        raise ConfigError(f"max_failures must be >= 1, got {max_failures}")
    log_level = str(layered.get("log_level", "INFO")).upper()
    if log_level not in LOG_LEVELS:
        raise ConfigError(f"log_level {log_level!r} is not one of {', '.join(LOG_LEVELS)}")
    interval = layered.get("interval", 5.0)
    if interval <= 0:
        raise ConfigError(f"interval must be positive, got {interval!r}")
    idle_stop = layered.get("spark_idle_stop", DEFAULT_SPARK_IDLE_STOP_SECONDS)
    if idle_stop <= 0:
        raise ConfigError(f"spark_idle_stop must be positive, e.g. 5m, got {idle_stop!r}")
    concurrent = layered.get("concurrent_tables")
    if concurrent is not None and concurrent < 1:
        raise ConfigError(f"concurrent_tables must be >= 1, got {concurrent}; leave it out for one per table")
    return ServiceConfig(
        pipelines=tuple(pipelines),
        patterns=tuple(patterns),
        interval_seconds=interval,
        metrics_host=str(layered.get("metrics_host", "0.0.0.0")),
        metrics_port=port,
        max_failures=max_failures,
        shutdown_timeout_seconds=layered.get("shutdown_timeout", 30.0),
        log_level=log_level,
        concurrent_tables=concurrent,
        spark_scheduler_mode=layered.get("spark_scheduler_mode"),
        spark_idle_stop_seconds=idle_stop,
    )


def _pattern(
    args: argparse.Namespace, keys: Mapping[str, Any], merged: Mapping[str, Any], base: dict[str, Any], where: str
) -> TablePattern:
    """A `tables:` entry naming tables by pattern (table_patterns.py); flags override it as a plain entry."""
    if args.table:
        raise ConfigError(f"--table names one table and {where} a namespace pattern; drop one of them")
    templates = {"sink": args.sink or merged.get("sink"), "consumer": args.consumer or merged.get("consumer")}
    bare = argparse.Namespace(**{**vars(args), "sink": None, "consumer": None})
    return build_pattern(keys, templates, lambda sample: config_from_args(bare, {**base, **sample}), where)


def run_config(args: argparse.Namespace, environ: Mapping[str, str] | None = None) -> PipelineConfig:
    """`icetail run`'s one pipeline, read by the same loader as `serve` (service keys are checked too)."""
    config = build_service_config(args, environ)
    pipelines = config.pipelines
    if config.patterns:
        raise ConfigError(
            f"`icetail run` follows one table, but the configuration names tables by pattern "
            f"(namespace {config.patterns[0].namespace!r}); use `icetail serve` for a pattern"
        )
    if len(pipelines) != 1:
        consumers = ", ".join(p.consumer_id for p in pipelines)
        raise ConfigError(
            f"`icetail run` follows one table, but the configuration lists {len(pipelines)} ({consumers}); "
            "use `icetail serve` for several, or a config file with one table"
        )
    return pipelines[0]


def _duration_flag(value: str | None, flag: str) -> float | None:
    if value is None:
        return None
    try:
        return parse_duration(value)
    except ConfigError as exc:
        raise ConfigError(f"{flag} {exc}") from None


def config_from_args(args: argparse.Namespace, base: dict[str, Any] | None = None) -> PipelineConfig:
    """A PipelineConfig from `base` (config file/env) overridden by the flags that were given."""
    values: dict[str, Any] = dict(base or {})
    flags = {
        "catalog": args.catalog,
        "table": args.table,
        "state_url": args.state,
        "sink_url": args.sink,
        "consumer": args.consumer,
        "start": args.start,
        "max_snapshots_per_batch": args.max_snapshots_per_batch,
        "chunk_rows": args.chunk_rows,
        "sink_commit_rows": getattr(args, "sink_commit_rows", None),
        "sink_commit_interval_seconds": _duration_flag(
            getattr(args, "sink_commit_interval", None), "--sink-commit-interval"
        ),
        "lease_ttl_seconds": _duration_flag(getattr(args, "lease_ttl", None), "--lease-ttl"),
        "identifier_columns": args.identifier_columns,
        "carry_over_removal": None if args.keep_carry_over is None else not args.keep_carry_over,
        "on_missing_cursor": args.on_missing_cursor,
        "protect_cursor": args.protect_cursor,
        "branch": getattr(args, "branch", None),
        "net": getattr(args, "net", None),
        "verify": getattr(args, "verify", None),
        "with_schema_id": getattr(args, "with_schema_id", None),
        "with_row_lineage": getattr(args, "with_row_lineage", None),
        "reconcile_partition_bytes": getattr(args, "reconcile_partition_bytes", None),
        "output_format": getattr(args, "output_format", None),
        "manifest_cache_entries": getattr(args, "manifest_cache_entries", None),
        "engine": getattr(args, "engine", None),
        "max_rows_per_batch": getattr(args, "max_rows_per_batch", None),
        "max_bytes_per_batch": getattr(args, "max_bytes_per_batch", None),
        "local_max_bytes": getattr(args, "local_max_bytes", None),
    }
    values.update({k: v for k, v in flags.items() if v is not None})
    missing = [k for k in ("catalog", "table", "state_url", "sink_url") if not values.get(k)]
    if missing:
        names = ", ".join("--" + m.replace("_url", "").replace("_", "-") for m in missing)
        raise ConfigError(f"missing {names}: give them as flags, in --config or as ICETAIL_* variables")
    try:
        return PipelineConfig(**values)
    except TypeError as exc:
        raise ConfigError(f"bad pipeline configuration: {exc}") from exc
