"""Fixtures of the differential tests that need more than the root conftest."""

from tests.support.pg_mirror import pg_schema  # noqa: F401  (a fixture)
