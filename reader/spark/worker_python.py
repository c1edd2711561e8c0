"""Will Spark's Python workers on this host run an interpreter that can read? Asked before Spark starts.

A local master's workers run `spark.pyspark.python`, else PYSPARK_PYTHON, not the driver's
interpreter: set to another Python (a venv used without activating it, a system python3), they
fail deep inside the first job with `No module named 'pyarrow'`, or with Spark's Python version
mismatch. icetail sets PYSPARK_PYTHON to its own interpreter when it is unset, so only an
explicit other interpreter is probed: it must be the driver's Python minor version, have the
driver's pyspark (another venv's 3.5 workers fail a 4.x driver's first task with a UnicodeDecodeError
in Spark's handshake), and import pyarrow and icetail's worker module.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Mapping

from icetail.kernel.errors import ConfigError

PROBE_SECONDS = 60.0
# the versions first (a line each, before an import can fail), then what a worker imports first: Arrow
# and icetail's daemon module (spark.python.daemon.module)
PROBE = (
    "import sys, importlib.util\n"
    "print('%d.%d' % sys.version_info[:2], flush=True)\n"
    "if importlib.util.find_spec('pyspark'):\n"
    "    import pyspark; print(pyspark.__version__, flush=True)\n"
    "import pyarrow, icetail.reader.spark.daemon, icetail.reader.split.read"
)


def worker_python(conf: Mapping[str, str], environ: Mapping[str, str]) -> tuple[str, str]:
    """The interpreter the workers run, and where that was set (pyspark's own order)."""
    if conf.get("spark.pyspark.python"):
        return conf["spark.pyspark.python"], "spark.pyspark.python"
    if environ.get("PYSPARK_PYTHON"):
        return environ["PYSPARK_PYTHON"], "PYSPARK_PYTHON"
    return "python3", "Spark's default"


def check_worker_python(conf: Mapping[str, str], environ: Mapping[str, str] | None = None) -> None:
    """ConfigError naming the workers' interpreter, what it lacks, and the setting that fixes it."""
    env = os.environ if environ is None else environ
    command, source = worker_python(conf, env)
    found = shutil.which(command, path=env.get("PATH", os.defpath)) if os.sep not in command else command
    if found is not None and _same_interpreter(found, sys.executable):
        return
    fix = (
        f"export PYSPARK_PYTHON={sys.executable} (the Python running icetail)"
        if source != "spark.pyspark.python"
        else f"set spark.pyspark.python={sys.executable} (the Python running icetail)"
    )
    where = f"Spark's Python workers would run {command} ({source})"
    if found is None or not os.access(found, os.X_OK):
        raise ConfigError(f"{where}, which is not an executable here; {fix}")
    try:
        probe = subprocess.run(
            [found, "-c", PROBE], env=dict(env), capture_output=True, text=True, timeout=PROBE_SECONDS, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ConfigError(f"{where}, which does not start ({exc}); {fix}") from None
    lines = probe.stdout.split()
    version = lines[0] if lines else "?"
    driver = f"{sys.version_info[0]}.{sys.version_info[1]}"
    if lines and version != driver:
        raise ConfigError(f"{where}, which is Python {version} while the driver is Python {driver}; {fix}")
    if len(lines) > 1 and lines[1] != _driver_pyspark():
        raise ConfigError(
            f"{where}, which has pyspark {lines[1]} while the driver runs pyspark {_driver_pyspark()}; {fix}"
        )
    if probe.returncode != 0:
        errors = [line for line in probe.stderr.strip().splitlines() if line.strip()]
        raise ConfigError(f"{where}, which cannot import icetail's read path ({errors[-1] if errors else ''}); {fix}")


def _driver_pyspark() -> str:
    import pyspark

    return str(pyspark.__version__)


def _same_interpreter(a: str, b: str) -> bool:
    """The same file, or two names of one interpreter in one folder (a venv's `python` and `python3`).

    Real paths alone would not do: every venv's `python` links to the same base interpreter, but
    each venv has its own site-packages.
    """
    a, b = os.path.abspath(a), os.path.abspath(b)
    return a == b or (os.path.dirname(a) == os.path.dirname(b) and os.path.realpath(a) == os.path.realpath(b))
