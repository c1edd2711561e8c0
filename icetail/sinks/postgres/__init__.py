"""The PostgreSQL targets: the mirror (rows applied by key) and the history (every version), exactly once.

url.py parses the sink URL, ../keyed/merge.py (shared with the Iceberg mirror) folds a chunk's
changes to one net change per key (pure pyarrow), types.py and schema.py map Arrow types to
PostgreSQL and create, check and evolve the target, encode.py turns rows into COPY input,
apply.py (apply_history.py for the history) runs the one transaction per chunk, and mirror.py
(history.py) ties them to the pipeline's sink contract. docs/sinks.md is the user's view.
"""
