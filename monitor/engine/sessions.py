"""The Spark session a pipeline reads with, when a batch needs one.

Given to it (the caller's SparkSession, or a BackgroundSession still starting: every batch reads
on Spark, the caller chose it), shared (`serve`'s SparkOnDemand: started by the first batch that
needs Spark, stopped after an idle time), or its own (a SparkOnDemand of this pipeline, started by
the first batch on Spark and stopped with the pipeline). A batch read in this process starts none.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Any

from icetail.reader.spark.background import BackgroundSession
from icetail.reader.spark.on_demand import SparkOnDemand
from icetail.reader.spark.session import current_scheduler_pool, is_connect, submitted, use_scheduler_pool


class PipelineSession:
    """`given`: a SparkSession, a BackgroundSession, a shared SparkOnDemand, or None (`own`, made on need)."""

    def __init__(self, given: Any) -> None:
        self.given = given
        self.own: SparkOnDemand | None = None

    @property
    def spark_given(self) -> bool:
        """Whether the caller chose Spark for every batch: a session given (the Spark data source, the
        Python API's `spark=`), or a process launched by spark-submit, whose JVM runs already."""
        return (self.given is not None and not isinstance(self.given, SparkOnDemand)) or submitted()

    def _on_demand(self) -> SparkOnDemand | None:
        if isinstance(self.given, SparkOnDemand):
            return self.given
        if self.given is None:
            if self.own is None:
                self.own = SparkOnDemand()
            return self.own
        return None

    def start(self) -> None:
        """Begin starting Spark in the background (a batch on Spark is coming): its JVM start then
        overlaps the batch's planning, write-ahead and the sink's opening. A given session is as given."""
        on_demand = self._on_demand()
        if on_demand is not None:
            on_demand.start()

    def get(self) -> Any:
        """The session to read with: the given one (waited for if still starting), else the shared or
        own one, started now if it is not up."""
        if isinstance(self.given, BackgroundSession):
            return self.given.result()
        on_demand = self._on_demand()
        if on_demand is None:
            return self.given
        return on_demand.result()

    @contextlib.contextmanager
    def held(self, may_use_spark: bool) -> Iterator[None]:
        """Around a batch: one that may use Spark keeps an on-demand session from its idle stop."""
        on_demand = self._on_demand() if may_use_spark else None
        if on_demand is None:
            yield
            return
        with on_demand.held():
            yield

    def for_tasks(self) -> Any:
        """The session a sink runs its Spark tasks on (SparkTaskSink), its jobs in this thread's pool."""
        session = self.get()
        if not is_connect(session):
            use_scheduler_pool(session.sparkContext, current_scheduler_pool())
        return session

    def on_connect(self) -> bool:
        """Whether batches are read over Spark Connect (SPARK_REMOTE, or a given Connect session),
        known without waiting for a session that is still starting."""
        given = self.given
        return bool(
            os.environ.get("SPARK_REMOTE")
            or (given is not None and not isinstance(given, BackgroundSession | SparkOnDemand) and is_connect(given))
        )

    @property
    def started_own(self) -> bool:
        """Whether this pipeline started a session of its own."""
        return self.own is not None and self.own.starts > 0

    def close(self, *, abandon: bool = False) -> None:
        """Stop the pipeline's own session; `abandon`: one still starting is stopped at once
        (BackgroundSession.abandon) instead of being waited for. A given or shared one is left running."""
        if self.own is not None:
            self.own.close(abandon=abandon)
