"""`--output` checked before any work: a local file that can be created, of a known kind, or stdout.

Light (the standard library only), so `icetail changes` refuses a bad output in milliseconds,
before the catalog or the read path is loaded.
"""

from __future__ import annotations

import os
import tempfile

from icetail.kernel.errors import ConfigError
from icetail.sinks.urls import remote_scheme


def check_output_path(path: str) -> None:
    """Refuse an output path we cannot write, before any work is done."""
    remote = remote_scheme(path)
    if remote is not None:
        raise ConfigError(
            f"--output {path!r} is a {remote}:// URL, but icetail changes writes a local file only; "
            "give a local or mounted path, or - for stdout"
        )
    if path != "-" and not path.endswith((".parquet", ".jsonl")):
        raise ConfigError(f"--output {path!r} must end in .parquet or .jsonl, or be - for stdout")


def check_output_writable(path: str) -> None:
    """Refuse an output file whose folder is missing or refuses a new file, before any data is read.

    The check creates and removes a temporary file there, as the writer will: permission bits
    alone would pass a read-only mount, or anything for root.
    """
    check_output_path(path)
    if path == "-":
        return
    if os.path.isdir(path):
        raise ConfigError(
            f"--output {path!r} is a folder; name a file in it, e.g. {os.path.join(path, 'changes.parquet')}"
        )
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise ConfigError(f"--output directory {directory} does not exist; create it first")
    try:
        with tempfile.TemporaryFile(prefix=".icetail-", suffix=".probe", dir=directory):
            pass
    except OSError as exc:
        raise ConfigError(
            f"--output directory {directory} does not accept new files ({exc.strerror or exc}); "
            "choose a folder you can write to"
        ) from None
