"""A full local disk, told apart from a bad data file: one line naming the directory and the fix.

Two local directories fill up under a big batch: icetail's handoff (read rows on their way from
the Spark tasks to the driver, in /dev/shm or TMPDIR: handoff_root.py) and Spark's own local
directory (shuffle and spill files of a partitioned reconciliation). Either way nothing past the
delivered rows is committed, so the error is transient (`LocalDiskFullError`): a rerun, or the
service's next cycle, resumes the batch once space returns. Without this a full disk surfaced as
"data file ... cannot be read" (a wrong fix) or as a Spark stack trace.
"""

from __future__ import annotations

import os
import tempfile
from typing import Any

from icetail.kernel.errors import LocalDiskFullError, is_disk_full
from icetail.reader.spark.handoff_root import handoff_root

HANDOFF_MARKER = "icetail-handoff-"


def handoff_full(directory: str) -> LocalDiskFullError:
    """The error for a handoff file that could not be written in `directory`."""
    return LocalDiskFullError(
        f"no space left on device in {directory} (icetail's handoff of read rows): free space there, "
        "or set ICETAIL_HANDOFF_DIR (or TMPDIR) to a directory on a larger disk; the batch resumes where it stopped"
    )


def spark_local_full(spark_context: Any | None) -> LocalDiskFullError:
    """The error for a Spark job that failed writing its local directory (shuffle, spill)."""
    return LocalDiskFullError(
        f"no space left on device in {spark_local_dirs(spark_context)} (Spark's local directory): free space "
        "there, or set spark.local.dir (SPARK_LOCAL_DIRS) to a larger disk; the batch resumes where it stopped"
    )


def spark_job_error(
    exc: BaseException, spark_context: Any | None, handoff_dir: str | None = None
) -> LocalDiskFullError | None:
    """The one-line error a failed Spark job stands for, when it is a full disk; else None.

    `handoff_dir`: the job's handoff folder, whose parent is named; choosing the place again could
    name another one (a /dev/shm that filled up no longer has the room to be chosen).
    """
    if not is_disk_full(exc):
        return None
    text = str(exc)
    if HANDOFF_MARKER in text:
        return handoff_full(os.path.dirname(handoff_dir) if handoff_dir else handoff_root())
    return spark_local_full(spark_context)


def spark_local_dirs(spark_context: Any | None) -> str:
    """Where this Spark keeps shuffle and spill files: SPARK_LOCAL_DIRS, else spark.local.dir, else /tmp."""
    configured = os.environ.get("SPARK_LOCAL_DIRS")
    if not configured and spark_context is not None:
        try:
            configured = spark_context.getConf().get("spark.local.dir", None)
        except Exception:  # noqa: BLE001 - naming the directory must not hide the disk-full error
            configured = None
    return configured or tempfile.gettempdir()
