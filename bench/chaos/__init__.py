"""Chaos harness (issue 26): randomized trials of table kind x store x sink x fault, checked exactly once.

`python -m bench.chaos --trials N --seed S`; the parts: plan.py (what a trial is), source.py (the
source table and its concurrent writer), places.py (stores and sinks, and what a sink holds),
proxy.py (a TCP proxy PostgreSQL traffic goes through, to cut), faults.py (when and how a run is
hurt), trial.py (one trial), serve_trial.py (`icetail serve` under a fault), replicas_trial.py
(replicas of one `serve` configuration), verify.py (the check against the source's snapshots), report.py.
"""
