"""Keyed faults: a SIGKILL or SIGTERM at an observed moment of a batch, not at a random time.

A moment is one of:

* `chunk`: right after the first committed chunk of a batch (any sink);
* `group`: right after a group commit of an Iceberg sink (`--sink-commit-rows 400`: a batch of
  several groups), so the batch is in flight with part of its groups in the sink table;
* `partitioned`: right after the first committed partition of a snapshot reconciled in partitions
  (`--reconcile-partition-bytes 4096`: a snapshot to reconcile of these small tables is split in a
  few partitions); only a batch whose snapshot is not an append counts;
* `net`: `--net`, the moment the batch's one net chunk shows in the sink (a file of the parquet
  sink, bytes of the JSON lines file, a metadata file of the Iceberg sink table), i.e. between
  its write and, at best, its offset commit;
* `sink-commit`: the Iceberg sink's first new table metadata file of the run: the signal lands
  between a group's sink commit and its offsets' commit when the watch is quick enough, else
  just after.

The first three use the test hold `ICETAIL_TEST_HOLD_AFTER_CHUNK` (tests/support/holds.py, at
the product's seam `after_chunk`, icetail/kernel/seams.py): while its file exists, each committed
chunk (group, partition) waits and marks the wait with `<file>.held`, so the fault lands while
the batch is provably in flight, whatever the machine's load. A hold at a moment that does not
count (an append batch for `partitioned`) is let go and the next one awaited.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from bench.chaos.places import Sink
from icetail.state.store import open_store
from tests.support.holds import HOLD_AFTER_CHUNK_ENV, hold_env

HELD_MOMENTS = ("chunk", "group", "partitioned")
WATCHED_MOMENTS = ("net", "sink-commit")
_RELEASE_GAP = 0.2  # s without the hold file: longer than the product's 50 ms poll, so a held run goes on


def moments_for(kind: str, sink: str) -> tuple[str, ...]:
    out = ["chunk"]
    if sink in ("iceberg", "iceberg+s3"):
        out.append("group")
    if kind in ("append-delete", "cow-overwrite", "schema-evolution"):  # copy-on-write deletes: reconciled
        out.append("partitioned")
    if sink in ("parquet", "jsonl", "iceberg"):
        out.append("net")
    if sink == "iceberg":
        out.append("sink-commit")
    return tuple(out)


def draw_moment(kind: str, sink: str, rng: random.Random) -> str:
    return rng.choice(moments_for(kind, sink))


def run_args(moment: str) -> list[str]:
    """The flags every run of a trial keyed at `moment` gets (a consumer keeps its shape across runs)."""
    return {
        "group": ["--sink-commit-rows", "400"],
        "partitioned": ["--reconcile-partition-bytes", "4096"],
        "net": ["--net"],
        "sink-commit": ["--sink-commit-rows", "200"],
    }.get(moment, [])


def sink_mark(sink: Sink) -> tuple[int, int]:
    """What changes when the local sink commits: files and bytes (parquet, jsonl), metadata files (iceberg)."""
    if sink.kind == "iceberg" and sink.catalog is not None:  # a commit's manifest list, written before its CAS
        return len(list(sink.catalog.root.rglob("snap-*.avro"))), 0
    if sink.kind == "jsonl" and sink.path is not None:
        return 0, sink.path.stat().st_size if sink.path.exists() else 0
    if sink.kind == "parquet" and sink.path is not None and sink.path.exists():
        return len(list(sink.path.glob("*.parquet"))), 0
    return 0, 0


def inflight_snapshots(store_url: str, consumer: str) -> set[int]:
    """The snapshots of the consumer's batch in flight (none between batches)."""
    with open_store(store_url) as store:
        checkpoint = store.load(consumer)
    if checkpoint is None or checkpoint.inflight is None:
        return set()
    return {s.task.commit.snapshot_id for s in checkpoint.inflight.batch.splits}


@dataclass
class MomentWatch:
    """Says when a keyed fault's moment has come, in the harness's poll loop (every 20 ms)."""

    moment: str
    hold: Path  # the hold file (held moments)
    sink: Sink
    store_url: str
    consumer: str
    _start_mark: tuple[int, int] = (0, 0)
    _released_at: float = 0.0
    let_go: int = 0  # holds that did not count

    def env(self) -> dict[str, str]:
        return hold_env(HOLD_AFTER_CHUNK_ENV, self.hold) if self.moment in HELD_MOMENTS else {}

    def arm(self) -> None:
        """Before the run starts."""
        self.let_go = 0
        if self.moment in HELD_MOMENTS:
            self.hold.parent.mkdir(parents=True, exist_ok=True)
            self.hold.write_text("hold\n")
            self._held.unlink(missing_ok=True)
        else:
            self._start_mark = sink_mark(self.sink)

    def disarm(self) -> None:
        """After the fault (or the run's end): nothing more is held."""
        self.hold.unlink(missing_ok=True)
        self._held.unlink(missing_ok=True)

    @property
    def _held(self) -> Path:
        return Path(f"{self.hold}.held")

    def come(self, appends: Callable[[], frozenset[int]]) -> bool:
        """Whether the moment is here; `appends` gives the source's append snapshots (`partitioned`)."""
        if self.moment in WATCHED_MOMENTS:
            return sink_mark(self.sink) != self._start_mark
        now = time.monotonic()
        if self._released_at:
            if now - self._released_at >= _RELEASE_GAP:
                self._released_at = 0.0
                self.hold.write_text("hold\n")
            return False
        if not self._held.exists():
            return False
        if self.moment != "partitioned":
            return True
        try:
            snapshots = inflight_snapshots(self.store_url, self.consumer)
        except Exception:  # noqa: BLE001 - the store busy: look again at the next poll
            return False
        if snapshots and not snapshots <= appends():
            return True
        self.let_go += 1  # an append's chunk: let it go on, wait for the next hold
        self._held.unlink(missing_ok=True)
        self.hold.unlink(missing_ok=True)
        self._released_at = now
        return False
