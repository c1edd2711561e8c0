"""Process-level service tests: a real SQLite pyiceberg catalog in tmp_path, `icetail serve` (or any
command) as a child process in its own process group, bounded polling, Prometheus samples, change rows.

The children see the catalog through `PYICEBERG_CATALOG__<NAME>__URI` / `__WAREHOUSE` only;
nothing is mocked. Every child is started with `start_new_session=True` so that its whole
group (the Python process and the JVM it launched) is killed on the way out, even when a test
fails half way.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import pyarrow as pa
import pyarrow.dataset as ds
import pytest
from prometheus_client.parser import text_string_to_metric_families
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.table import Table

from tests.support.catalogs import new_catalog

VENV_BIN = Path(sys.executable).parent


ICETAIL = str(VENV_BIN / "icetail")


CATALOG_NAME = "svc"  # lowercase letters only: pyiceberg lowercases env catalog names, `_` becomes `-`


NAMESPACE = "ns"

ID_NAME = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("name", pa.string())])


def id_name_rows(ids: range, tag: str = "v") -> pa.Table:
    """Rows of the service tests' tables (`ID_NAME`): ids, and names `<tag><id>`."""
    return pa.table({"id": list(ids), "name": [f"{tag}{i}" for i in ids]}, schema=ID_NAME)


T = TypeVar("T")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Warehouse:
    """The service tests' catalog (a LocalCatalog under `root`) with namespace `ns`, the same one the children
    open by name."""

    root: Path
    name: str = CATALOG_NAME
    catalog: SqlCatalog = field(init=False)

    def __post_init__(self) -> None:
        self.local = new_catalog(self.root, self.name)
        self.catalog = self.local.catalog()
        self.catalog.create_namespace_if_not_exists(NAMESPACE)

    @property
    def uri(self) -> str:
        return self.local.uri

    @property
    def warehouse(self) -> str:
        return f"file://{self.local.warehouse_path}"

    def env(self) -> dict[str, str]:
        # PYICEBERG_HOME: a directory without .pyiceberg.yaml, so only these variables count
        return {**self.local.env(), "PYICEBERG_HOME": str(self.root)}

    def create_table(self, name: str, schema: pa.Schema, properties: Mapping[str, str] | None = None) -> Table:
        return self.catalog.create_table(f"{NAMESPACE}.{name}", schema=schema, properties=dict(properties or {}))

    def load(self, name: str) -> Table:
        return self.catalog.load_table(f"{NAMESPACE}.{name}")


