"""Which Spark line is installed: the `icetail` data source needs Spark 4's Python data source API."""

from __future__ import annotations

from icetail.kernel.errors import TerminalError


class SparkVersionError(TerminalError, ImportError):
    """The installed pyspark cannot host the data source; an ImportError, so `import` fails cleanly."""


def pyspark_major() -> int:
    import pyspark

    return int(pyspark.__version__.split(".")[0])


def require_spark4() -> None:
    import pyspark

    if pyspark_major() < 4:
        raise SparkVersionError(
            f"icetail.spark (the 'icetail' Spark data source) needs Spark >= 4.0, found pyspark {pyspark.__version__}; "
            "on Spark 3.5 use `icetail changes` / `icetail run` or the Python API (icetail.read_changes)"
        )
