"""`sink-writer`: another writer committing to the Iceberg sink's target table while `icetail run` does.

What a real second writer of a sink table does: it owns rows of its own and appends them (a
backfill, a second pipeline writing into the same table), with pyiceberg's default commit (it
retries a conflict itself, rebasing its append on what icetail committed). Its rows never touch
what icetail owns: their `id` is negative (the source's ids never are), so a mirror's or a
history's keys are not its keys (docs/sinks.md: a mirror/history target must not be written by
key by anyone else; rows outside its keys are kept, the mirror's rewrites only touch files that
can hold its keys). The check: every append it committed is in the target exactly once (an
icetail commit on stale metadata would have dropped it), and nothing of it twice; an append
whose outcome it could not know (an error other than a conflict) may be there once or not at all.
"""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
from pyiceberg.table import Table

from bench.chaos.verify import foreign_rows

FIRST_ID = -1_000_000  # the writer's ids count up from here, below zero


def foreign_table(schema: pa.Schema, ids: list[int], tag: str) -> pa.Table:
    """Rows of `schema` (the target's, as Arrow) with `ids`: required columns get a plain value, the
    others null, except `name` (the tag) and the change columns of a changelog table."""
    n = len(ids)
    columns: dict[str, pa.Array] = {}
    for f in schema:
        value: Any = None
        if f.name == "id":
            columns[f.name] = pa.array(ids, f.type)
            continue
        if f.name == "name" or f.name == "_change_type":
            value = "INSERT" if f.name == "_change_type" else tag
        elif not f.nullable or f.name == "_commit_snapshot_id":
            if pa.types.is_integer(f.type):
                value = -1
            elif pa.types.is_floating(f.type):
                value = 0.0
            elif pa.types.is_string(f.type) or pa.types.is_large_string(f.type):
                value = tag
            elif pa.types.is_timestamp(f.type):
                value = 0
            elif pa.types.is_boolean(f.type):
                value = False
            elif pa.types.is_date(f.type):
                value = 0
        columns[f.name] = pa.array([value] * n, f.type)
    return pa.table(columns, schema=schema)


@dataclass
class SinkWriter:
    """Appends foreign rows to the target (once it exists) every `gap` s while running."""

    load: Callable[[], Table | None]
    rng: random.Random
    gap: tuple[float, float] = (0.3, 1.2)
    next_id: int = FIRST_ID
    committed: list[list[int]] = field(default_factory=list)  # the appends that committed
    unknown: list[list[int]] = field(default_factory=list)  # appends whose outcome it could not know
    errors: list[str] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> None:
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="chaos-sink-writer", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def _run(self) -> None:
        while not self._stop.wait(self.rng.uniform(*self.gap)):
            try:
                table = self.load()
            except Exception:  # noqa: BLE001 - the catalog busy (SQLite locked): next time
                continue
            if table is None:
                continue  # icetail has not created the target yet
            ids = list(range(self.next_id, self.next_id + self.rng.randint(1, 20)))
            self.next_id += len(ids)
            rows = foreign_table(table.schema().as_arrow(), ids, f"foreign-{ids[0]}")
            try:
                table.append(rows)
            except Exception as exc:  # noqa: BLE001 - recorded; committed or not, it is not known
                text = f"{type(exc).__name__}: {exc}"
                if "CommitFailed" in type(exc).__name__ or "locked" in text:
                    continue  # refused: nothing committed
                self.unknown.append(ids)
                self.errors.append(text[:200])
                continue
            self.committed.append(ids)

    @property
    def commits(self) -> int:
        return len(self.committed)

    def check(self, rows: pa.Table | None) -> list[str]:
        """What is wrong with the foreign rows of the target's `rows`: appends missing or repeated."""
        got = Counter(foreign_rows(rows).column("id").to_pylist()) if rows is not None else Counter()
        problems = []
        lost = [ids for ids in self.committed if any(got[i] != 1 for i in ids)]
        if lost:
            missing = sum(1 for ids in lost for i in ids if got[i] == 0)
            n = len(self.committed)
            problems.append(f"{len(lost)} of {n} foreign appends not there once ({missing} rows gone)")
        unknown = [ids for ids in self.unknown if len({got[i] for i in ids}) != 1 or got[ids[0]] > 1]
        if unknown:
            problems.append(f"{len(unknown)} foreign appends of unknown outcome partly there or twice")
        mine = {i for ids in self.committed + self.unknown for i in ids}
        stray = sum(n for i, n in got.items() if i not in mine)
        if stray:
            problems.append(f"{stray} foreign rows no append of the second writer wrote")
        return problems


def loader(load: Callable[[], Table | None]) -> Callable[[], Table | None]:
    """`load`, with a short wait for a busy SQLite catalog instead of failing the writer's turn."""

    def attempt() -> Table | None:
        for _ in range(10):
            try:
                return load()
            except Exception as exc:
                if "locked" not in str(exc):
                    raise
                time.sleep(0.1)
        return None

    return attempt
