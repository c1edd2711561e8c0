"""Options of the `icetail` Spark data source, parsed into frozen values with one-line errors.

Spark hands options over as a case-insensitive string map; every option is checked here, on the
driver, so a typo fails at `load()` naming the option and what it accepts.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from icetail.kernel.errors import ConfigError
from icetail.kernel.settings import MAIN_BRANCH, parse_instant
from icetail.monitor.engine.start_mode import StartMode, parse_start
from icetail.monitor.engine.verify import VerifyMode, verify_mode_with_filter
from icetail.reader.split.row_filter import parse_row_filter

CATALOG_PROPERTY_PREFIX = "catalog."  # `catalog.uri`, `catalog.warehouse`, ...: pyiceberg catalog properties
BATCH_OPTIONS = (
    "catalog",
    "table",
    "from-snapshot",
    "to-snapshot",
    "identifier-columns",
    "branch",
    "from-tag",
    "to-tag",
    "from-timestamp",
    "to-timestamp",
    "startingtimestamp",  # Delta's change data feed names (Spark lower-cases option keys)
    "endingtimestamp",
    "net",
    "with-schema-id",
    "with-row-lineage",
    "verify",
    "filter",
    # Spark 4.2's changelog read options (`spark.read.changes`), where they mean what icetail does
    "startingversion",
    "endingversion",
    "startingboundinclusive",
    "endingboundinclusive",
    "deduplicationmode",
    "computeupdates",
)
STREAM_OPTIONS = (
    "catalog",
    "table",
    "identifier-columns",
    "starting",
    "startingtimestamp",  # Delta's name for a stream's start: the snapshots committed at or after it
    "max-snapshots-per-trigger",
    # rate limits inside a snapshot (spark_source/limits.py): Delta's names, and icetail's spelling
    "maxrowspertrigger",
    "max-rows-per-trigger",
    "maxfilespertrigger",
    "max-files-per-trigger",
    "maxbytespertrigger",
    "max-bytes-per-trigger",
    "branch",
    "with-schema-id",
    "with-row-lineage",
    "verify",
    "filter",
)
STREAM_STARTS = ("earliest", "latest", "snapshot:ID", "timestamp:ISO8601", "tag:NAME")


@dataclass(frozen=True)
class TableOptions:
    """Which table, and the catalog properties given as options (over pyiceberg's configuration)."""

    catalog: str
    table: str
    catalog_properties: tuple[tuple[str, str], ...] = ()
    identifier_columns: tuple[str, ...] | None = None
    branch: str = MAIN_BRANCH  # the history read: its head is the current snapshot
    with_schema_id: bool = False  # add `_schema_id`, the schema id of each row's commit snapshot
    with_row_lineage: bool = False  # v3 tables: `_row_id` and `_last_updated_sequence_number` columns
    verify: VerifyMode = VerifyMode.WARN  # check each snapshot against its summary, in the task reading it
    row_filter: str | None = None  # `filter`: the changes of the rows it selects (reader/split/row_filter.py)


@dataclass(frozen=True)
class BatchOptions:
    source: TableOptions
    from_snapshot_id_exclusive: int | None = None
    to_snapshot_id_inclusive: int | None = None
    from_tag: str | None = None  # exclusive, like from-snapshot
    to_tag: str | None = None  # inclusive, like to-snapshot
    from_timestamp_inclusive_ms: int | None = None  # commits at or after it (Delta's startingTimestamp)
    to_timestamp_inclusive_ms: int | None = None  # commits at or before it (Delta's endingTimestamp)
    net: bool = False  # the range's net changes (batch only: a stream's micro-batches depend on trigger timing)
    # Spark's `startingVersion` (inclusive by default): the range starts with this snapshot's changes
    from_snapshot_id_inclusive: int | None = None
    from_timestamp_exclusive_ms: int | None = None  # `startingTimestamp` with `startingBoundInclusive=false`
    carry_over_removal: bool = True  # Spark's `deduplicationMode=none` keeps carry-over rows


@dataclass(frozen=True)
class TriggerLimits:
    """At most about this many change rows, data files, data file bytes per micro-batch (None: no limit)."""

    max_rows: int | None = None
    max_files: int | None = None
    max_bytes: int | None = None

    @property
    def any(self) -> bool:
        return (self.max_rows, self.max_files, self.max_bytes) != (None, None, None)


@dataclass(frozen=True)
class StreamOptions:
    source: TableOptions
    starting: StartMode
    max_snapshots_per_trigger: int | None = None
    limits: TriggerLimits = TriggerLimits()


# each end of a batch range: at most one of these (the Delta name is an alias of the timestamp,
# Spark's `startingVersion`/`endingVersion` of the snapshot id)
RANGE_END_OPTIONS = {
    "from": ("from-snapshot", "from-tag", "from-timestamp", "startingtimestamp", "startingversion"),
    "to": ("to-snapshot", "to-tag", "to-timestamp", "endingtimestamp", "endingversion"),
}
_TIMESTAMP_OPTIONS = {"from": ("from-timestamp", "startingtimestamp"), "to": ("to-timestamp", "endingtimestamp")}
_DISPLAY = {
    "startingtimestamp": "startingTimestamp",
    "endingtimestamp": "endingTimestamp",
    "startingversion": "startingVersion",
    "endingversion": "endingVersion",
    "startingboundinclusive": "startingBoundInclusive",
    "endingboundinclusive": "endingBoundInclusive",
    "deduplicationmode": "deduplicationMode",
    "computeupdates": "computeUpdates",
}
DEDUPLICATION_MODES = ("none", "dropCarryovers", "netChanges")  # Spark's ChangelogContext.DeduplicationMode


def parse_batch_options(options: Mapping[str, str]) -> BatchOptions:
    values = _lowered(options, BATCH_OPTIONS, "spark.read")
    for names in RANGE_END_OPTIONS.values():
        given = [f"'{_DISPLAY.get(name, name)}'" for name in names if name in values]
        if len(given) > 1:
            raise ConfigError(f"options {' and '.join(given)} exclude each other; give one")
    starting_inclusive = _spark_bound_inclusive(values, "from")
    ending_inclusive = _spark_bound_inclusive(values, "to")
    from_snapshot = _snapshot_id(values, "from-snapshot")
    from_snapshot_inclusive = _snapshot_id(values, "startingversion", "startingVersion")
    if from_snapshot_inclusive is not None and not starting_inclusive:
        from_snapshot, from_snapshot_inclusive = from_snapshot_inclusive, None
    from_timestamp = range_timestamp_ms(values, "from")
    from_timestamp_exclusive = None
    if from_timestamp is not None and not starting_inclusive:
        from_timestamp, from_timestamp_exclusive = None, from_timestamp
    to_snapshot = _snapshot_id(values, "to-snapshot")
    ending = _snapshot_id(values, "endingversion", "endingVersion")
    if ending is not None and ending_inclusive:
        to_snapshot = ending  # the exclusive form is pinned by parse_any_options
    to_timestamp = range_timestamp_ms(values, "to")
    net, carry_over_removal = _deduplication(values)
    return BatchOptions(
        _table_options(values),
        from_snapshot,
        to_snapshot,
        _name(values, "from-tag"),
        _name(values, "to-tag"),
        from_timestamp,
        to_timestamp,
        net,
        from_snapshot_inclusive,
        from_timestamp_exclusive,
        carry_over_removal,
    )


def _spark_bound_inclusive(values: Mapping[str, str], end: str) -> bool:
    """Spark's `startingBoundInclusive` / `endingBoundInclusive` (default true), which only bound
    the ends given by Spark's names: `startingVersion`/`endingVersion`, `startingTimestamp`/`endingTimestamp`.

    The to-end's exclusive form is read where the end is pinned (`parse_any_options`).
    """
    option = "startingboundinclusive" if end == "from" else "endingboundinclusive"
    if option not in values:
        return True
    spark_names = ("startingversion", "startingtimestamp") if end == "from" else ("endingversion", "endingtimestamp")
    if not any(name in values for name in spark_names):
        raise ConfigError(
            f"option {_DISPLAY[option]!r} bounds {' or '.join(repr(_DISPLAY[n]) for n in spark_names)}, which is not "
            "given; icetail's own from-/to- options say their bounds in their names"
        )
    return _boolean(values, option, _DISPLAY[option])


def _deduplication(values: Mapping[str, str]) -> tuple[bool, bool]:
    """(net, carry_over_removal) from `net` or Spark's `deduplicationMode`; `computeUpdates` checked."""
    net = _boolean(values, "net")
    updates = values.get("computeupdates")
    if updates is not None and not _boolean(values, "computeupdates", "computeUpdates"):
        raise ConfigError(
            "option 'computeUpdates' false is not supported: icetail pairs a key's DELETE and INSERT into "
            "UPDATE_BEFORE/UPDATE_AFTER whenever the table has a key (identifier-columns, its identifier fields, "
            "or v3 row lineage); drop the option"
        )
    raw = values.get("deduplicationmode")
    if raw is None:
        return net, True
    mode = next((m for m in DEDUPLICATION_MODES if m.lower() == raw.strip().lower()), None)
    if mode is None:
        raise ConfigError(f"option 'deduplicationMode' {raw!r} is not one of: {', '.join(DEDUPLICATION_MODES)}")
    if "net" in values and net != (mode == "netChanges"):
        raise ConfigError(f"options 'net' and 'deduplicationMode' {mode!r} disagree; give one of them")
    return mode == "netChanges", mode != "none"


def range_timestamp_ms(values: Mapping[str, str], end: str) -> int | None:
    """The `from-timestamp`/`startingTimestamp` (or `to-`/`endingTimestamp`) option in epoch ms.

    Inclusive: an `endingTimestamp` with `endingBoundInclusive=false` ends a millisecond earlier.
    """
    for name in _TIMESTAMP_OPTIONS[end]:
        if name in values:
            when = parse_instant(values[name], f"option {_DISPLAY.get(name, name)!r}")
            ms = int(when.timestamp() * 1000)
            if end == "to" and name == "endingtimestamp" and not _spark_bound_inclusive(values, "to"):
                return ms - 1
            return ms
    return None


def _boolean(values: Mapping[str, str], name: str, display: str | None = None) -> bool:
    raw = values.get(name, "false").strip().lower()
    if raw not in ("true", "false"):
        raise ConfigError(f"option {display or name!r} must be true or false, got {values[name]!r}")
    return raw == "true"


def parse_stream_options(options: Mapping[str, str]) -> StreamOptions:
    values = _lowered(options, STREAM_OPTIONS, "spark.readStream")
    if "startingtimestamp" in values:
        if "starting" in values:
            raise ConfigError("options 'starting' and 'startingTimestamp' exclude each other; give one")
        # inclusive, as Delta's: the cursor is the newest snapshot committed before it
        ms = range_timestamp_ms(values, "from")
        assert ms is not None
        return StreamOptions(
            _table_options(values),
            StartMode("timestamp", timestamp_ms=ms - 1),
            _max_snapshots(values),
            _trigger_limits(values),
        )
    raw_start = values.get("starting", "earliest").strip()
    if raw_start == "full":
        raise ConfigError(f"option 'starting' {raw_start!r} is not one of: {', '.join(STREAM_STARTS)}")
    try:
        starting = parse_start(raw_start)
    except ConfigError:
        raise ConfigError(f"option 'starting' {raw_start!r} is not one of: {', '.join(STREAM_STARTS)}") from None
    return StreamOptions(_table_options(values), starting, _max_snapshots(values), _trigger_limits(values))


def _max_snapshots(values: Mapping[str, str]) -> int | None:
    return _positive(values, "max-snapshots-per-trigger", "max-snapshots-per-trigger")


_LIMIT_NAMES = {  # Delta's name as Spark hands it over (lower-cased), icetail's, and how messages write it
    "rows": ("maxrowspertrigger", "max-rows-per-trigger", "maxRowsPerTrigger"),
    "files": ("maxfilespertrigger", "max-files-per-trigger", "maxFilesPerTrigger"),
    "bytes": ("maxbytespertrigger", "max-bytes-per-trigger", "maxBytesPerTrigger"),
}


def _trigger_limits(values: Mapping[str, str]) -> TriggerLimits:
    found: dict[str, int | None] = {}
    for kind, (delta, icetail, display) in _LIMIT_NAMES.items():
        if delta in values and icetail in values:
            raise ConfigError(f"options {display!r} and {icetail!r} are the same limit; give one")
        found[kind] = _positive(values, delta, display) if delta in values else _positive(values, icetail, icetail)
    return TriggerLimits(found["rows"], found["files"], found["bytes"])


def _positive(values: Mapping[str, str], name: str, display: str) -> int | None:
    raw = values.get(name)
    if raw is None:
        return None
    try:
        number = int(raw.strip())
    except ValueError:
        number = 0
    if number < 1:
        raise ConfigError(f"option {display!r} must be an integer >= 1, got {raw!r}")
    return number


@dataclass(frozen=True)
class PinOptions:
    """What `load()` needs before Spark says whether it reads a batch or a stream: the table and the to-end."""

    source: TableOptions
    to_snapshot_id_inclusive: int | None
    to_tag: str | None
    to_timestamp_inclusive_ms: int | None
    to_snapshot_id_exclusive: int | None = None  # Spark's `endingVersion` with `endingBoundInclusive=false`


def parse_any_options(options: Mapping[str, str]) -> PinOptions:
    known = tuple(dict.fromkeys(BATCH_OPTIONS + STREAM_OPTIONS))
    values = _lowered(options, known, "spark.read/readStream")
    to_snapshot = _snapshot_id(values, "to-snapshot")
    to_exclusive = None
    ending = _snapshot_id(values, "endingversion", "endingVersion")
    if ending is not None and _spark_bound_inclusive(values, "to"):
        to_snapshot = ending
    elif ending is not None:
        to_exclusive = ending
    return PinOptions(
        _table_options(values),
        to_snapshot,
        _name(values, "to-tag"),
        range_timestamp_ms(values, "to"),
        to_exclusive,
    )


def _lowered(options: Mapping[str, str], known: tuple[str, ...], reader: str) -> dict[str, str]:
    values = {str(k).lower(): str(v) for k, v in options.items() if k.lower() != "path"}
    unknown = sorted(k for k in values if k not in known and not k.startswith(CATALOG_PROPERTY_PREFIX))
    if unknown:
        raise ConfigError(
            f"unknown option {unknown[0]!r} for {reader}.format('icetail'); accepted: {', '.join(known)}, "
            f"{CATALOG_PROPERTY_PREFIX}<pyiceberg catalog property>"
        )
    for required in ("catalog", "table"):
        if not values.get(required, "").strip():
            raise ConfigError(f"option {required!r} is required, e.g. .option({required!r}, ...)")
    return values


def _table_options(values: Mapping[str, str]) -> TableOptions:
    table = values["table"].strip()
    if "." not in table:
        raise ConfigError(f"option 'table' {table!r} must be written as NAMESPACE.TABLE")
    prefix = CATALOG_PROPERTY_PREFIX
    properties = tuple(sorted((k[len(prefix) :], v) for k, v in values.items() if k.startswith(prefix)))
    raw_ids = values.get("identifier-columns")
    identifiers = tuple(c.strip() for c in raw_ids.split(",") if c.strip()) if raw_ids is not None else None
    if raw_ids is not None and not identifiers:
        raise ConfigError("option 'identifier-columns' must name columns, e.g. 'a,b'")
    branch = _name(values, "branch") or MAIN_BRANCH
    with_schema_id = _boolean(values, "with-schema-id")
    with_row_lineage = _boolean(values, "with-row-lineage")
    row_filter = values.get("filter")
    if row_filter is not None:
        parse_row_filter(row_filter, "option 'filter'")
    verify = verify_mode_with_filter(values.get("verify", VerifyMode.WARN.value), row_filter, "option 'verify'")
    return TableOptions(
        values["catalog"].strip(),
        table,
        properties,
        identifiers,
        branch,
        with_schema_id,
        with_row_lineage,
        verify,
        row_filter,
    )


def _name(values: Mapping[str, str], option: str) -> str | None:
    """A branch or tag name option; an empty one is refused."""
    raw = values.get(option)
    if raw is None:
        return None
    if not raw.strip():
        raise ConfigError(f"option {option!r} must name a {option.split('-')[-1]}, got {raw!r}")
    return raw.strip()


def _snapshot_id(values: Mapping[str, str], name: str, display: str | None = None) -> int | None:
    raw = values.get(name)
    if raw is None:
        return None
    try:
        return int(raw.strip())
    except ValueError:
        raise ConfigError(f"option {display or name!r} must be a snapshot id (an integer), got {raw!r}") from None
