"""--protect-cursor: tag icetail-<consumer> kept on the cursor snapshot, so expiry keeps what the
consumer still needs; checked when the pipeline opens, moved after each completed batch.
"""

from __future__ import annotations

from pyiceberg.table import Table

from icetail.kernel.errors import ConfigError


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


def _cannot_tag(table: Table, consumer: str, reason: str) -> str:
    name = ".".join(table.name())
    return (
        f"--protect-cursor cannot keep tag icetail-{consumer} on table {name}: {reason}; run without "
        f"--protect-cursor and keep the cursor snapshot with a tag of your own (Spark SQL: ALTER TABLE "
        f"{name} CREATE OR REPLACE TAG ...; see docs/delivery.md), or follow the table through a REST catalog"
    )
