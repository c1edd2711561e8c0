"""The Redis Streams sink: one Debezium envelope per stream entry, exactly once by a per-consumer mark."""
