"""The interface of a way of delivering a batch: `Delivery.deliver(batch, tally) -> completed`.

Every way keeps the one order exactly-once rests on (pipeline.py): a chunk's rows are written to
the sink, idempotently under their chunk key, before its offset is committed to the state, and a
stop request ends the batch at a committed chunk, leaving it in flight for the next run.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

from icetail.monitor.engine.delivery.context import BatchToDeliver, DeliveryContext, Tally


class Delivery(ABC):
    """One way of delivering a batch written ahead; chosen by choice.py, made once per run."""

    def __init__(self, context: DeliveryContext) -> None:
        self.context = context

    @abstractmethod
    def deliver(self, batch: BatchToDeliver, tally: Tally) -> bool:
        """Deliver what of `batch` is not committed yet, in order, counting it in `tally`; False when
        a stop request interrupted it (the batch stays in flight)."""