class Child:
    """A command in its own session, stdout and stderr to files; `kill_group()` ends all of it."""

    def __init__(self, argv: Sequence[str], *, env: Mapping[str, str], cwd: Path, name: str) -> None:
        self.argv = list(argv)
        self.name = name
        self.stdout_path = cwd / f"{name}.stdout"
        self.stderr_path = cwd / f"{name}.stderr"
        with self.stdout_path.open("wb") as out, self.stderr_path.open("wb") as err:
            self.proc = subprocess.Popen(
                self.argv, stdout=out, stderr=err, env=dict(env), cwd=cwd, start_new_session=True
            )
        self.pid = self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")

    def diagnostics(self, limit: int = 6000) -> str:
        out = self.stdout_path.read_text(errors="replace")[-2000:]
        return (
            f"[{self.name}: pid {self.pid}, returncode {self.proc.poll()}]\n"
            f"--- stderr (tail) ---\n{self.stderr()[-limit:]}\n--- stdout (tail) ---\n{out}"
        )

    def signal(self, signum: int) -> None:
        """Signal the process itself, not its group (as Kubernetes signals a container's PID 1)."""
        os.kill(self.pid, signum)

    def wait(self, timeout: float) -> int:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            pytest.fail(f"{self.name} did not exit within {timeout}s\n{self.diagnostics()}")

    def group_alive(self) -> bool:
        """Whether any process of the child's group (e.g. the JVM it launched) is still running."""
        try:
            os.killpg(self.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True

    def kill_group(self) -> None:
        """SIGKILL every process left in the child's group (the JVM may outlive its parent)."""
        try:
            os.killpg(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        if self.proc.poll() is None:
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                pass


def wait_until(
    probe: Callable[[], T | None],
    *,
    timeout: float,
    what: str,
    interval: float = 0.1,
    child: Child | None = None,
) -> T:
    """Poll `probe` until it returns something other than None/False; fail after `timeout` seconds.

    When `child` is given, fail at once if it exits, with its output in the message.
    """
    deadline = time.monotonic() + timeout
    last: Any = None
    while True:
        try:
            last = probe()
        except AssertionError as exc:  # a probe may assert; keep its message for the failure
            last = exc
        else:
            if last is not None and last is not False:
                return last
        if child is not None and not child.alive():
            pytest.fail(f"{child.name} exited while waiting for {what} (last: {last!r})\n{child.diagnostics()}")
        if time.monotonic() >= deadline:
            extra = f"\n{child.diagnostics()}" if child is not None else ""
            pytest.fail(f"timed out after {timeout}s waiting for {what} (last: {last!r}){extra}")
        time.sleep(interval)


Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def http_get(url: str, timeout: float = 2.0) -> tuple[int, str] | None:
    """(status, body), or None when nothing answers yet."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return int(resp.status), resp.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as err:
        return int(err.code), err.read().decode("utf-8", "replace")
    except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
        return None


class Serve(Child):
    """`icetail serve` with its metrics endpoint on 127.0.0.1:`port`."""

    def __init__(self, args: Sequence[str], *, env: Mapping[str, str], cwd: Path, name: str, port: int) -> None:
        super().__init__([ICETAIL, "serve", *args], env=env, cwd=cwd, name=name)
        self.port = port

    def get(self, path: str) -> tuple[int, str] | None:
        return http_get(f"http://127.0.0.1:{self.port}{path}")

    def wait_status(self, path: str, status: int, timeout: float) -> str:
        def probe() -> str | None:
            reply = self.get(path)
            return reply[1] if reply is not None and reply[0] == status else None

        return wait_until(probe, timeout=timeout, what=f"{path} -> {status}", child=self, interval=0.2)

    def samples(self) -> Samples:
        reply = self.get("/metrics")
        assert reply is not None and reply[0] == 200, f"/metrics answered {reply!r}"
        return parse_samples(reply[1])

    def events(self) -> list[dict[str, Any]]:
        """The JSON log lines of stderr (Spark/JVM lines that are not JSON are skipped)."""
        events = []
        for line in self.stderr().splitlines():
            if line.startswith("{"):
                try:
                    events.append(json.loads(line))
                except json.JSONDecodeError:
                    continue
        return events


def parse_samples(text: str) -> Samples:
    """The samples of a Prometheus text exposition, by (name, labels)."""
    out: Samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, frozenset(s.labels.items()))] = float(s.value)
    return out


def sample(samples: Samples, name: str, **labels: str) -> float | None:
    return samples.get((name, frozenset(labels.items())))


def sink_rows(directory: Path) -> pa.Table:
    """Every committed row of a parquet sink directory (`_tmp` is skipped by pyarrow.dataset)."""
    return ds.dataset(str(directory), format="parquet").to_table()


def assert_same_rows(got: pa.Table, expected: pa.Table) -> None:
    """`got` and `expected` hold the same multiset of full rows (same columns, same types)."""
    assert sorted(got.column_names) == sorted(expected.column_names)
    names = sorted(expected.column_names)
    got, expected = got.select(names), expected.select(names)
    for name in names:
        assert got.schema.field(name).type == expected.schema.field(name).type, name
    keys = [(n, "ascending") for n in names]
    got, expected = got.sort_by(keys), expected.sort_by(keys)
    assert got.num_rows == expected.num_rows
    for name in names:
        a, b = got.column(name).combine_chunks(), expected.column(name).combine_chunks()
        if not a.equals(b):
            diff = [i for i in range(len(a)) if a[i] != b[i]][:5]
            raise AssertionError(f"column {name}: rows differ at {diff}: {a.take(diff)} != {b.take(diff)}")


def counts_by_type(table: pa.Table) -> dict[str, int]:
    out: dict[str, int] = {}
    for value in table.column("_change_type").to_pylist():
        out[value] = out.get(value, 0) + 1
    return out
