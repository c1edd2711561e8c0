"""Pipeline tests: real catalogs, real `icetail` processes, real state stores, real Spark.

Shared helpers (also imported by `bench/crash_soak.py`):

* `LocalCatalog` - a pyiceberg `SqlCatalog` on a SQLite file plus a warehouse directory, and the
  `PYICEBERG_CATALOG__<NAME>__*` variables a child process resolves it with.
* `build_mixed_table` - a table with appends of several multi-row-group files, copy-on-write
  deletes, an overwrite, a schema change; `build_big_file_table` - one file of many row groups.
* `SinkProbe` / `read_sink` - what a parquet or iceberg sink holds, and how much it has grown.
* `row_multiset` / `diff_report` - change rows compared as multisets of full rows.
* `crash_loop` - run `icetail run` over and over, SIGKILLing its process group (the Python
  driver, the Spark JVM and its Python workers at once) by a seeded schedule, until a run exits 0.

pyiceberg reads `PYICEBERG_CATALOG__*` once, when `pyiceberg.catalog` is imported; child
processes get the variables in their environment, in-process code uses `use_catalogs`, which
sets them and re-reads pyiceberg's configuration.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds
import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.expressions import And, EqualTo, GreaterThanOrEqual, In, LessThan
from pyiceberg.table import Table
from pyiceberg.types import StringType

from icetail.state.store import open_store

PG_URL = os.environ.get("ICETAIL_TEST_PG_URL", "postgresql://postgres@127.0.0.1:5432/test")
REPO_ROOT = Path(__file__).resolve().parents[2]
META_COLUMNS = ("_change_type", "_change_ordinal", "_commit_snapshot_id", "_commit_timestamp")


# --------------------------------------------------------------------------------------------
# Catalogs and tables
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LocalCatalog:
    """A SQLite-backed pyiceberg SQL catalog under `root` (name: lower-case letters and digits)."""

    name: str
    root: Path

    @property
    def uri(self) -> str:
        return f"sqlite:///{self.root}/catalog.db"

    @property
    def warehouse_path(self) -> Path:
        return self.root / "warehouse"

    def env(self) -> dict[str, str]:
        key = self.name.upper()
        return {
            f"PYICEBERG_CATALOG__{key}__TYPE": "sql",
            f"PYICEBERG_CATALOG__{key}__URI": self.uri,
            f"PYICEBERG_CATALOG__{key}__WAREHOUSE": f"file://{self.warehouse_path}",
        }

    def catalog(self) -> SqlCatalog:
        return SqlCatalog(self.name, uri=self.uri, warehouse=f"file://{self.warehouse_path}")

    def load(self, ident: str) -> Table:
        return self.catalog().load_table(ident)

    def try_load(self, ident: str) -> Table | None:
        from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError

        try:
            return self.load(ident)
        except (NoSuchTableError, NoSuchNamespaceError):
            return None


def new_catalog(root: Path, name: str) -> LocalCatalog:
    if not name.isalnum() or name.lower() != name:
        raise ValueError(f"catalog name {name!r}: lower-case letters and digits only (pyiceberg env naming)")
    cat = LocalCatalog(name, Path(root).resolve())
    cat.warehouse_path.mkdir(parents=True, exist_ok=True)
    cat.catalog()  # creates the catalog tables
    return cat


def child_env(catalogs: Sequence[LocalCatalog], spark_dir: Path, *, fast_jvm: bool = True) -> dict[str, str]:
    """The environment of an `icetail` child process: the catalogs, Spark scratch under `spark_dir`.

    `fast_jvm`: C1-only JIT for the child's Spark JVM (starts ~30% faster; the JVM then prints
    one "Picked up JDK_JAVA_OPTIONS" line on stderr when Spark starts).
    """
    env = dict(os.environ)
    if fast_jvm:
        env["JDK_JAVA_OPTIONS"] = "-XX:TieredStopAtLevel=1"
    for cat in catalogs:
        env.update(cat.env())
    spark_dir.mkdir(parents=True, exist_ok=True)
    env["SPARK_LOCAL_DIRS"] = str(spark_dir)  # a killed JVM leaves its scratch here, not in /tmp
    env["PYSPARK_PYTHON"] = sys.executable
    env["PYSPARK_DRIVER_PYTHON"] = sys.executable
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH", "")) if p)
    return env


def icetail_command() -> list[str]:
    """The installed `icetail` console script (as users run it), else `python -m monitor.cli`."""
    script = Path(sys.executable).with_name("icetail")
    return [str(script)] if script.exists() else [sys.executable, "-m", "icetail.monitor.cli.main"]


def run_icetail(
    args: Sequence[str], env: dict[str, str], *, timeout: float = 300, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*icetail_command(), *args],
        env=env,
        cwd=cwd or REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


@contextlib.contextmanager
def catalogs_in_process(*catalogs: LocalCatalog) -> Iterator[None]:
    """Make catalogs resolvable by name in this process (pyiceberg caches its env at import)."""
    import pyiceberg.catalog
    from pyiceberg.utils.config import Config

    with pytest.MonkeyPatch.context() as patch:
        for cat in catalogs:
            for key, value in cat.env().items():
                patch.setenv(key, value)
        patch.setattr(pyiceberg.catalog, "_ENV_CONFIG", Config())
        yield


@pytest.fixture
def use_catalogs() -> Iterator[Callable[..., None]]:
    """`use_catalogs(cat, ...)`: `catalogs_in_process` until the end of the test."""
    with contextlib.ExitStack() as stack:
        yield lambda *catalogs: stack.enter_context(catalogs_in_process(*catalogs))


BASE_SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string()), ("amount", pa.float64())])


def make_rows(schema: pa.Schema, ids: Sequence[int], *, version: int = 0) -> pa.Table:
    ids = list(ids)
    columns: dict[str, list[Any]] = {
        "id": ids,
        "name": [f"name-{i}-v{version}" for i in ids],
        "amount": [round(i * 0.25 + version, 2) for i in ids],
    }
    if "note" in schema.names:
        columns["note"] = [None if i % 7 == 0 else f"note-{i % 13}" for i in ids]
    return pa.table(columns, schema=schema)


def build_mixed_table(
    cat: LocalCatalog,
    ident: str,
    *,
    scale: int = 1,
    row_group_rows: int = 150,
    target_file_bytes: int = 24_000,
) -> Table:
    """~11 snapshots of mixed kinds; appends write several files of several row groups each.

    S1 append (several files), S2 append, S3 copy-on-write delete (rewrites a file: carry-overs),
    S4+S5 overwrite (pyiceberg: a delete snapshot then an append), schema change (add `note`),
    S6 append with `note`, S7 delete spanning several files, S8 append (several files),
    S9 delete of part of S8's rows, S10 a delete that matches nothing new plus S11 an append.
    """
    b = 400 * scale
    catalog = cat.catalog()
    namespace = ident.rsplit(".", 1)[0]
    catalog.create_namespace_if_not_exists(namespace)
    table = catalog.create_table(
        ident,
        schema=BASE_SCHEMA,
        properties={
            "write.parquet.row-group-limit": str(row_group_rows),
            "write.target-file-size-bytes": str(target_file_bytes * scale),
        },
    )
    table.append(make_rows(BASE_SCHEMA, range(3 * b)))  # S1
    table.append(make_rows(BASE_SCHEMA, range(3 * b, 4 * b + b // 2)))  # S2
    table.delete(LessThan("id", 40))  # S3
    lo, hi = b - 100, b - 70
    table.overwrite(  # S4 (delete) + S5 (append)
        make_rows(BASE_SCHEMA, range(lo, hi), version=1),
        overwrite_filter=And(GreaterThanOrEqual("id", lo), LessThan("id", hi)),
    )
    with table.update_schema() as update:
        update.add_column("note", StringType())
    table = catalog.load_table(ident)
    schema = table.schema().as_arrow()
    table.append(make_rows(schema, range(5 * b, 5 * b + b // 4)))  # S6
    table.delete(In("id", [100, b + 300, 2 * b + 1, 3 * b + 5, 5 * b + 3]))  # S7
    table.append(make_rows(schema, range(6 * b, 8 * b)))  # S8
    table.delete(And(GreaterThanOrEqual("id", 6 * b + 10), LessThan("id", 6 * b + 30)))  # S9
    table.delete(EqualTo("id", 2 * b + 1))  # S10: already deleted, no snapshot or an empty one
    table.append(make_rows(schema, range(9 * b, 9 * b + 25)))  # S11
    return catalog.load_table(ident)


def build_big_file_table(cat: LocalCatalog, ident: str, *, rows: int, row_group_rows: int) -> Table:
    """One append of one data file of `rows` rows in row groups of `row_group_rows`."""
    catalog = cat.catalog()
    catalog.create_namespace_if_not_exists(ident.rsplit(".", 1)[0])
    table = catalog.create_table(
        ident,
        schema=BASE_SCHEMA,
        properties={
            "write.parquet.row-group-limit": str(row_group_rows),
            "write.target-file-size-bytes": str(1 << 30),
        },
    )
    table.append(make_rows(BASE_SCHEMA, range(rows)))
    return catalog.load_table(ident)


def data_file_layout(table: Table) -> list[tuple[str, int, int]]:
    """(path, rows, row groups) of the current snapshot's data files."""
    import pyarrow.parquet as pq

    out = []
    for task in table.scan().plan_files():
        path = task.file.file_path.removeprefix("file://")
        meta = pq.ParquetFile(path).metadata
        out.append((path, meta.num_rows, meta.num_row_groups))
    return out


