"""The PostgreSQL mirror sink: the change stream applied by key to a PostgreSQL table, exactly once.

url.py parses the sink URL, ../keyed_merge.py (shared with the Iceberg mirror) folds a chunk's
changes to one net change per key (pure pyarrow), schema.py maps Arrow types to PostgreSQL and
creates, checks and evolves the target, encode.py turns rows into COPY input, apply.py runs the
one transaction per chunk, and sink.py ties them to the pipeline's sink contract. docs/sinks.md
("PostgreSQL mirror") is the user's view.
"""
