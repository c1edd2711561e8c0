"""The engine's metrics: batches by the engine that read them, and the Spark session's life.

A `serve` reads small batches in its own process and starts Spark for a big one (SparkOnDemand),
so how often each happens, and whether a JVM is up now, is what sizes its memory.
"""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge

ENGINE_LABELS = ("local", "spark")  # where a batch was read (icetail_batches_total)


@dataclass(frozen=True)
class EngineMetrics:
    batches: Counter
    spark_session_up: Gauge
    spark_session_starts: Counter

    @classmethod
    def create(cls, registry: CollectorRegistry, consumer_labels: tuple[str, ...]) -> EngineMetrics:
        return cls(
            batches=Counter(
                "icetail_batches",
                "Batches delivered (or interrupted), by the engine that read them: local (this process) or spark.",
                (*consumer_labels, "engine"),
                registry=registry,
            ),
            spark_session_up=Gauge(
                "icetail_spark_session_up",
                "1 while this process's Spark session is up or starting (a batch on Spark started it; it "
                "stops after --spark-idle-stop with none), 0 otherwise.",
                registry=registry,
            ),
            spark_session_starts=Counter(
                "icetail_spark_session_starts",
                "Spark sessions this process started (each costs a JVM's start).",
                registry=registry,
            ),
        )

    def register_consumer(self, table: str, consumer: str) -> None:
        for engine in ENGINE_LABELS:
            self.batches.labels(table, consumer, engine)

    def record_batch(self, table: str, consumer: str, engine: str) -> None:
        self.batches.labels(table, consumer, engine).inc()

    def spark_session_changed(self, up: bool, started: bool) -> None:
        """This process's Spark session started (`started`) or stopped (SparkOnDemand's hook)."""
        self.spark_session_up.set(1 if up else 0)
        if started:
            self.spark_session_starts.inc()
