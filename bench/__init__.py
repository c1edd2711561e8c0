"""icetail benchmarks: seeded table generation (`bench.generate`), the runner (`bench.run`) and its
parts (`bench.harness`, `bench.session`, `bench.readers`, `bench.cases.*`, `bench.procs`, `bench.report`).

Run `python -m bench.run --help`; see bench/README.md and bench/RESULTS.md.
"""
