"""Runs a range or a batch: the Python API, the exactly-once pipeline, startup modes, catalogs."""
