"""--protect-cursor keeps tag icetail-<consumer> on the committed snapshot, moving with it."""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from icetail.monitor.cli.main import main
from tests.support.small_table import SCHEMA, SmallTable


def test_tag_follows_the_cursor(small_table: SmallTable, spark: Any, tmp_path: Any) -> None:
    args = [
        "run", "--catalog", "core", "--table", "ns.t", "--state", f"sqlite:///{tmp_path}/state.db",
        "--sink", f"parquet://{tmp_path}/sink", "--consumer", "guarded", "--protect-cursor",
    ]  # fmt: skip
    assert main(args) == 0
    table = small_table.load()
    assert table.metadata.refs["icetail-guarded"].snapshot_id == small_table.snapshot_ids[-1]
    table.append(pa.table({"id": [7], "v": ["g"]}, SCHEMA))
    assert main(args) == 0
    table = small_table.load()
    assert table.metadata.refs["icetail-guarded"].snapshot_id == table.metadata.current_snapshot_id
