"""The `icetail` command line: one module per command, output files, progress, the demo."""
