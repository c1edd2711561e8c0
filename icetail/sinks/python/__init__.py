"""Sinks that hand the rows to Python: a callback, a DataFrame, or nowhere (discard)."""
