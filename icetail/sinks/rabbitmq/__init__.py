"""The RabbitMQ Streams sink: rabbitmq-stream:// URLs, one Debezium envelope per message, exactly once."""
