"""Case `recovery`: rows decoded again after a crash between a sink write and its offset commit."""

from __future__ import annotations

import time
from typing import Any

from bench import generate as gen
from bench.harness import Context
from bench.results import CaseResult, Goal
from bench.session import CATALOG


class _FailingSink:
    """Delivers `fail_at - 1` chunks, then raises (a kill between sink write and offset commit)."""

    exactly_once = True

    def __init__(self, fail_at: int | None) -> None:
        self.fail_at = fail_at
        self.writes = 0
        self.rows = 0

    def write(self, key: Any, rows: Any) -> str:
        self.writes += 1
        if self.fail_at is not None and self.writes >= self.fail_at:
            raise RuntimeError(f"injected crash at chunk {self.writes}")
        self.rows += rows.num_rows
        return key.name

    def close(self) -> None:
        pass


def case_recovery(ctx: Context) -> CaseResult:
    from icetail.kernel.errors import IcetailError
    from icetail.monitor.engine.config import PipelineConfig
    from icetail.monitor.engine.pipeline import Pipeline

    result = CaseResult("recovery")
    cat, scale = ctx.catalog, ctx.scale
    gen.create_table(cat, "big")
    seed = gen.seed_snapshot(cat, "big", ctx.data)
    gen.add_files(cat, "big", [ctx.data.big_file])
    n, rg = ctx.data.big_file_rows, scale.row_group_rows
    result.notes.append(f"one file of {n:,} rows in {scale.big_file_row_groups} row groups of {rg:,}")
    variants: list[tuple[str, int | None]] = [("chunk=row group", None), ("chunk=row group/4", max(rg // 4, 1))]
    worst_ok = True
    for label, chunk_rows in variants:
        chunk = chunk_rows or rg
        total_chunks = -(-n // chunk)
        # committed chunks before the crash: half way, and for sub-row-group chunks 3 chunks into a row group
        committed = total_chunks // 2 if chunk_rows is None else (total_chunks // 2) // 4 * 4 + 3
        state = ctx.workdir / f"state-recovery-{chunk}.db"
        state.unlink(missing_ok=True)
        config = PipelineConfig(
            catalog=CATALOG,
            table=cat.ident("big"),
            state_url=f"sqlite:///{state}",
            sink_url="parquet:///unused",
            consumer=f"bench-recovery-{chunk}",
            start=f"snapshot:{seed}",
            chunk_rows=chunk_rows,
        )
        crashing = _FailingSink(committed + 1)
        t0 = time.perf_counter()
        with Pipeline(config, sink=crashing, spark=ctx.spark) as pipeline:  # type: ignore[arg-type]
            try:
                pipeline.run_batch()
                raise AssertionError("the injected crash did not happen")
            except (IcetailError, RuntimeError):
                pass
            checkpoint = pipeline.checkpoint()
        crash_s = time.perf_counter() - t0
        assert checkpoint is not None and checkpoint.inflight is not None
        offset = max((p.next_row_exclusive or 0) for p in checkpoint.inflight.progress)
        resumed_sink = _FailingSink(None)
        t0 = time.perf_counter()
        with Pipeline(config, sink=resumed_sink, spark=ctx.spark) as pipeline:  # type: ignore[arg-type]
            outcome = pipeline.run_batch()
        resume_s = time.perf_counter() - t0
        assert outcome is not None and outcome.resumed and outcome.completed
        delivered = crashing.rows + resumed_sink.rows
        uncommitted = n - offset
        # rows decoded again = what the resumed run decoded beyond the uncommitted rows, plus the chunk
        # that was in flight at the crash (decoded and lost once already)
        in_flight = min(chunk, uncommitted)
        reread = outcome.rows_decoded - uncommitted + in_flight
        chunks_reread = round(reread / chunk, 2)
        ok = chunks_reread <= 1.0
        worst_ok = worst_ok and ok
        result.timings[label] = {
            "chunk_rows": chunk,
            "committed_offset": offset,
            "rows_decoded_on_resume": outcome.rows_decoded,
            "uncommitted_rows": uncommitted,
            "rows_reread": reread,
            "chunks_reread": chunks_reread,
            "rows_delivered_total": delivered,
            "crash_run_s": round(crash_s, 2),
            "resume_run_s": round(resume_s, 2),
        }
        if delivered != n:
            result.notes.append(f"{label}: delivered {delivered} rows in all, expected {n}")
        result.goals.append(Goal(f"recovery re-reads at most one chunk ({label})", "<= 1 chunk", chunks_reread, ok))
    return result
