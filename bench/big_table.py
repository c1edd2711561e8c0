"""Build tables of 100,000+ data files in thousands of manifests and snapshots, cheaply (issue 24 §2).

    .venv/bin/python -m bench.big_table --workdir /tmp/icetail-bench/bigplan [--snapshots 5000] [--files 20] [--reuse]

Two tables in one JDBC/SQLite catalog (`bigplan`) under `--workdir` (never the repository; build
the two tables at once only in two workdirs: two builders lock each other out of one SQLite file), both
`--snapshots` append snapshots of `--files` data files each (5,000 x 20 = 100,000 files):

* `ns.unmerged`: Java `newFastAppend`, one new manifest per snapshot, never merged: the head's
  manifest list holds one manifest per snapshot (5,000), the worst case for a manifest list;
* `ns.merged`: Java `newAppend` with Iceberg's default manifest merging (100 manifests, 8 MB):
  a snapshot now and then rewrites the small manifests into one big one (EXISTING entries).

The cheap parts: the data files are one 10-row parquet file, hard-linked once per data file (real,
readable files, no bytes copied); the snapshots are committed to the table's metadata in memory
and the catalog gets it every `--per-commit` snapshots (each snapshot still gets its own manifest
and manifest list, but metadata.json, which grows with the history, is written once per
checkpoint, and no Transaction re-reads the manifest lists it committed to clean up), and old
metadata.json files are deleted as the table goes (`write.metadata.delete-after-commit.enabled`).
`--reuse` keeps tables that are already complete. Prints the build time of each table: 5,000
snapshots of 20 files in ~6.5 min a table on 2 loaded cores (R40).
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from pyiceberg.catalog.sql import SqlCatalog

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:  # `tests.support` is not an installed package
    sys.path.insert(0, str(REPO))

from tests.support.javaref import iceberg_runtime_jar, sqlite_jdbc_jar  # noqa: E402
from tests.support.shade_jackson import shaded_jackson_jar  # noqa: E402

CATALOG = "bigplan"
TABLES = ("unmerged", "merged")
JAVA_SOURCE = Path(__file__).resolve().parent / "java" / "BigTableBuilder.java"


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


def catalog_paths(workdir: Path) -> tuple[Path, Path]:
    """(SQLite catalog file, warehouse directory) of the bench catalog under `workdir`."""
    root = (workdir / "iceberg").resolve()
    return root / "catalog.db", root / "warehouse"


def open_pyiceberg(workdir: Path) -> SqlCatalog:
    db, warehouse = catalog_paths(workdir)
    return SqlCatalog(CATALOG, uri=f"sqlite:///{db}", warehouse=f"file://{warehouse}")


def java_classpath() -> str:
    import pyspark

    jars = Path(pyspark.__file__).resolve().parent / "jars"
    return ":".join([f"{jars}/*", str(iceberg_runtime_jar()), str(shaded_jackson_jar()), str(sqlite_jdbc_jar())])


def _compiled(workdir: Path, classpath: str) -> Path:
    classes = workdir / "classes"
    if not (classes / "BigTableBuilder.class").exists() or (
        (classes / "BigTableBuilder.class").stat().st_mtime < JAVA_SOURCE.stat().st_mtime
    ):
        classes.mkdir(parents=True, exist_ok=True)
        subprocess.run(["javac", "-cp", classpath, "-d", str(classes), str(JAVA_SOURCE)], check=True)
    return classes


def _tiny_parquet(path: Path) -> None:
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False, metadata={b"PARQUET:field_id": b"1"})])
    pq.write_table(pa.table([pa.array(range(10), pa.int64())], schema=schema), str(path))


def complete(workdir: Path, name: str, snapshots: int) -> bool:
    """The table exists with at least `snapshots` snapshots (a reusable earlier build)."""
    db, _ = catalog_paths(workdir)
    if not db.exists():
        return False
    catalog = open_pyiceberg(workdir)
    ident = f"ns.{name}"
    try:
        return len(catalog.load_table(ident).metadata.snapshots) >= snapshots
    except Exception:  # noqa: BLE001 - no namespace, no table: not complete
        return False


def build(workdir: Path, name: str, snapshots: int, files: int, per_commit: int, resume: bool = False) -> float:
    """(Re)create `ns.<name>` with Java (bench/java/BigTableBuilder.java), or continue it (`resume`);
    returns the seconds it took."""
    db, warehouse = catalog_paths(workdir)
    warehouse.mkdir(parents=True, exist_ok=True)
    if db.exists() and not resume:
        catalog = open_pyiceberg(workdir)
        if catalog.table_exists(f"ns.{name}"):
            catalog.drop_table(f"ns.{name}")
    if not resume:
        shutil.rmtree(warehouse / "ns" / name, ignore_errors=True)
        shutil.rmtree(warehouse / "ns.db" / name, ignore_errors=True)
    source = workdir / "tiny.parquet"
    _tiny_parquet(source)
    classpath = java_classpath()
    classes = _compiled(workdir, classpath)
    started = time.perf_counter()
    command = [
        "java", "-Xmx3g", "-cp", f"{classes}:{classpath}", "BigTableBuilder", str(db), f"file://{warehouse}", name,
        str(snapshots), str(files), str(per_commit), str(name == "merged").lower(), str(source),
    ]  # fmt: skip
    subprocess.run(command, check=True)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/icetail-bench/bigplan"))
    parser.add_argument("--snapshots", type=int, default=5000)
    parser.add_argument("--files", type=int, default=20, help="data files per snapshot")
    parser.add_argument("--per-commit", type=int, default=250, help="snapshots per Java transaction")
    parser.add_argument("--tables", default=",".join(TABLES))
    parser.add_argument("--reuse", action="store_true", help="keep tables that are already complete")
    parser.add_argument("--resume", action="store_true", help="continue a table up to --snapshots in all")
    args = parser.parse_args()
    workdir = args.workdir.resolve()
    if workdir.is_relative_to(REPO):
        raise SystemExit("--workdir must be outside the repository")
    workdir.mkdir(parents=True, exist_ok=True)
    for name in args.tables.split(","):
        if args.reuse and complete(workdir, name, args.snapshots):
            log(f"{name}: reused")
            continue
        seconds = build(workdir, name, args.snapshots, args.files, args.per_commit, args.resume)
        table = open_pyiceberg(workdir).load_table(f"ns.{name}")
        head = table.current_snapshot()
        assert head is not None
        log(
            f"{name}: built in {seconds:.1f} s: {len(table.metadata.snapshots)} snapshots, "
            f"{len(head.manifests(table.io))} manifests in the head's list, "
            f"{head.summary['total-data-files'] if head.summary else '?'} data files"
        )


if __name__ == "__main__":
    main()
