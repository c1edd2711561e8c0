"""A FileIO per distinct property set, built once per process (driver or Spark worker)."""

from __future__ import annotations

import functools
from collections.abc import Mapping

from pyiceberg.io import FileIO, load_file_io


def file_io_for(properties: Mapping[str, str]) -> FileIO:
    return _cached(tuple(sorted(properties.items())))


@functools.lru_cache(maxsize=16)
def _cached(items: tuple[tuple[str, str], ...]) -> FileIO:
    return load_file_io(dict(items))
