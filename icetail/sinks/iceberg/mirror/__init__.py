"""The Iceberg mirror: the change stream applied by key to an Iceberg table, exactly once."""
