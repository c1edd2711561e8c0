"""icetail: `tail -f` for Apache Iceberg tables.

Every row-level change of a table (INSERT, DELETE, UPDATE_BEFORE, UPDATE_AFTER), snapshot by
snapshot, read on Spark with merge-on-read deletes applied. Two ways in:

* a range, once: `read_changes` (an Arrow table) or `changes_batch_reader` (a stream of
  record batches for ranges too large for memory), by snapshot id, tag or commit time, on
  `main` or any branch (`branch=`, `from_tag=`, `to_tag=`);
* a table followed exactly once into a sink, resumable to the row: `Pipeline(PipelineConfig(...))`;
  sinks by URL (`open_sink`), your own (`Sink`, `CallbackSink`), and a parquet sink read back
  under its newest schema (`read_parquet_sink`).

Everything below `icetail.monitor`, `icetail.reader`, `icetail.state`, `icetail.sinks` and
`icetail.kernel` is internal and may change between releases (docs/sinks.md documents the sink
contract for writing your own); what is named in `__all__` is the public API. The names load on first
use, so a Spark worker importing `icetail.reader` does not pay for the control plane.
"""

from __future__ import annotations

import importlib
import os
from typing import TYPE_CHECKING, Any


def _checkout_root(package: str) -> str | None:
    """The repository root when this package runs from a checkout, else None.

    A checkout keeps icetail.reader, icetail.monitor and icetail.state in the top-level folders
    reader/, monitor/ and state/; a wheel maps them inside the package (pyproject's package-dir).
    With the root on the package's path, a plain PYTHONPATH, spark-submit and Spark's Python
    workers import them from a checkout with no install. Four stat calls; no import.
    """
    root = os.path.dirname(package)
    if os.path.isdir(os.path.join(package, "reader")):
        return None  # installed (or zipped): the rooms are inside the package
    checkout = os.path.isfile(os.path.join(root, "pyproject.toml"))
    return root if checkout and os.path.isfile(os.path.join(root, "reader", "__init__.py")) else None


if (_root := _checkout_root(os.path.dirname(__file__))) is not None:
    __path__.append(_root)

if TYPE_CHECKING:
    __version__: str
    from pyiceberg.table import Table

    from icetail.kernel.errors import IcetailError, SinkError, SinkRejectedError, TerminalError, TransientError
    from icetail.monitor.engine.api import changes_batch_reader, read_changes
    from icetail.monitor.engine.config import PipelineConfig
    from icetail.monitor.engine.pipeline import BatchOutcome, Pipeline
    from icetail.sinks.base import ChunkKey, Sink
    from icetail.sinks.files.object_store import committed_objects
    from icetail.sinks.files.parquet_reader import read_parquet_sink
    from icetail.sinks.python.callback import CallbackSink
    from icetail.sinks.registry import open_sink

_EXPORTS = {
    "changes_batch_reader": "icetail.monitor.engine.api",
    "read_changes": "icetail.monitor.engine.api",
    "BatchOutcome": "icetail.monitor.engine.pipeline",
    "Pipeline": "icetail.monitor.engine.pipeline",
    "PipelineConfig": "icetail.monitor.engine.config",
    "IcetailError": "icetail.kernel.errors",
    "SinkError": "icetail.kernel.errors",
    "SinkRejectedError": "icetail.kernel.errors",
    "TerminalError": "icetail.kernel.errors",
    "TransientError": "icetail.kernel.errors",
    "ChunkKey": "icetail.sinks.base",
    "Sink": "icetail.sinks.base",
    "CallbackSink": "icetail.sinks.python.callback",
    "open_sink": "icetail.sinks.registry",
    "committed_objects": "icetail.sinks.files.object_store",
    "read_parquet_sink": "icetail.sinks.files.parquet_reader",
}


def __getattr__(name: str) -> Any:
    if name == "__version__":  # read from the installed metadata on first use: `icetail` starts faster
        from icetail._version import installed_version

        globals()[name] = installed_version()
        return globals()[name]
    if name not in _EXPORTS:
        raise AttributeError(f"module 'icetail' has no attribute {name!r}")
    value = getattr(importlib.import_module(_EXPORTS[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)


def load_table(catalog: str, identifier: str) -> Table:
    """The pyiceberg table `identifier` (NAMESPACE.TABLE) of the catalog named in pyiceberg's configuration."""
    from icetail.monitor.engine.catalog import load_table as load
    from icetail.monitor.engine.catalog import open_catalog

    return load(open_catalog(catalog), identifier)


__all__ = [
    "BatchOutcome",
    "CallbackSink",
    "ChunkKey",
    "IcetailError",
    "Pipeline",
    "PipelineConfig",
    "Sink",
    "SinkError",
    "SinkRejectedError",
    "TerminalError",
    "TransientError",
    "__version__",
    "changes_batch_reader",
    "committed_objects",
    "load_table",
    "open_sink",
    "read_changes",
    "read_parquet_sink",
]
