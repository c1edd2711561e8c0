"""The NATS JetStream sink: one Debezium envelope per change, exactly once by JetStream's de-duplication."""
