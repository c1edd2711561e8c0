"""Unit tests, one folder per room of the package: cli, planning, engine, reader (split, changes, spark), package."""
