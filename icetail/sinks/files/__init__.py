"""Sinks that write files: parquet folders (local or an object store) and JSON lines."""
