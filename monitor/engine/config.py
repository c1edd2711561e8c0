"""A consumer's settings, checked when they are built: light, so a bad setting is refused at once.

`PipelineConfig` is what `run`, `serve`, the config file and the Python API build; every value
is checked here from the values alone (no catalog, store or sink is opened), so a refused setting
costs milliseconds and leaves nothing behind.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from icetail.kernel.errors import ConfigError
from icetail.kernel.names import check_consumer_id
from icetail.kernel.secrets import redacted_repr
from icetail.kernel.settings import (
    DEFAULT_LEASE_TTL_SECONDS,
    DEFAULT_MANIFEST_CACHE_ENTRIES,
    DEFAULT_RECONCILE_PARTITION_BYTES,
    DEFAULT_TARGET_SPLIT_BYTES,
    ENGINES,
    HISTORY_LIMIT,
    MAIN_BRANCH,
    MIN_LEASE_TTL_SECONDS,
    check_choice,
    check_format,
    parse_missing_cursor_policy,
    verify_mode_name,
)
from icetail.monitor.engine.start_mode import parse_start
from icetail.sinks.urls import SinkTarget, parse_sink_url

AUTO = "auto"
MAX_CHUNKS_PER_COMMIT = 100  # every chunk id is named in the sink snapshot's summary: keep it small


@dataclass(frozen=True)
class GroupPolicy:
    """When a group of staged chunks is committed: whichever bound is reached first.

    The pipeline also commits the group when the batch's read ends, before a chunk it cannot
    group (a reconciled snapshot, rows written from the driver to a sink that does not write
    groups) and on a stop request. A group-writing sink (keyed.GroupWriteSink, the PostgreSQL
    mirror) gets the read rows of the group's chunks in one `write_group`.
    """

    min_rows: int  # committed once it holds at least this many change rows (inclusive); <= 1: every chunk
    max_wait_seconds: float  # ... or once its first chunk has waited this long (inclusive)
    max_chunks: int = MAX_CHUNKS_PER_COMMIT  # ... or once it holds this many chunks

    def __post_init__(self) -> None:
        if self.min_rows < 0:
            raise ConfigError(f"--sink-commit-rows must be >= 0, got {self.min_rows}")
        if self.max_wait_seconds < 0:
            raise ConfigError(f"--sink-commit-interval must be >= 0s, got {self.max_wait_seconds}s")
        if self.max_chunks < 1:
            raise ConfigError(f"a sink commit holds at least one chunk, got {self.max_chunks}")

    @property
    def groups(self) -> bool:
        """False when every chunk is committed on its own."""
        return self.min_rows > 1 and self.max_wait_seconds > 0 and self.max_chunks > 1


@dataclass(frozen=True)
class PipelineConfig:
    catalog: str
    table: str
    state_url: str
    sink_url: str
    consumer: str | None = None
    start: str = "earliest"
    max_snapshots_per_batch: int | None = None
    chunk_rows: int | None = None  # rows between two offset commits; None: one parquet row group
    # an Iceberg sink commits staged chunks together until a commit holds this many rows (inclusive)...
    sink_commit_rows: int = 1_000_000
    sink_commit_interval_seconds: float = 10.0  # ... or its first chunk waited this long; 0 rows or 0s: per chunk
    identifier_columns: tuple[str, ...] | None = None
    carry_over_removal: bool = True
    on_missing_cursor: str = "fail"
    protect_cursor: bool = False
    # how long a consumer's lease outlives its holder's last renewal (renewed at a third of it): a
    # dead process's consumers move to another after at most this long (`--lease-ttl`)
    lease_ttl_seconds: float = DEFAULT_LEASE_TTL_SECONDS
    target_split_bytes: int = DEFAULT_TARGET_SPLIT_BYTES
    branch: str = MAIN_BRANCH  # the branch whose history is followed (a write-audit-publish audit branch)
    net: bool = False  # each batch's net changes, as one chunk (batches that start under it; see BatchShape.net)
    verify: str = "warn"  # off | warn | strict: check each snapshot against its summary (engine/verify.py)
    with_schema_id: bool = False  # add `_schema_id` to every row (the batch's schema id)
    with_row_lineage: bool = False  # v3 tables: deliver `_row_id` and `_last_updated_sequence_number` too
    # a snapshot to reconcile with more estimated bytes is reconciled by Spark tasks in partitions of
    # about this size, a chunk each (reader/changes/partitions.py); 0: every snapshot whole, in the driver
    reconcile_partition_bytes: int = DEFAULT_RECONCILE_PARTITION_BYTES
    # `changelog` (icetail's change rows) or `debezium` (one envelope per change, sinks/debezium.py)
    output_format: str = "changelog"
    # decoded manifest entries kept across batches and serve cycles (planning/manifests.py); 0: none
    manifest_cache_entries: int = DEFAULT_MANIFEST_CACHE_ENTRIES
    # finished batches kept in the store's history per consumer (older ones are pruned as each batch
    # finishes); recovery needs only the newest (the next batch's ordinals, a replayed finish)
    history_retention: int = HISTORY_LIMIT
    # where each batch's splits are read (monitor/engine/batch_engine.py): auto | spark | local; auto
    # reads a batch of at most `local_max_bytes` (None: ICETAIL_LOCAL_MAX_BYTES, else 64 MiB) in this
    # process, with no JVM, and a bigger one on Spark
    engine: str = AUTO
    local_max_bytes: int | None = None
    # a batch ends at the first chunk boundary at or after this many change rows delivered (inclusive)
    # or this many file bytes read; the rest of its snapshots follows in the next batch, from the
    # committed row offsets. A snapshot reconciled whole (or a --net batch) is not cut. None: no bound
    max_rows_per_batch: int | None = None
    max_bytes_per_batch: int | None = None
    # sink_url parsed once, here (sinks/urls.py), or why it cannot be: see `sink_target`
    _sink: SinkTarget | ConfigError = field(init=False, repr=False, compare=False)

    def __repr__(self) -> str:
        return redacted_repr(self)  # URLs in it may hold a password

    def __post_init__(self) -> None:
        check_format(self.output_format)
        check_choice(self.engine, ENGINES, "engine")
        if self.local_max_bytes is not None and self.local_max_bytes < 0:
            raise ConfigError(f"--local-max-bytes must be >= 0 (0: every batch on Spark), got {self.local_max_bytes}")
        try:
            object.__setattr__(self, "_sink", parse_sink_url(self.sink_url))
        except ConfigError as exc:  # refused when the sink is needed: a Pipeline given its sink needs no URL
            object.__setattr__(self, "_sink", exc)
        if self.history_retention < 1:
            kept = self.history_retention
            raise ConfigError(f"history_retention must be >= 1 (finished batches kept per consumer), got {kept}")
        if self.net and not self.carry_over_removal:
            raise ConfigError("--net always cancels carry-over rows; drop --keep-carry-over")
        parse_start(self.start)
        if not self.branch or self.branch != self.branch.strip():
            raise ConfigError(f"--branch {self.branch!r} must be a branch name, e.g. --branch audit")
        verify_mode_name(self.verify)
        parse_missing_cursor_policy(self.on_missing_cursor)
        if self.max_snapshots_per_batch is not None and self.max_snapshots_per_batch < 1:
            raise ConfigError(f"--max-snapshots-per-batch must be >= 1, got {self.max_snapshots_per_batch}")
        for flag, bound in (
            ("--max-rows-per-batch", self.max_rows_per_batch),
            ("--max-bytes-per-batch", self.max_bytes_per_batch),
        ):
            if bound is not None and bound < 1:
                raise ConfigError(f"{flag} must be >= 1 (leave it out for no bound), got {bound}")
        if self.chunk_rows is not None and self.chunk_rows < 1:
            raise ConfigError(f"--chunk-rows must be >= 1, got {self.chunk_rows}")
        if self.manifest_cache_entries < 0:
            raise ConfigError(f"--manifest-cache-entries must be >= 0, got {self.manifest_cache_entries}")
        if not MIN_LEASE_TTL_SECONDS <= self.lease_ttl_seconds < float("inf"):
            raise ConfigError(
                f"--lease-ttl must be at least {MIN_LEASE_TTL_SECONDS:g}s (a lease is renewed at a third of it), "
                f"got {self.lease_ttl_seconds:g}s; e.g. --lease-ttl 30s"
            )
        if self.reconcile_partition_bytes < 0:
            raise ConfigError(f"reconcile partition bytes must be >= 0, got {self.reconcile_partition_bytes}")
        _ = self.group_policy  # checks the sink commit bounds
        if "." not in self.table:
            raise ConfigError(f"--table {self.table!r} must be written as NAMESPACE.TABLE")
        check_consumer_id(self.consumer_id, derived_from=None if self.consumer else "--catalog and --table")

    @property
    def sink_target(self) -> SinkTarget:
        """What `sink_url` names, as parsed when this configuration was built; ConfigError naming the
        URL and the accepted forms when it cannot be used."""
        if isinstance(self._sink, ConfigError):
            raise self._sink.with_traceback(None)
        return self._sink

    @property
    def group_policy(self) -> GroupPolicy:
        """When staged chunks of a group-committing sink are committed together."""
        return GroupPolicy(self.sink_commit_rows, self.sink_commit_interval_seconds)

    @property
    def consumer_id(self) -> str:
        """Default consumer id: derived from catalog and table."""
        return self.consumer or f"{self.catalog}.{self.table}"
