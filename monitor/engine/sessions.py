"""The Spark session a pipeline reads with: given to it (`serve`'s shared one, perhaps still
starting), or its own, started on a thread only once a batch is known to exist.
"""

from __future__ import annotations

import os
from typing import Any

from icetail.reader.spark.background import BackgroundSession
from icetail.reader.spark.session import current_scheduler_pool, is_connect, use_scheduler_pool


class PipelineSession:
    """`given`: a SparkSession, a BackgroundSession still starting, or None: icetail's own (`own`)."""

    def __init__(self, given: Any) -> None:
        self.given = given
        self.own: BackgroundSession | None = None

    def start(self) -> None:
        """Start icetail's own session on a thread, unless one was given or is started already.

        Called once a batch is known to exist and its cursor is usable, so that planning, the
        batch's checkpoint write and the sink's opening overlap the JVM start and the first
        Python job; a run that finds nothing to do, or refuses its cursor, starts no JVM.
        """
        if self.given is None and self.own is None:
            self.own = BackgroundSession()

    def get(self) -> Any:
        """The session to read with: the given one (waited for if still starting), else our own."""
        if isinstance(self.given, BackgroundSession):
            return self.given.result()
        if self.given is not None:
            return self.given
        self.start()
        assert self.own is not None
        return self.own.result()

    def for_tasks(self) -> Any:
        """The session a sink runs its Spark tasks on (SparkTaskSink), its jobs in this thread's pool."""
        session = self.get()
        if not is_connect(session):
            use_scheduler_pool(session.sparkContext, current_scheduler_pool())
        return session

    def on_connect(self) -> bool:
        """Whether batches are read over Spark Connect (SPARK_REMOTE, or a given Connect session),
        known without waiting for a session that is still starting."""
        return bool(
            os.environ.get("SPARK_REMOTE")
            or (self.given is not None and not isinstance(self.given, BackgroundSession) and is_connect(self.given))
        )

    def close(self, *, abandon: bool = False) -> None:
        """Stop icetail's own session; `abandon`: one still starting is stopped at once
        (BackgroundSession.abandon) instead of being waited for. A given session is left running."""
        if self.own is not None:
            if abandon:
                self.own.abandon()
            else:
                self.own.close()
