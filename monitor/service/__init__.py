"""The long-running service: scheduler, configuration, HTTP endpoints, metrics, logs."""
