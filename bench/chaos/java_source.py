"""The merge-on-read table kinds, written by Java Iceberg while `icetail run` follows the table.

`JavaService` runs bench/chaos/java_writer.py (one pyspark 3.5 JVM with iceberg-spark-runtime
1.10.2) as a child process, started on first use and shared by every trial of the harness run.
`JavaWriter` is the kinds' writer thread: the same seeded moments and unique ids as the pyiceberg
writer of source.py, its operations sent to that process as Spark SQL (DELETE / UPDATE in
merge-on-read mode) or as Java API equality deletes. The kinds:

* `mor-v2`: position-delete files (format v2): appends, DELETEs, an UPDATE (deletes and rows in one snapshot);
* `dv-v3`: the same on format v3 (deletion vectors, rows with lineage; followed `--with-row-lineage`);
* `eq-deletes`: equality-delete files on `id` (Java `RowDelta`), some ids already gone, and a DELETE;
* `wap`: write-audit-publish: every change committed to branch `audit`, `main` fast-forwarded to it
  twice; icetail follows `main`, whose head jumps several snapshots at a publish.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import pyarrow as pa
import pyarrow.parquet as pq

from bench.chaos.source import IDENT, retry_while_locked
from tests.support.catalogs import LocalCatalog

START_TIMEOUT = 300.0
MOR = "'write.delete.mode'='merge-on-read', 'write.update.mode'='merge-on-read', 'write.merge.mode'='merge-on-read'"


class JavaServiceError(RuntimeError):
    pass


class JavaService:
    """The Java writer process; requests are serialized (the writer thread and the check share it)."""

    def __init__(self, log_dir: Path) -> None:
        log_dir.mkdir(parents=True, exist_ok=True)
        self._log = open(log_dir / "java-writer.log", "ab")  # noqa: SIM115 - the child's stderr until close()
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "bench.chaos.java_writer"],
            cwd=Path(__file__).resolve().parents[2],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
            text=True,
            start_new_session=True,
        )
        self._lock = threading.Lock()
        self._read_answer()

    def _read_answer(self) -> Any:
        stdout: IO[str] | None = self._proc.stdout
        assert stdout is not None
        line = stdout.readline()
        if not line:
            raise JavaServiceError(f"java writer exited ({self._proc.poll()}); see its log {self._log.name}")
        answer = json.loads(line)
        if "error" in answer:
            raise JavaServiceError(answer["error"])
        return answer["ok"]

    def request(self, op: str, **args: Any) -> Any:
        with self._lock:
            stdin = self._proc.stdin
            assert stdin is not None
            stdin.write(json.dumps({"op": op, **args}) + "\n")
            stdin.flush()
            return self._read_answer()

    def close(self) -> None:
        if self._proc.stdin is not None:
            self._proc.stdin.close()
        try:
            self._proc.wait(60)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        self._log.close()


_service: JavaService | None = None
_starting = threading.Lock()  # two trials at a time (--jobs 2) share one process


def java_service(log_dir: Path) -> JavaService:
    """The shared process, started on first use (its JVM start is not counted in any trial's runs)."""
    global _service
    with _starting:
        if _service is None:
            _service = JavaService(log_dir)
        return _service


def close_java_service() -> None:
    global _service
    if _service is not None:
        _service.close()
        _service = None


@dataclass
class JavaWriter:
    """Commits the kind's operations through the Java process, in a thread (see source.Writer)."""

    cat: LocalCatalog
    kind: str
    rng: random.Random
    rows: int
    gap: tuple[float, float]
    service: JavaService
    next_id: int = 0
    version: int = 0
    committed: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    _thread: threading.Thread | None = None

    @property
    def table(self) -> str:
        """Where writes go: the audit branch for `wap`."""
        return "{cat}." + IDENT + (".branch_audit" if self.kind == "wap" else "")

    @property
    def icetail_args(self) -> list[str]:
        return ["--with-row-lineage"] if self.kind == "dv-v3" else []

    def create(self) -> None:
        self.service.request("open", name=self.cat.name, root=str(self.cat.root))
        version = 3 if self.kind == "dv-v3" else 2
        props = f"'format-version'='{version}', {MOR}" + (", 'write.wap.enabled'='true'" if self.kind == "wap" else "")
        columns = "id bigint, name string, amount double"
        self._sql(f"CREATE TABLE {{cat}}.{IDENT} ({columns}) USING iceberg TBLPROPERTIES ({props})")
        self._sql(self._insert("{cat}." + IDENT, self.rows))
        if self.kind == "wap":
            self._sql(f"ALTER TABLE {{cat}}.{IDENT} CREATE BRANCH audit")

    def operations(self) -> list[Callable[[], None]]:
        ops: dict[str, list[Callable[[], None]]] = {
            "mor-v2": [self.append, self.delete, self.update, self.append, self.delete],
            "dv-v3": [self.update, self.append, self.delete, self.update, self.delete],
            "eq-deletes": [self.eq_delete, self.append, self.eq_delete, self.delete, self.append],
            "wap": [self.append, self.delete, self.publish, self.update, self.append, self.publish],
        }
        return ops[self.kind]

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="chaos-java-writer", daemon=True)
        self._thread.start()

    def join(self) -> None:
        if self._thread is not None:
            self._thread.join()

    def _run(self) -> None:
        for op in self.operations():
            time.sleep(self.rng.uniform(*self.gap))
            try:
                retry_while_locked(op)
                self.committed.append(op.__name__)
            except Exception as exc:  # noqa: BLE001 - a writer failure is a trial finding, not a crash
                self.errors.append(f"{op.__name__}: {type(exc).__name__}: {exc}"[:400])

    def rows_at(self, snapshot: int, work: Path) -> pa.Table:
        """What Java reads at `snapshot` (the reference for the check)."""
        out = work / "reference" / f"{snapshot}.parquet"
        out.parent.mkdir(parents=True, exist_ok=True)
        if not out.exists():
            self.service.request("rows", name=self.cat.name, table=IDENT, snapshot=snapshot, out=str(out))
        return pq.read_table(out)

    def close(self) -> None:
        self.service.request("close", name=self.cat.name)

    # -- operations -----------------------------------------------------------------------------

    def _sql(self, *statements: str) -> None:
        self.service.request("sql", name=self.cat.name, statements=list(statements))

    def _insert(self, target: str, n: int) -> str:
        lo, hi = self.next_id, self.next_id + n
        self.next_id = hi
        v = self.version
        return (
            f"INSERT INTO {target} SELECT id, concat('name-', id, '-v{v}'), round(id * 0.25 + {v}, 2) "
            f"FROM range({lo}, {hi})"
        )

    def _range(self) -> tuple[int, int]:
        lo = self.rng.randrange(0, max(1, self.next_id - 50))
        return lo, lo + self.rng.randint(5, 60)

    def append(self) -> None:
        self._sql(self._insert(self.table, self.rng.randint(self.rows // 4, self.rows // 2)))

    def delete(self) -> None:
        lo, hi = self._range()
        self._sql(f"DELETE FROM {self.table} WHERE id >= {lo} AND id < {hi}")

    def update(self) -> None:
        """Rows of a range changed in place: merge-on-read writes their deletes and new rows in one snapshot."""
        lo, hi = self._range()
        self.version += 1
        self._sql(
            f"UPDATE {self.table} SET amount = amount + {self.version * 1000}, "
            f"name = concat(name, '-u{self.version}') WHERE id >= {lo} AND id < {hi}"
        )

    def eq_delete(self) -> None:
        """Ids spread over the table, some of them deleted before: an equality delete matches what is live."""
        ids = sorted(self.rng.sample(range(self.next_id), k=min(self.next_id, self.rng.randint(5, 40))))
        self.service.request("eqdelete", name=self.cat.name, table=IDENT, ids=ids)

    def publish(self) -> None:
        self._sql(f"CALL {{cat}}.system.fast_forward('{IDENT}', 'main', 'audit')")
