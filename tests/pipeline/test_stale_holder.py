"""A run that lost its lease without knowing it (cut off from its store, then healed: issue 35's
replicas test) must not read the new holder's cursor against table metadata loaded before that
cursor was written: the cursor's snapshot is then missing from it, and the run took it for expired
(a terminal "cursor snapshot ... has expired" error advising `--on-missing-cursor` or `icetail
reset` for a consumer that is fine). No Spark: the cycle ends while planning.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from icetail.kernel.errors import StateBusyError
from icetail.monitor.engine.config import PipelineConfig
from icetail.monitor.engine.pipeline import Pipeline
from icetail.state.checkpoint import Cursor
from icetail.state.store import open_store
from tests.support.catalogs import new_catalog
from tests.support.serve import ID_NAME, id_name_rows


def test_a_cycle_reads_the_checkpoint_before_the_table(
    tmp_path: Path, use_catalogs: Callable[..., None], state_url_factory: Callable[[str], str]
) -> None:
    cat = new_catalog(tmp_path / "catalog", "stalecat")
    use_catalogs(cat)
    catalog = cat.catalog()
    catalog.create_namespace_if_not_exists("ns")
    table = catalog.create_table("ns.t", schema=ID_NAME)
    table.append(id_name_rows(range(3)))
    first = table.metadata.current_snapshot_id
    state = state_url_factory("sqlite")
    config = PipelineConfig(
        catalog="stalecat", table="ns.t", state_url=state, sink_url=f"parquet://{tmp_path / 'sink'}",
        consumer="c", start="latest", lease_ttl_seconds=60,
    )  # fmt: skip
    # a session that is never used: the cycle ends at the batch's write-ahead, before any read
    with Pipeline(config, owner="host:1:stale", spark=object()) as stale:
        assert stale.run_batch() is None  # created at `latest`: nothing to deliver
        with open_store(state) as store:
            assert store.load("c").cursor.snapshot_id == first  # type: ignore[union-attr]
        taken: list[int] = []

        def take_over() -> None:
            """A commit lands; another run takes the consumer over and moves its cursor past it."""
            moved = catalog.load_table("ns.t")
            moved.append(id_name_rows(range(3, 6)))
            current = moved.metadata.current_snapshot_id
            snapshot = moved.metadata.snapshot_by_id(current or -1)
            assert current is not None and snapshot is not None
            with open_store(state) as store:
                store.release_lease("c", "host:1:stale")
                store.acquire_lease("c", "host:2:new", 60)
                store.reset_cursor("c", Cursor(current, snapshot.timestamp_ms), owner="host:2:new")
            taken.append(current)

        def after_the_first_read(read: Callable[..., Any]) -> Callable[..., Any]:
            """`read`, and the take-over right after the first read of the cycle (table or checkpoint)."""

            def wrapped(*args: Any) -> Any:
                result = read(*args)
                if not taken:
                    take_over()
                return result

            return wrapped

        store = stale._store
        stale._load_table = after_the_first_read(stale._load_table)  # type: ignore[method-assign]
        store.load = after_the_first_read(store.load)  # type: ignore[method-assign]
        with pytest.raises(StateBusyError, match="host:1:stale lost its lease to host:2:new"):
            stale.run_batch()
        assert taken
        with open_store(state) as other:
            other.release_lease("c", "host:2:new")
            other.acquire_lease("c", "host:1:stale", 60)  # for the run's own release on close
