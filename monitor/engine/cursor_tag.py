"""--protect-cursor: tag icetail-<consumer> kept on the cursor snapshot, so expiry keeps what the
consumer still needs; checked when the pipeline opens, moved after each completed batch, and
caught up with the cursor when the pipeline opens (a run killed between the two left it behind).
"""

from __future__ import annotations

from pyiceberg.table import Table

from icetail.kernel.errors import ConfigError
from icetail.state.checkpoint import Checkpoint


def check_can_tag(table: Table, consumer: str) -> None:
    """--protect-cursor writes a tag through pyiceberg, which writes table metadata itself through
    every catalog but REST (where the server writes it), and pyiceberg 0.12 cannot write format v3
    (apache/iceberg-python#1551): refuse at start rather than after the first delivered batch."""
    from pyiceberg.catalog.rest import RestCatalog

    if table.metadata.format_version >= 3 and not isinstance(table.catalog, RestCatalog):
        raise ConfigError(_cannot_tag(table, consumer, "pyiceberg cannot write format-version 3 table metadata"))


def keep_cursor_tag(table: Table, consumer: str, snapshot_id: int) -> None:
    """Keep tag icetail-<consumer> on the committed snapshot so expiry keeps what we still need.

    Written through the table as the catalog has it (`table`), never through a branch view: the
    tag is on the snapshot whatever branch it belongs to.
    """
    tag = f"icetail-{consumer}"
    try:
        with table.manage_snapshots() as manage:
            if tag in table.metadata.refs:
                manage.remove_tag(tag)
            manage.create_tag(snapshot_id, tag)
    except NotImplementedError as exc:  # pyiceberg cannot write this table's metadata
        raise ConfigError(_cannot_tag(table, consumer, str(exc))) from exc


def catch_up_cursor_tag(table: Table, consumer: str, checkpoint: Checkpoint | None) -> None:
    """Put the tag on the checkpoint's cursor snapshot if it is elsewhere or missing.

    A batch's commit and its tag's move are two writes to two systems: a run killed between them
    leaves the tag one batch behind (safe: expiry keeps more than needed), and a next run with
    nothing new to deliver would never move it. A cursor snapshot already expired is left to the
    start-up's cursor recovery (startup.py), which names the problem.
    """
    cursor_snapshot_id = checkpoint.cursor.snapshot_id if checkpoint is not None else None
    tag = table.metadata.refs.get(f"icetail-{consumer}")
    if cursor_snapshot_id is None or (tag is not None and tag.snapshot_id == cursor_snapshot_id):
        return
    if table.metadata.snapshot_by_id(cursor_snapshot_id) is None:
        return
    keep_cursor_tag(table, consumer, cursor_snapshot_id)


def _cannot_tag(table: Table, consumer: str, reason: str) -> str:
    name = ".".join(table.name())
    return (
        f"--protect-cursor cannot keep tag icetail-{consumer} on table {name}: {reason}; run without "
        f"--protect-cursor and keep the cursor snapshot with a tag of your own (Spark SQL: ALTER TABLE "
        f"{name} CREATE OR REPLACE TAG ...; see docs/delivery.md), or follow the table through a REST catalog"
    )
