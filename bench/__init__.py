"""icetail benchmarks: seeded table generation (`bench.generate`) and the runner (`bench.run`).

Run `python -m bench.run --help`; see bench/README.md and docs/performance.md.
"""
