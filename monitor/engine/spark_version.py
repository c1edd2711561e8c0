"""Which Spark line is installed: the `icetail` data source needs Spark 4's Python data source API."""

from __future__ import annotations

import sys
from types import TracebackType

from icetail.kernel.errors import TerminalError


class SparkVersionError(TerminalError, ImportError):
    """The installed pyspark cannot host the data source; an ImportError, so `import` fails cleanly."""


def pyspark_major() -> int:
    import pyspark

    return int(pyspark.__version__.split(".")[0])


def require_spark4() -> None:
    """Raise SparkVersionError on pyspark < 4. Left uncaught (a script's or a REPL's `import icetail.spark`)
    it is reported in one line, as the CLI reports a ConfigError, not as a traceback: `_report_in_one_line`
    becomes the interpreter's excepthook for that error and hands any other one to the hook it replaced."""
    import pyspark

    if pyspark_major() < 4:
        if not isinstance(sys.excepthook, _OneLineHook):
            sys.excepthook = _OneLineHook(sys.excepthook)
        raise SparkVersionError(
            f"icetail.spark (the 'icetail' Spark data source) needs Spark >= 4.0, found pyspark {pyspark.__version__}; "
            "install pyspark 4 (pip install 'pyspark>=4,<5'; in a checkout, `make demo` sets up .venv-demo on it), "
            "or on Spark 3.5 use `icetail changes` / `icetail run` or the Python API (icetail.read_changes)"
        )


class _OneLineHook:
    """sys.excepthook: an uncaught SparkVersionError as `icetail: error: ...`, anything else as before."""

    def __init__(self, previous: object) -> None:
        self.previous = previous

    def __call__(self, kind: type[BaseException], value: BaseException, traceback: TracebackType | None) -> None:
        if isinstance(value, SparkVersionError):
            print(f"icetail: error: {value}", file=sys.stderr)
            return
        previous = self.previous if callable(self.previous) else sys.__excepthook__
        previous(kind, value, traceback)
