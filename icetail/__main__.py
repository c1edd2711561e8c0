"""`python -m icetail`: the same command line as the `icetail` script."""

from icetail.monitor.cli.launch import entry

entry()
