"""Optional dependencies (pyproject's extras), checked where the URL or option that needs one is parsed.

A missing driver found only when it is first imported surfaced as `unexpected error:
ModuleNotFoundError`, exit 1, after the checkpoint store had been created (issue 33.1). Here its
presence is looked up with `importlib.util.find_spec`, which imports nothing (a parent package at
most), so `--help` and every refusal that needs only the arguments stay light.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass

from icetail.kernel.errors import ConfigError


@dataclass(frozen=True)
class Extra:
    """An extra of icetail's pyproject and the modules it brings."""

    name: str
    modules: tuple[str, ...]


POSTGRES = Extra("postgres", ("psycopg",))
GLUE = Extra("glue", ("boto3",))
HIVE = Extra("hive", ("thrift", "hive_metastore"))
# pyspark.sql.connect's own check (pandas, pyarrow, grpc, grpcio-status, googleapis-common-protos)
CONNECT = Extra("connect", ("pandas", "grpc", "grpc_status", "google.rpc"))
DATAFRAME = Extra("dataframe", ("pandas",))
NATS = Extra("nats", ("nats",))  # nats-py
REDIS = Extra("redis", ("redis",))  # redis-py
RABBITMQ = Extra("rabbitmq", ("rstream",))


def missing_module(extra: Extra) -> str | None:
    """The first module of `extra` that is not installed, or None."""
    for module in extra.modules:
        try:
            found = importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):  # a parent package missing (google.rpc), or a module set to None
            found = False
        if not found:
            return module
    return None


def require(extra: Extra, what: str) -> None:
    """ConfigError (exit 2) naming `what` needs the extra and the pip command, unless it is installed."""
    module = missing_module(extra)
    if module is not None:
        raise ConfigError(f"{what} needs {module}, which is not installed; pip install 'icetail[{extra.name}]'")
