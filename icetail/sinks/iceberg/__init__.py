"""Sinks that commit to an Iceberg table: the changelog, the mirror and the history, on shared commit pieces.

commit.py, ledger.py, evolution.py, schema.py, stager.py and errors.py are shared; changelog.py
appends change rows; mirror/ applies them by key; history/ keeps every version of a key.
"""
