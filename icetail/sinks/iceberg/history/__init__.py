"""The Iceberg history: every version of every key kept in an Iceberg table, exactly once."""
