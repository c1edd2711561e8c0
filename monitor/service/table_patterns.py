"""A `tables:` entry that names tables by pattern: `{namespace: sales, include: "orders_*", exclude: ...}`.

Each table of the namespace whose name matches `include` and none of `exclude` (shell-style globs,
`fnmatch.fnmatchcase`: case-sensitive, `*`, `?` and `[...]`, matched against the name within the
namespace) is followed as if it had an entry of its own with the pattern entry's other keys. Its
sink and consumer come from templates: `{table}` and `{namespace}` in the sink URL and the consumer
are replaced per table. Checked here, with no catalog: the templates' placeholders, and that a sink
which would write every matched table into one place (a JSONL file, an Iceberg or PostgreSQL table,
stdout) names `{table}`; a parquet folder may be shared, as each chunk file carries its consumer id.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Any

from icetail.kernel.errors import ConfigError
from icetail.kernel.names import CONSUMER_ID_FORM, is_consumer_id
from icetail.kernel.secrets import redact_text, redacted_repr
from icetail.monitor.engine.config import PipelineConfig
from icetail.sinks.urls import parse_sink_url

PATTERN_KEYS = ("namespace", "include", "exclude")
PLACEHOLDERS = ("table", "namespace")
_PLACEHOLDER = re.compile(r"\{([^{}]*)\}")
# sink kinds that write every table given them into one place: a pattern's sink must name {table}
ONE_PLACE_SINKS = {
    "jsonl": "jsonl:///out/{table}.jsonl",
    "iceberg": "iceberg://CATALOG/NS.{table}_changes",
    "postgresql": "postgresql://HOST/DB?table=SCHEMA.{table}",
    "stdout": "parquet:///out or jsonl:///out/{table}.jsonl",
}
SAMPLE_TABLE = "t"  # the name the templates are checked with


@dataclass(frozen=True)
class TablePattern:
    """Tables of one namespace followed by name; `template` holds the entry's other settings."""

    namespace: str
    include: str
    exclude: tuple[str, ...]
    sink_template: str
    consumer_template: str | None  # None: each table's default id, CATALOG.NAMESPACE.TABLE
    template: PipelineConfig  # the settings, checked with the table SAMPLE_TABLE

    def __repr__(self) -> str:
        return redacted_repr(self)  # URLs in it may hold a password

    @property
    def catalog(self) -> str:
        return self.template.catalog

    @property
    def key(self) -> str:
        """The pattern's name in a configuration's identity (replicas of one configuration share it)."""
        parts = (self.catalog, self.namespace, self.include, *self.exclude, self.consumer_template or "")
        return "pattern:" + "\x1f".join(parts)

    def matches(self, name: str) -> bool:
        """Whether the table `name` (within the namespace) is followed: included and not excluded."""
        return fnmatchcase(name, self.include) and not any(fnmatchcase(name, e) for e in self.exclude)

    def pipeline(self, name: str) -> PipelineConfig:
        """The table `name`'s own settings; ConfigError if its name makes no valid consumer id, or is
        not one plain name (it fills the sink's path: `..` or a separator would write elsewhere)."""
        if not is_consumer_id(name):
            raise ConfigError(
                f"table {self.namespace}.{name!r} is not followed by a pattern: its name fills the sink and "
                f"consumer templates and must be {CONSUMER_ID_FORM}; follow it with its own table entry"
            )
        consumer = None if self.consumer_template is None else fill(self.consumer_template, self.namespace, name)
        return dataclasses.replace(
            self.template,
            table=f"{self.namespace}.{name}",
            sink_url=fill(self.sink_template, self.namespace, name),
            consumer=consumer,
        )

def pattern_parts(entry: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """A `tables:` entry split into its pattern keys and the rest (no pattern keys: a plain entry)."""
    pattern = {str(k): v for k, v in entry.items() if str(k) in PATTERN_KEYS}
    rest = {k: v for k, v in entry.items() if str(k) not in PATTERN_KEYS}
    return pattern, rest


def build_pattern(
    keys: Mapping[str, Any],
    templates: Mapping[str, str | None],
    build: Callable[[dict[str, Any]], PipelineConfig],
    where: str,
) -> TablePattern:
    """The pattern of an entry: `keys` its namespace/include/exclude, `templates` its `sink` and
    `consumer` (with placeholders), `build` the entry's PipelineConfig from table, sink_url and
    consumer (the other settings are the entry's): called with the sample table to check them."""
    if "namespace" not in keys:
        raise ConfigError(f"{where}: include/exclude need a namespace: {{namespace: NS, include: 'orders_*'}}")
    namespace = _text(keys["namespace"], "namespace", where)
    include = _text(keys.get("include", "*"), "include", where)
    raw_exclude = keys.get("exclude") or ()
    excludes = raw_exclude if isinstance(raw_exclude, list | tuple) else [raw_exclude]
    exclude = tuple(_text(e, "exclude", where) for e in excludes)
    sink, consumer = templates.get("sink") or "", templates.get("consumer")
    for name, text in (("sink", sink), ("consumer", consumer or "")):
        unknown = [p for p in _PLACEHOLDER.findall(text) if p not in PLACEHOLDERS]
        if unknown:
            raise ConfigError(
                f"{where}: {name} has the placeholder {{{unknown[0]}}}; a pattern's placeholders are {{table}} and "
                "{namespace}"
            )
    if consumer is not None and "{table}" not in consumer:
        raise ConfigError(
            f"{where}: every table the pattern matches would share consumer {consumer!r}; put {{table}} in it, "
            f"e.g. consumer: {consumer}-{{table}}, or leave it out for CATALOG.NAMESPACE.TABLE"
        )
    if sink:
        _check_sink(sink, namespace, where)
    sample = {
        "table": f"{namespace}.{SAMPLE_TABLE}",
        "sink_url": fill(sink, namespace, SAMPLE_TABLE) or None,
        "consumer": None if consumer is None else fill(consumer, namespace, SAMPLE_TABLE),
    }
    try:
        template = build({k: v for k, v in sample.items() if v is not None})
    except ConfigError as exc:
        raise ConfigError(f"{where}: {exc}") from None
    return TablePattern(namespace, include, exclude, sink or template.sink_url, consumer, template)


def fill(template: str, namespace: str, name: str) -> str:
    """`template` with {table} and {namespace} replaced."""
    return template.replace("{table}", name).replace("{namespace}", namespace)


def _check_sink(sink: str, namespace: str, where: str) -> None:
    """The sink template is a valid sink URL once filled, and names {table} if its kind would mix tables."""
    filled = fill(sink, namespace, SAMPLE_TABLE)
    try:
        kind = parse_sink_url(filled).scheme
    except ConfigError as exc:
        raise ConfigError(f"{where}: {exc}") from None
    if kind in ONE_PLACE_SINKS and "{table}" not in sink:
        raise ConfigError(
            f"{where}: sink {redact_text(sink)} would write every table the pattern matches into one {kind} target; "
            f"put {{table}} in it, e.g. {ONE_PLACE_SINKS[kind]}"
        )


def _text(value: Any, name: str, where: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(f"{where}: {name} must be a non-empty string, got {value!r}")
    return value.strip()
