"""The values a user may give to icetail's settings, and their defaults: one light module.

The command line and the config file check a value (`--format`, `--verify`, `--on-missing-cursor`)
and know a default without importing the code that uses it, so a bad flag is answered in
milliseconds and `icetail --help` loads no catalog, reader or Spark. The modules that implement a
setting import its choices and default from here.
"""

from __future__ import annotations

import datetime
from collections.abc import Sequence

from icetail.kernel.errors import ConfigError

MAIN_BRANCH = "main"  # the branch followed unless `--branch` names another

FORMATS = ("changelog", "debezium")  # `--format`: icetail's change rows (Iceberg's changelog columns), or envelopes
VERIFY_MODES = ("off", "warn", "strict")  # `--verify`: check each snapshot against its summary
MISSING_CURSOR_POLICIES = ("fail", "earliest", "latest", "full", "diff")  # `--on-missing-cursor`

DEFAULT_TARGET_SPLIT_BYTES = 64 * 1024 * 1024  # a split reads about this many bytes of one data file
DEFAULT_RECONCILE_PARTITION_BYTES = 8 * 1024 * 1024  # a bigger snapshot is reconciled by Spark tasks in partitions
DEFAULT_MANIFEST_CACHE_ENTRIES = 250_000  # decoded manifest entries kept across batches (about 0.5 KB each)
# A consumer's lease outlives its holder's last renewal by this much: a dead `serve` replica's
# consumers move to another within it (plus a poll). Renewed at a third of it, so a holder misses
# two renewals before its lease can expire; the minimum keeps a renewal's round trip well inside.
DEFAULT_LEASE_TTL_SECONDS = 30.0
MIN_LEASE_TTL_SECONDS = 3.0
# `--engine` of `changes` and `plan`, `engine=` of the Python API: where a range's splits are read.
# auto: in this process when the plan reads at most the local-max bytes, else on Spark
ENGINES = ("auto", "spark", "local")
DEFAULT_LOCAL_MAX_BYTES = 64 * 1024 * 1024  # measured in bench/RESULTS.md R51 (docs/performance.md)
LOCAL_MAX_BYTES_ENV = "ICETAIL_LOCAL_MAX_BYTES"  # the default of `--local-max-bytes` and `local_max_bytes=`
# the in-process engine reads this many splits at once (default: the CPUs this process may use,
# at most MAX_LOCAL_THREADS); 1 reads them one after another
LOCAL_THREADS_ENV = "ICETAIL_LOCAL_THREADS"
# where local Spark tasks hand their rows to the driver (reader/spark/handoff_root.py): this folder,
# else TMPDIR when set, else /dev/shm when it has room, else the temporary directory
HANDOFF_DIR_ENV = "ICETAIL_HANDOFF_DIR"
MAX_LOCAL_THREADS = 8
# Arrow's allocator (mimalloc, pyarrow's default) hands freed pages back to the OS 10 ms after they
# are freed, so a process that reads again and again (Spark's Python workers; `serve` and `run` on
# the in-process engine) faults its working set in again on every read: 0.2-1.5 s of system CPU
# per 8M rows, and the slowest warm round 1.6-2.9x the fastest (bench/RESULTS.md R41, R62). Kept a
# minute, freed memory is reused by the next read; `release_unused()` still hands it back at once
# after a big batch. Read by mimalloc when pyarrow loads: set by the `icetail` command before any
# import, and in Spark's worker environment; a value the user set wins.
PURGE_DELAY_ENV = "MIMALLOC_PURGE_DELAY"
PURGE_DELAY_MS = "60000"
# `serve` stops the Spark session its big batches started after this long with none: the JVM and its
# workers hold ~700 MB idle, a new start costs ~4-8 s of CPU, so a table with a big batch every few
# minutes keeps it and one with a big batch an hour pays a start an hour (under 0.3% of a core)
DEFAULT_SPARK_IDLE_STOP_SECONDS = 300.0
HISTORY_LIMIT = 100  # finished batches kept per consumer in the store; older ones are trimmed on write

ISO_EXAMPLE = "2026-01-31T12:00:00Z"


def check_choice(value: str, choices: Sequence[str], flag: str) -> str:
    """`value` if it is one of `choices`; ConfigError naming `flag` and the choices otherwise."""
    if value not in choices:
        raise ConfigError(f"{flag} {value!r} is not one of: {', '.join(choices)}")
    return value


def check_format(value: str, flag: str = "--format") -> str:
    return check_choice(value, FORMATS, flag)


def verify_mode_name(text: str, flag: str = "--verify") -> str:
    """`--verify`'s value as one of VERIFY_MODES (case and surrounding blanks ignored)."""
    value = str(text).strip().lower()
    if value not in VERIFY_MODES:
        raise ConfigError(f"{flag} {text!r} is not one of {', '.join(VERIFY_MODES)}")
    return value


def verify_mode_for_read(verify: str, row_filter: str | None, flag: str = "verify") -> str:
    """The verify mode to read with: a filtered read cannot be checked against whole-snapshot summaries."""
    mode = verify_mode_name(verify, flag)
    if row_filter is None:
        return mode
    if mode == "strict":
        raise ConfigError(
            "--verify strict checks whole snapshots against their summaries, which a --filter reads only part of; "
            "drop one of them"
        )
    return "off"


def parse_missing_cursor_policy(text: str) -> str:
    return check_choice(text, MISSING_CURSOR_POLICIES, "--on-missing-cursor")


def parse_instant(raw: str, what: str) -> datetime.datetime:
    """An ISO 8601 time (`2026-01-31`, `2026-01-31 12:00:00`, `...T12:00:00.250+02:00`, `...Z`), UTC
    when it has no offset; ConfigError naming `what` (a flag or an option) otherwise."""
    try:
        when = datetime.datetime.fromisoformat(raw.strip().replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise ConfigError(
            f"{what} {raw!r} is not an ISO 8601 time; write e.g. {ISO_EXAMPLE} (UTC when no offset is given)"
        ) from None
    return when if when.tzinfo is not None else when.replace(tzinfo=datetime.timezone.utc)
