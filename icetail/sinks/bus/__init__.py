"""What the message-bus sinks (nats/, redis/, rabbitmq/) share: an asyncio loop for their clients,
the keys of the envelope records."""
