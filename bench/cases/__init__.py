"""The bench cases, one module each (`bench.run --cases`), the standalone cases `delivered` and
`cold`, and `fastdaemon`, the experiment that sized the fixes in bench/RESULTS.md."""