# --------------------------------------------------------------------------------------------
# Sinks
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SinkSpec:
    """A sink under test: its URL, and how to read and watch what it holds."""

    kind: str  # parquet | iceberg
    url: str
    directory: Path | None = None  # parquet
    catalog: LocalCatalog | None = None  # iceberg
    ident: str | None = None  # iceberg

    def read(self) -> pa.Table | None:
        if self.kind == "parquet":
            assert self.directory is not None
            return read_parquet_sink(self.directory)
        assert self.catalog is not None and self.ident is not None
        return read_iceberg_sink(self.catalog, self.ident)

    def writes_started(self) -> int:
        """Grows when a sink write begins (parquet: a `_tmp` file; iceberg: a data file)."""
        if self.kind == "parquet":
            assert self.directory is not None
            return sum(1 for _ in self.directory.rglob("*.parquet")) if self.directory.exists() else 0
        assert self.catalog is not None
        return sum(1 for _ in self.catalog.warehouse_path.rglob("data/*.parquet"))

    def writes_done(self) -> int:
        """Grows when a sink write lands (parquet: the rename into place; iceberg: new table metadata)."""
        if self.kind == "parquet":
            assert self.directory is not None
            return sum(1 for _ in self.directory.glob("*.parquet")) if self.directory.exists() else 0
        assert self.catalog is not None
        return sum(1 for _ in self.catalog.warehouse_path.rglob("*.metadata.json"))

    def probe(self, kind: str) -> int:
        return self.writes_started() if kind == "started" else self.writes_done()

    def fingerprint(self) -> tuple[Any, ...]:
        """Changes whenever the sink's committed content could have changed."""
        if self.kind == "parquet":
            assert self.directory is not None
            return tuple(
                sorted((p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in self.directory.glob("*.parquet"))
            )
        assert self.catalog is not None and self.ident is not None
        table = self.catalog.try_load(self.ident)
        if table is None:
            return ()
        return (table.metadata_location, tuple(s.snapshot_id for s in table.metadata.snapshots))


class SimulatedCrash(Exception):
    """Raised by CrashingSink: the process 'dies' here."""


class CrashingSink:
    """A real sink that 'crashes' on its `crash_on`-th write, before or after the write lands."""

    def __init__(self, inner: Any, crash_on: int, *, after_write: bool) -> None:
        self.inner = inner
        self.crash_on = crash_on
        self.after_write = after_write
        self.exactly_once = inner.exactly_once
        self.writes = 0

    def write(self, key: Any, rows: pa.Table) -> str | None:
        self.writes += 1
        if self.writes == self.crash_on and not self.after_write:
            raise SimulatedCrash(f"before write {self.writes} ({key.name})")
        token = self.inner.write(key, rows)
        if self.writes == self.crash_on and self.after_write:
            raise SimulatedCrash(f"after write {self.writes} ({key.name})")
        return token  # type: ignore[no-any-return]

    def close(self) -> None:
        self.inner.close()


def make_sink(kind: str, root: Path, catalog_name: str = "sinkcat", ident: str = "out.changes") -> SinkSpec:
    if kind == "parquet":
        directory = (root / "sink").resolve()
        return SinkSpec("parquet", f"parquet://{directory}", directory=directory)
    if kind == "iceberg":
        cat = new_catalog(root / "sinkcatalog", catalog_name)
        return SinkSpec("iceberg", f"iceberg://{catalog_name}/{ident}", catalog=cat, ident=ident)
    raise ValueError(kind)


def read_parquet_sink(directory: Path) -> pa.Table | None:
    """Committed chunks of a parquet sink directory (`_tmp` is skipped by pyarrow's dataset)."""
    if not directory.exists():
        return None
    dataset = ds.dataset(directory, format="parquet")
    if not dataset.files:
        return None
    assert all("/_tmp/" not in f for f in dataset.files), dataset.files
    # chunk files written before a schema change lack the new column: unify their schemas
    schema = pa.unify_schemas([f.physical_schema for f in dataset.get_fragments()], promote_options="permissive")
    return ds.dataset(directory, format="parquet", schema=schema).to_table()


def read_iceberg_sink(cat: LocalCatalog, ident: str) -> pa.Table | None:
    table = cat.try_load(ident)
    if table is None or table.current_snapshot() is None:
        return None
    return table.scan().to_arrow()


# --------------------------------------------------------------------------------------------
# Comparing change streams
# --------------------------------------------------------------------------------------------


def row_multiset(rows: pa.Table | None, schema: pa.Schema, *, partial: bool = False) -> Counter[tuple[Any, ...]]:
    """Full rows (every column of `schema`, cast to its type) counted; extra sink columns dropped.

    `partial`: the sink may lack columns added to the table after what it holds so far (rows
    of a batch have that batch's schema); they count as nulls.
    """
    if rows is None or rows.num_rows == 0:
        return Counter()
    missing = [f.name for f in schema if f.name not in rows.column_names]
    assert partial or not missing, f"sink rows lack columns {missing}; sink columns: {rows.column_names}"
    columns = [
        rows.column(f.name).cast(f.type).to_pylist() if f.name in rows.column_names else [None] * rows.num_rows
        for f in schema
    ]
    return Counter(zip(*columns, strict=True))


def diff_report(expected: Counter[tuple[Any, ...]], actual: Counter[tuple[Any, ...]], limit: int = 5) -> str:
    """Rows lost and rows duplicated or foreign, with examples; '' when the multisets are equal."""
    lost = expected - actual
    extra = actual - expected
    if not lost and not extra:
        return ""
    lines = [
        f"expected {sum(expected.values())} rows, sink holds {sum(actual.values())}: "
        f"{sum(lost.values())} lost, {sum(extra.values())} duplicated or foreign"
    ]
    for label, bag in (("lost", lost), ("extra", extra)):
        for row, n in list(bag.items())[:limit]:
            lines.append(f"  {label} x{n}: {row}")
    return "\n".join(lines)


def is_submultiset(small: Counter[tuple[Any, ...]], big: Counter[tuple[Any, ...]]) -> bool:
    return not (small - big)


# --------------------------------------------------------------------------------------------
# State stores
# --------------------------------------------------------------------------------------------


def pg_unavailable() -> str | None:
    import psycopg

    try:
        with psycopg.connect(PG_URL, connect_timeout=3):
            return None
    except psycopg.Error as exc:
        return f"PostgreSQL at {PG_URL} unreachable: {exc}"


def new_state_url(kind: str, root: Path) -> str:
    """A URL of an empty store: a SQLite file under `root`, or a fresh PostgreSQL schema."""
    if kind == "sqlite":
        return f"sqlite:///{root.resolve()}/state.db"
    if kind == "postgresql":
        return f"{PG_URL}?schema=icetail_pipe_{uuid.uuid4().hex[:12]}"
    raise ValueError(kind)


def drop_state(url: str) -> None:
    if "?schema=" not in url:
        return
    import psycopg

    base, schema = url.split("?schema=")
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


@pytest.fixture
def state_url_factory(tmp_path: Path) -> Iterator[Callable[[str], str]]:
    """Fresh stores by kind ('sqlite' | 'postgresql'); PostgreSQL schemas are dropped afterwards."""
    made: list[str] = []
    reason = None

    def make(kind: str) -> str:
        nonlocal reason
        if kind == "postgresql":
            reason = reason or pg_unavailable()
            if reason:
                pytest.skip(reason)
        url = new_state_url(kind, tmp_path / f"state{len(made)}")
        (tmp_path / f"state{len(made)}").mkdir(exist_ok=True)
        made.append(url)
        return url

    yield make
    for url in made:
        drop_state(url)


@dataclass(frozen=True)
class StateView:
    """What the store says about one consumer (read by the test between runs)."""

    exists: bool
    cursor: int | None = None
    generation: int = 0
    lease_owner: str | None = None
    inflight_batch: str | None = None
    splits_done: int = 0
    splits: int = 0
    committed_rows: int = 0  # rows of finished batches (history) plus rows committed in flight

    @property
    def stage(self) -> str:
        if not self.exists:
            return "no consumer yet"
        if self.inflight_batch is None:
            return f"between batches (generation {self.generation})"
        return f"in flight {self.splits_done}/{self.splits} splits done"


def view_state(url: str, consumer: str) -> StateView:
    with open_store(url) as store:
        checkpoint = store.load(consumer)
        if checkpoint is None:
            return StateView(False)
        history = store.history(consumer)
    inflight = checkpoint.inflight
    return StateView(
        exists=True,
        cursor=checkpoint.cursor.snapshot_id,
        generation=checkpoint.generation,
        lease_owner=checkpoint.lease.owner if checkpoint.lease else None,
        inflight_batch=inflight.batch.batch_id if inflight else None,
        splits_done=sum(1 for p in inflight.progress if p.done) if inflight else 0,
        splits=len(inflight.progress) if inflight else 0,
        committed_rows=sum(h.rows for h in history) + (inflight.rows_emitted if inflight else 0),
    )


def expire_dead_lease(url: str, consumer: str) -> str | None:
    """Release the lease a killed run left behind (what its TTL expiring would do); the owner, if any.

    `icetail run` has no flag for the lease TTL (120 s), so without this every restart after a
    SIGKILL would be refused for two minutes.
    """
    with open_store(url) as store:
        checkpoint = store.load(consumer)
        if checkpoint is None or checkpoint.lease is None:
            return None
        store.release_lease(consumer, checkpoint.lease.owner)
        return checkpoint.lease.owner


# --------------------------------------------------------------------------------------------
# Killing runs
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class KillTrigger:
    """When to SIGKILL a run: `delay` s after launch ("time"), or `delay` s after `steps` more sink
    writes began ("started": lands inside a sink write) or landed ("written": with a delay of a
    few ms, lands between the sink write and the offset commit, or inside the commit)."""

    kind: str  # time | started | written
    delay: float
    steps: int = 0

    def __str__(self) -> str:
        if self.kind == "time":
            return f"at {self.delay:.2f}s"
        return f"{self.delay * 1000:.0f}ms after {self.steps} sink writes {self.kind}"


def kill_schedule(rng: random.Random, kills: int, *, horizon: float = 25.0) -> list[KillTrigger]:
    """Seeded kill moments covering startup, store, planning, Spark start, reading, sink write, commit.

    The first two hit early: imports and state migration (< 1.5 s), then consumer creation,
    planning, the write-ahead batch and Spark's start (1.5-5 s). The next two are keyed to sink
    writes: a few ms after the run's first sink write began (inside the write), then a few ms
    after a later write landed (before or inside its offset commit). The rest are a seeded mix
    of all three kinds, with longer delays, over the whole run (reading included).
    """
    fixed = [
        KillTrigger("time", rng.uniform(0.0, 1.5)),
        KillTrigger("time", rng.uniform(1.5, 5.0)),
        KillTrigger("started", rng.uniform(0.0, 0.02), 1),
        KillTrigger("written", rng.uniform(0.0, 0.003), rng.randint(1, 4)),
    ]
    plan = fixed[:kills]
    while len(plan) < kills:
        pick = rng.random()
        if pick < 0.3:
            plan.append(KillTrigger("time", rng.uniform(0.0, horizon)))
        elif pick < 0.55:
            plan.append(KillTrigger("started", rng.uniform(0.0, 0.05), rng.randint(1, 6)))
        elif pick < 0.8:
            plan.append(KillTrigger("written", rng.uniform(0.0, 0.005), rng.randint(1, 6)))
        else:
            plan.append(KillTrigger("written", rng.uniform(0.05, 1.0), rng.randint(1, 10)))
    return plan


def _group_alive(pgid: int) -> bool:
    """Does any non-zombie process of process group `pgid` still exist?"""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        fields = text.rsplit(")", 1)[1].split()
        if fields[0] != "Z" and int(fields[2]) == pgid:
            return True
    return False


def kill_group(proc: subprocess.Popen[Any]) -> None:
    """SIGKILL the run's whole process group (driver, JVM, Python workers) and wait until it is gone."""
    pgid = proc.pid
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()
    deadline = time.monotonic() + 20
    while _group_alive(pgid):
        if time.monotonic() > deadline:
            raise AssertionError(f"process group {pgid} survived SIGKILL")
        try:
            os.killpg(pgid, signal.SIGKILL)
        except ProcessLookupError:
            break
        time.sleep(0.05)


@dataclass
class Attempt:
    index: int
    trigger: KillTrigger | None  # None: the final run, left to finish
    killed: bool
    returncode: int
    seconds: float
    stderr: str
    state: StateView | None = None
    sink_rows: int = 0
    note: str = ""

    def line(self) -> str:
        what = f"killed {self.trigger}" if self.killed else f"exited {self.returncode}"
        state = self.state.stage if self.state else "?"
        committed = self.state.committed_rows if self.state else 0
        extra = f"; {self.note}" if self.note else ""
        return (
            f"run {self.index}: {what} after {self.seconds:.2f}s; {state}; "
            f"sink {self.sink_rows} rows, {committed} committed{extra}"
        )


def run_once(
    cmd: Sequence[str],
    env: dict[str, str],
    *,
    trigger: KillTrigger | None,
    probe: Callable[[str], int],
    log_path: Path,
    timeout: float,
) -> tuple[bool, int, float, str]:
    """One run of `cmd`; killed per `trigger` unless it exits first. (killed, returncode, seconds, stderr)."""
    with open(log_path, "w") as log:
        started = time.monotonic()
        proc = subprocess.Popen(
            list(cmd), env=env, cwd=REPO_ROOT, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        killed = False
        try:
            keyed = trigger is not None and trigger.kind != "time"
            baseline = probe(trigger.kind) if keyed and trigger is not None else 0
            fire_at: float | None = started + trigger.delay if trigger is not None and trigger.kind == "time" else None
            while proc.poll() is None:
                now = time.monotonic()
                if now - started > timeout:
                    kill_group(proc)
                    raise AssertionError(f"{' '.join(cmd)} did not finish in {timeout}s; log: {log_path}")
                if keyed and trigger is not None and fire_at is None:
                    if probe(trigger.kind) >= baseline + trigger.steps:
                        fire_at = now + trigger.delay
                if fire_at is not None and now >= fire_at:
                    kill_group(proc)
                    killed = True
                    break
                time.sleep(0.0005 if keyed else 0.005)  # the sink-write-to-commit window is ~1-3 ms
        finally:
            if proc.poll() is None:
                kill_group(proc)
        seconds = time.monotonic() - started
        if not killed:
            # the run ended on its own: make sure nothing of it lingers (e.g. a JVM)
            kill_group(proc)
    return killed, proc.returncode, seconds, log_path.read_text(errors="replace")


@dataclass
class CrashReport:
    attempts: list[Attempt] = field(default_factory=list)

    @property
    def kills(self) -> int:
        return sum(1 for a in self.attempts if a.killed)

    def summary(self) -> str:
        return "\n".join(a.line() for a in self.attempts)


def crash_loop(
    cmd: Sequence[str],
    env: dict[str, str],
    *,
    state_url: str,
    consumer: str,
    sink: SinkSpec,
    schedule: Sequence[KillTrigger],
    logs: Path,
    check: Callable[[Attempt, pa.Table | None], None] | None = None,
    between: Callable[[Attempt], None] | None = None,
    timeout: float = 300,
    final_timeout: float = 600,
) -> CrashReport:
    """Run `cmd` once per trigger, killing it, then once more to completion; `check` after each run.

    A run that exits on its own before its kill moment ends the loop when it exits 0 (caught up)
    and fails it otherwise (its output is in the assertion). After each kill the dead run's lease
    is released, as its expiry would, and `between` runs (e.g. a concurrent writer's commit).
    """
    logs.mkdir(parents=True, exist_ok=True)
    report = CrashReport()
    triggers: list[KillTrigger | None] = [*schedule, None]
    for index, trigger in enumerate(triggers):
        killed, returncode, seconds, output = run_once(
            cmd,
            env,
            trigger=trigger,
            probe=sink.probe,
            log_path=logs / f"run{index:03d}.log",
            timeout=final_timeout if trigger is None else timeout,
        )
        attempt = Attempt(index, trigger, killed, returncode, seconds, output)
        if killed:
            owner = expire_dead_lease(state_url, consumer)
            attempt.note = "" if owner else "no lease held"
        rows = sink.read()
        attempt.state = view_state(state_url, consumer)
        attempt.sink_rows = 0 if rows is None else rows.num_rows
        report.attempts.append(attempt)
        if check is not None:
            check(attempt, rows)
        if killed and between is not None:
            between(attempt)
        if not killed:
            if returncode != 0:
                raise AssertionError(
                    f"run {index} exited {returncode} on its own:\n{output[-3000:]}\nso far:\n{report.summary()}"
                )
            break
    return report
